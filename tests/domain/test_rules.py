"""The pure rules of scheduling, leases, results and search spaces, tested directly."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.domain import results, schedule
from service.domain.states import TRIAL, StudyState, TrialState, after_expired_lease
from service.studies.document import Constraint
from service.studies.space import MAX_GRID_POINTS, GridOrder, SearchSpace

# --- where an expired lease's trial goes (the machines themselves: test_state_machines) ---


@pytest.mark.parametrize(("attempt", "max_attempts", "study", "expected"), [
    (1, 3, "running", TrialState.QUEUED),
    (2, 3, "paused", TrialState.PAUSED),
    (3, 3, "running", TrialState.FAILED),  # the last attempt: no more
    (1, 3, "cancelled", TrialState.CANCELLED),
    (1, 3, "completed", TrialState.CANCELLED),
    (5, 3, "paused", TrialState.FAILED),
])
def test_an_expired_lease_goes_back_as_its_study_is(attempt: int, max_attempts: int, study: str,
                                                    expected: TrialState) -> None:
    target = after_expired_lease(attempt, max_attempts, study)
    assert target == expected
    TRIAL.check(TrialState.RUNNING, target)  # and the machine allows it


# --- scheduling ---------------------------------------------------------------------------

def counts(**changes: object) -> schedule.Counts:
    base = dict(state="running", created=10, completed=5, failed=1, cancelled=0, running=2, max_trials=100,
                max_failed=20, parallelism=8)
    base.update(changes)
    return schedule.Counts(**base)  # type: ignore[arg-type]


@given(st.integers(0, 200), st.integers(0, 50), st.integers(0, 50), st.integers(1, 64), st.integers(1, 300),
       st.integers(1, 100))
def test_asks_keep_parallelism_in_flight_within_the_budget(created: int, completed: int, failed: int,
                                                           parallelism: int, max_trials: int, batch: int) -> None:
    completed, failed = min(completed, created), min(failed, created - min(completed, created))
    c = counts(created=created, completed=completed, failed=failed, running=0, parallelism=parallelism,
               max_trials=max_trials)
    wanted = schedule.asks_wanted(c, batch)
    assert 0 <= wanted <= batch
    assert c.active + wanted <= max(parallelism, c.active)
    assert created + wanted <= max(max_trials, created)
    if wanted < batch:  # asked less than a batch only because a limit was reached
        assert c.active + wanted >= parallelism or created + wanted >= max_trials


def test_no_asks_while_paused_or_past_the_wall_time() -> None:
    assert schedule.asks_wanted(counts(state="paused"), 64) == 0
    assert schedule.asks_wanted(counts(past_wall_time=True), 64) == 0
    assert schedule.asks_wanted(counts(), 64) == 8 - 4


def test_when_a_study_ends() -> None:
    assert schedule.settle(counts()) is None
    too_many = schedule.settle(counts(failed=21, completed=0, created=30))
    assert too_many is not None and too_many.state == StudyState.FAILED and too_many.finish_now
    assert "21 > 20" in too_many.reason
    wall = schedule.settle(counts(past_wall_time=True, running=2))
    assert wall is not None and wall.state == StudyState.COMPLETED and not wall.finish_now  # running ones report
    assert schedule.settle(counts(past_wall_time=True, running=0)).finish_now  # type: ignore[union-attr]
    spent = schedule.settle(counts(created=100, completed=99, failed=1, running=0))
    assert spent is not None and spent.reason == "budget spent" and spent.finish_now
    assert schedule.settle(counts(created=100, completed=98, failed=1, running=1)) is None  # one still running
    exhausted = schedule.settle(counts(created=9, max_trials=9, completed=9, failed=0, running=0),
                                "search space exhausted")
    assert exhausted is not None and exhausted.reason == "search space exhausted"
    assert schedule.settle(counts(state="completed", created=100, completed=100, failed=0)) is None


# --- results ------------------------------------------------------------------------------

OBJECTIVES = ["runtime_ms", "gflops"]


def test_a_result_is_its_objectives_constraints_and_feasibility() -> None:
    constraints = [Constraint(metric="power_w", op="<=", value=600.0), Constraint(metric="gflops", op=">=", value=10)]
    outcome = results.evaluate(OBJECTIVES, constraints, {"runtime_ms": 1.5, "gflops": 12.0, "power_w": 650.0})
    assert outcome.values == {"runtime_ms": 1.5, "gflops": 12.0}
    assert outcome.constraint_values == [50.0, -2.0] and not outcome.feasible
    assert results.evaluate(OBJECTIVES, [], {"runtime_ms": 1.0, "gflops": 1.0}).constraint_values is None


@pytest.mark.parametrize(("metrics", "why"), [
    ({"runtime_ms": 1.0}, "no value for 'gflops'"),
    ({"runtime_ms": math.nan, "gflops": 1.0}, "not a finite number"),
    ({"runtime_ms": 1.0, "gflops": math.inf}, "not a finite number"),
])
def test_a_result_without_usable_values_cannot_complete(metrics: dict[str, float], why: str) -> None:
    with pytest.raises(results.Unusable, match=why):
        results.evaluate(OBJECTIVES, [], metrics)


# --- search spaces ------------------------------------------------------------------------

PARAMETERS = st.lists(st.one_of(
    st.builds(lambda n, lo, w, step: {"type": "int", "low": lo, "high": lo + w * step, "step": step, "default": lo},
              st.just(0), st.integers(-5, 5), st.integers(0, 4), st.integers(1, 3)),
    st.builds(lambda k: {"type": "categorical", "choices": list(range(k)), "default": 0}, st.integers(1, 4)),
    st.just({"type": "bool", "default": True}),
    st.builds(lambda k: {"type": "float", "low": 0.0, "high": 0.5 * k, "step": 0.5, "default": 0.0},
              st.integers(0, 3)),
), min_size=1, max_size=4)


def space_of(params: list[dict]) -> SearchSpace:
    return SearchSpace.parse([{**p, "name": f"p{i}"} for i, p in enumerate(params)])


@settings(max_examples=80, deadline=None)
@given(PARAMETERS)
def test_the_grid_is_counted_and_walked_without_materialising_it(params: list[dict]) -> None:
    space = space_of(params)
    axes = [space.axis_values(name) for name in space.names]
    brute = [dict(zip(space.names, combo, strict=True)) for combo in itertools.product(*axes)]
    assert space.grid_size() == len(brute)
    assert [space.grid_point(i) for i in range(len(brute))] == brute
    for point in brute:
        assert all(space.value_problem(name, value) is None for name, value in point.items())


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 5000), st.integers(0, 2**32 - 1))
def test_the_grid_order_is_a_permutation(size: int, seed: int) -> None:
    order = GridOrder(size, seed)
    assert sorted(order) == list(range(size))
    assert GridOrder(size, seed)[size // 2] == order[size // 2]  # every replica walks it alike


def test_a_grid_at_the_cap_is_counted_and_indexed_in_constant_memory() -> None:
    space = SearchSpace.parse([{"name": "a", "type": "categorical", "choices": list(range(1000)), "default": 0},
                               {"name": "b", "type": "int", "low": 0, "high": 999, "default": 0}])
    assert space.grid_size() == MAX_GRID_POINTS
    order = space.grid_order(7)
    last = space.grid_point(order[MAX_GRID_POINTS - 1])
    assert 0 <= last["a"] < 1000 and 0 <= last["b"] < 1000
    huge = SearchSpace.parse([{"name": f"p{i}", "type": "bool", "default": False} for i in range(200)])
    assert huge.grid_size() == 2**200  # counted, never enumerated
    assert not huge.is_discrete() or huge.grid_point(2**200 - 1) == {f"p{i}": True for i in range(200)}


def test_values_outside_a_parameter_are_named() -> None:
    space = SearchSpace.parse([{"name": "x", "type": "int", "low": 0, "high": 8, "step": 2, "default": 0},
                               {"name": "f", "type": "float", "low": 0.0, "high": 1.0, "default": 0.5}])
    assert space.value_problem("x", 3) == "3 is not in [0, 8] step 2"
    assert space.value_problem("x", True) == "True is not a number"
    assert space.value_problem("f", math.nan) == "nan is not a number"
    assert space.value_problem("f", 0.25) is None
    assert space.value_problem("y", 1) == "'y' is not a parameter of the space"

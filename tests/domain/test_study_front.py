"""A study's front as its scheduling step keeps it (service.scheduling.fronts.Front): members
and hypervolume after every result, checked against a batch recomputation and Optuna."""

from __future__ import annotations

import math

import numpy as np
import pytest

from service.domain.pareto import non_dominated_mask
from service.scheduling.fronts import Front
from service.studies.document import ResolvedObjective

optuna_hv = pytest.importorskip("optuna._hypervolume")


def objectives(n: int) -> list[ResolvedObjective]:
    directions = ["minimize", "maximize", "minimize"][:n]
    return [ResolvedObjective(name=f"f{i}", direction=d) for i, d in enumerate(directions)]


def expected_hypervolume(values: list[dict[str, float]], front_of: Front, base: dict[str, float]) -> float:
    """Optuna's WFG over the non-dominated points, as ratios to the baseline (oriented so
    that smaller is better), inside the reference."""
    minimised = np.array([[-v[o.name] if o.direction == "maximize" else v[o.name] for o in front_of.objectives]
                          for v in values])
    front = [v for v, on in zip(values, non_dominated_mask(minimised), strict=True) if on]
    relative = np.array([[v[o.name] / base[o.name] if o.direction == "minimize" else base[o.name] / v[o.name]
                          for o in front_of.objectives] for v in front])
    reference = np.array(front_of.reference)
    inside = relative[np.all(relative < reference, axis=1)]
    return float(optuna_hv.compute_hypervolume(inside, reference)) if len(inside) else 0.0


@pytest.mark.parametrize("n_objectives", [2, 3])
def test_the_front_keeps_its_hypervolume_result_by_result_and_across_a_new_baseline(n_objectives: int) -> None:
    rng = np.random.default_rng(n_objectives)
    results = [{f"f{i}": float(v) for i, v in enumerate(row)} for row in 0.2 + rng.random((400, n_objectives))]
    front = Front(objectives(n_objectives), [2.0] * n_objectives, {}, None)
    for key, values in enumerate(results[:100]):  # before the baseline: no ratios, no volume
        front.offer(key, values, None)
    assert front.hypervolume() == 0.0
    baseline = {f"f{i}": 0.7 for i in range(n_objectives)}
    front.rebase(baseline)
    assert front.hypervolume() == pytest.approx(expected_hypervolume(results[:100], front, baseline), rel=1e-9)
    for key, values in enumerate(results[100:], start=100):
        front.offer(key, values, baseline)
        if key % 50 == 0 or key == len(results) - 1:
            expected = expected_hypervolume(results[: key + 1], front, baseline)
            assert front.hypervolume() == pytest.approx(expected, rel=1e-9)
    # a step that starts anew
    loaded = Front(front.objectives, front.reference, {key: front.values[key] for key in front.members.member_keys()},
                   baseline)
    assert loaded.hypervolume() == pytest.approx(front.hypervolume(), rel=1e-12)


def test_a_member_without_a_finite_ratio_adds_no_volume() -> None:
    front = Front(objectives(2), [2.0, 2.0], {}, None)
    front.offer(1, {"f0": 0.5, "f1": 3.0}, {"f0": 0.0, "f1": 1.0})  # a zero baseline: f0's ratio is not finite
    assert len(front) == 1 and front.hypervolume() == 0.0
    front.rebase({"f0": 1.0, "f1": 1.0})
    assert front.hypervolume() == pytest.approx((2.0 - 0.5) * (2.0 - 1 / 3.0))
    assert math.isfinite(front.hypervolume())

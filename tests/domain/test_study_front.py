"""A study's front as its scheduling step keeps it (service.scheduling.fronts.Front): members
and hypervolume after every result, checked against a batch recomputation and Optuna."""

from __future__ import annotations

import math

import numpy as np
import pytest

from service.domain.pareto import non_dominated_mask
from service.scheduling.fronts import Front
from service.store.models import Study

optuna_hv = pytest.importorskip("optuna._hypervolume")


def study(n_objectives: int, baseline: dict[str, float] | None) -> Study:
    directions = ["minimize", "maximize", "minimize"][:n_objectives]
    return Study(objectives=[{"name": f"f{i}", "direction": d} for i, d in enumerate(directions)],
                 reference_point=[2.0] * n_objectives, baseline_values=baseline)


def expected_hypervolume(values: list[dict[str, float]], s: Study) -> float:
    """Optuna's WFG over the non-dominated points, as ratios to the baseline (oriented so
    that smaller is better), inside the reference."""
    minimised = np.array([[-v[o["name"]] if o["direction"] == "maximize" else v[o["name"]] for o in s.objectives]
                          for v in values])
    front = [v for v, on in zip(values, non_dominated_mask(minimised), strict=True) if on]
    base = s.baseline_values
    relative = np.array([[v[n] / base[n] if o["direction"] == "minimize" else base[n] / v[n]
                          for o in s.objectives for n in [o["name"]]] for v in front])
    reference = np.array(s.reference_point)
    inside = relative[np.all(relative < reference, axis=1)]
    return float(optuna_hv.compute_hypervolume(inside, reference)) if len(inside) else 0.0


@pytest.mark.parametrize("n_objectives", [2, 3])
def test_the_front_keeps_its_hypervolume_result_by_result_and_across_a_new_baseline(n_objectives: int) -> None:
    rng = np.random.default_rng(n_objectives)
    results = [{f"f{i}": float(v) for i, v in enumerate(row)} for row in 0.2 + rng.random((400, n_objectives))]
    s = study(n_objectives, baseline=None)
    front = Front(s, {})
    for key, values in enumerate(results[:100]):  # before the baseline: no ratios, no volume
        front.offer(s, key, values)
    assert front.hypervolume() == 0.0
    s.baseline_values = {f"f{i}": 0.7 for i in range(n_objectives)}
    front.rebase(s)
    assert front.hypervolume() == pytest.approx(expected_hypervolume(results[:100], s), rel=1e-9)
    for key, values in enumerate(results[100:], start=100):
        front.offer(s, key, values)
        if key % 50 == 0 or key == len(results) - 1:
            assert front.hypervolume() == pytest.approx(expected_hypervolume(results[: key + 1], s), rel=1e-9)
    loaded = Front(s, {key: front.values[key] for key in front.members.member_keys()})  # a step that starts anew
    assert loaded.hypervolume() == pytest.approx(front.hypervolume(), rel=1e-12)


def test_a_member_without_a_finite_ratio_adds_no_volume() -> None:
    s = study(2, baseline={"f0": 0.0, "f1": 1.0})  # a zero baseline: the ratio of f0 (minimised) is not finite
    front = Front(s, {})
    front.offer(s, 1, {"f0": 0.5, "f1": 3.0})
    assert len(front) == 1 and front.hypervolume() == 0.0
    s.baseline_values = {"f0": 1.0, "f1": 1.0}
    front.rebase(s)
    assert front.hypervolume() == pytest.approx((2.0 - 0.5) * (2.0 - 1 / 3.0))
    assert math.isfinite(front.hypervolume())

"""Pareto front and hypervolume: properties, known values, and agreement with independent
implementations (a brute-force check written here, inclusion-exclusion, and Optuna's)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from service.domain.pareto import (
    Hypervolume2D,
    IncrementalFront,
    dominates,
    hypervolume,
    hypervolume_history,
    non_dominated_mask,
    relative_to_baseline,
    to_minimisation,
    update_front,
)

# Per test, not a global profile, so other suites keep their own settings. No example
# database: the tree stays clean, and the data here is cheap to regenerate.
examples = settings(deadline=None, database=None)


# --- strategies and independent oracles ----------------------------------------------------


@st.composite
def point_sets(draw: st.DrawFn, min_m: int = 1, max_m: int = 4, max_n: int = 30) -> np.ndarray:
    """Small point sets; half of them on a coarse integer grid so ties and duplicates are common."""
    m = draw(st.integers(min_m, max_m))
    n = draw(st.integers(0, max_n))
    if draw(st.booleans()):
        values = st.integers(0, 6).map(float)
    else:
        values = st.floats(0, 10, allow_nan=False, allow_infinity=False, width=32)
    flat = draw(st.lists(values, min_size=n * m, max_size=n * m))
    return np.array(flat, dtype=float).reshape(n, m)


@st.composite
def fronts(draw: st.DrawFn, m: int, max_n: int = 60) -> np.ndarray:
    """Points on the positive unit sphere: mutually non-dominated, the shape of a study's front."""
    n = draw(st.integers(1, max_n))
    directions = draw(arrays(np.float64, (n, m), elements=st.floats(0.01, 1.0)))
    return directions / np.linalg.norm(directions, axis=1, keepdims=True)


def brute_force_mask(points: np.ndarray) -> np.ndarray:
    """O(n^2) definition: kept unless some row is <= everywhere and < somewhere."""
    no_worse = np.all(points[:, None, :] <= points[None, :, :], axis=2)
    better = np.any(points[:, None, :] < points[None, :, :], axis=2)
    return ~np.any(no_worse & better, axis=0)


def inclusion_exclusion_hypervolume(points: np.ndarray, reference: np.ndarray) -> float:
    """Exponential but obviously right: union of boxes by inclusion-exclusion."""
    inside = [p for p in points if np.all(p < reference)]
    total = 0.0
    for size in range(1, len(inside) + 1):
        for subset in itertools.combinations(inside, size):
            corner = np.max(subset, axis=0)
            total += (-1) ** (size + 1) * float(np.prod(reference - corner))
    return total


def optuna_hypervolume(points: np.ndarray, reference: np.ndarray) -> float:
    wfg = pytest.importorskip("optuna._hypervolume")
    inside = points[np.all(points < reference, axis=1)]
    return float(wfg.compute_hypervolume(inside, reference)) if len(inside) else 0.0


def optuna_front(points: np.ndarray) -> np.ndarray:
    multi_objective = pytest.importorskip("optuna.study._multi_objective")
    return multi_objective._is_pareto_front(points, assume_unique_lexsorted=False)


def reference_for(points: np.ndarray) -> np.ndarray:
    """A reference that leaves most, but not always all, points inside."""
    return np.full(points.shape[1], 5.5)


def on_sphere(rng: np.random.Generator, n: int, m: int) -> np.ndarray:
    """Points that are all mutually non-dominated: the worst case for front sizes."""
    points = np.abs(rng.normal(size=(n, m)))
    return points / np.linalg.norm(points, axis=1, keepdims=True)


# --- dominance and conversions -------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ((1, 2), (2, 3), True),
        ((1, 3), (2, 3), True),
        ((1, 2), (1, 2), False),
        ((1, 4), (2, 3), False),
        ((2, 3), (1, 2), False),
        ((0.0,), (1.0,), True),
    ],
)
def test_dominates(a: tuple[float, ...], b: tuple[float, ...], expected: bool) -> None:
    assert dominates(a, b) is expected


def test_dominates_rejects_different_objective_counts() -> None:
    with pytest.raises(ValueError, match="objectives"):
        dominates((1, 2), (1, 2, 3))


def test_to_minimisation_negates_maximised_objectives() -> None:
    assert to_minimisation([1.5, 2, 0.0], ["minimize", "maximize", "minimize"]) == (1.5, -2.0, 0.0)


@pytest.mark.parametrize(
    ("values", "directions"), [([1.0], ["minimize", "maximize"]), ([1.0], ["max"])]
)
def test_to_minimisation_rejects_bad_directions(values: list[float], directions: list[str]) -> None:
    with pytest.raises(ValueError):
        to_minimisation(values, directions)


def test_relative_to_baseline_omits_objectives_without_a_usable_baseline() -> None:
    values = {"runtime_ms": 0.8, "energy_mj": 3.0, "p99_ms": 2.0, "power_w": 600.0}
    baseline = {"runtime_ms": 1.0, "energy_mj": 0.0, "power_w": None, "unused": 4.0}
    assert relative_to_baseline(values, baseline) == {"runtime_ms": 0.8}


# --- the front -----------------------------------------------------------------------------


@examples
@given(point_sets())
def test_front_is_mutually_non_dominated_and_covers_the_rest(points: np.ndarray) -> None:
    mask = non_dominated_mask(points)
    front, rest = points[mask], points[~mask]
    assert len(points) == 0 or mask.any()
    for a, b in itertools.permutations(front, 2):
        assert not dominates(a, b)
    for point in rest:
        assert any(dominates(member, point) for member in front)


@examples
@given(point_sets())
def test_mask_matches_brute_force(points: np.ndarray) -> None:
    np.testing.assert_array_equal(non_dominated_mask(points), brute_force_mask(points))


@examples
@given(point_sets(), st.data())
def test_mask_does_not_depend_on_row_order(points: np.ndarray, data: st.DataObject) -> None:
    order = data.draw(st.permutations(range(len(points))))
    expected = non_dominated_mask(points)[order]
    np.testing.assert_array_equal(non_dominated_mask(points[order]), expected)


def test_equal_points_both_stay_on_the_front() -> None:
    points = np.array([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0], [2.0, 2.0, 3.0], [0.0, 5.0, 5.0]])
    assert non_dominated_mask(points).tolist() == [True, True, False, True]
    assert non_dominated_mask(points[:, :2]).tolist() == [True, True, False, True]


@examples
@given(point_sets())
def test_update_front_point_by_point_equals_the_batch_mask(points: np.ndarray) -> None:
    front: list[tuple[int, tuple[float, ...]]] = []
    for index, row in enumerate(points):
        point = tuple(row.tolist())
        on_front, removed = update_front(front, index, point)
        assert on_front or not removed
        front = [entry for entry in front if entry[0] not in set(removed)]
        if on_front:
            front.append((index, point))
    assert sorted(key for key, _ in front) == np.flatnonzero(non_dominated_mask(points)).tolist()


@examples
@given(point_sets(max_n=60))
def test_the_incremental_front_decides_as_update_front_and_ends_on_the_batch_mask(points: np.ndarray) -> None:
    front: list[tuple[int, tuple[float, ...]]] = []
    incremental: IncrementalFront[int] = IncrementalFront(points.shape[1], n_extra=1)
    for index, row in enumerate(points):
        point = tuple(row.tolist())
        expected = update_front(front, index, point)
        joined, removed = incremental.update(index, point, (index * 10.0,))
        assert (joined, sorted(removed)) == (expected[0], sorted(expected[1]))
        front = [entry for entry in front if entry[0] not in set(expected[1])]
        if expected[0]:
            front.append((index, point))
        keys = incremental.member_keys()
        assert sorted(keys) == sorted(key for key, _ in front)
        assert incremental.extra[:, 0].tolist() == [key * 10.0 for key in keys]  # each row stays with its member
        assert incremental.points.tolist() == [list(points[key]) for key in keys]
    assert sorted(incremental.member_keys()) == np.flatnonzero(brute_force_mask(points)).tolist()


@pytest.mark.parametrize("m", [2, 3])
def test_the_incremental_front_refuses_nan_and_extra_rows_of_another_shape(m: int) -> None:
    front: IncrementalFront[str] = IncrementalFront(m, n_extra=1)
    assert front.update("a", [1.0] * m, (5.0,)) == (True, [])
    if m == 2:  # the vectorised path lets a NaN point join, as `update_front` does
        with pytest.raises(ValueError, match="NaN"):
            front.update("b", [math.nan, 0.0], (6.0,))
    with pytest.raises(ValueError, match="extra rows of shape"):
        front.extra = np.zeros((2, 1))
    front.extra = np.array([[7.0]])
    assert front.extra.tolist() == [[7.0]] and front.member_keys() == ["a"]


def test_update_front_leaves_its_input_alone() -> None:
    front = [("a", (1.0, 3.0)), ("b", (3.0, 1.0))]
    assert update_front(front, "c", (0.5, 0.5)) == (True, ["a", "b"])
    assert update_front(front, "d", (2.0, 3.0)) == (False, [])
    assert update_front(front, "e", (1.0, 3.0)) == (True, [])
    assert front == [("a", (1.0, 3.0)), ("b", (3.0, 1.0))]


@pytest.mark.parametrize("m", [2, 3, 4])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mask_matches_optuna_on_random_data(m: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    points = np.vstack(
        [
            rng.random((2000, m)),
            rng.integers(0, 8, (2000, m)).astype(float),
            on_sphere(rng, 500, m),
        ]
    )
    points = np.vstack([points, points[:100]])  # exact duplicates
    mask = non_dominated_mask(points)
    np.testing.assert_array_equal(mask, optuna_front(points))
    sample = points[rng.choice(len(points), 1500, replace=False)]
    np.testing.assert_array_equal(non_dominated_mask(sample), brute_force_mask(sample))


@pytest.mark.parametrize("m", [2, 3, 4])
def test_mask_handles_100k_points(m: int) -> None:
    points = np.random.default_rng(7).random((100_000, m))
    mask = non_dominated_mask(points)
    assert 0 < mask.sum() < 2000
    np.testing.assert_array_equal(mask, optuna_front(points))


def test_mask_handles_100k_points_all_on_a_3d_front() -> None:
    points = on_sphere(np.random.default_rng(8), 100_000, 3)
    assert non_dominated_mask(points).all()


# --- hypervolume ---------------------------------------------------------------------------


def test_hypervolume_known_values() -> None:
    assert hypervolume([[2.0]], [5.0]) == 3.0
    assert hypervolume([[1, 3], [2, 2], [3, 1]], [4, 4]) == 6.0
    corners = [[0, 0.5, 0.5], [0.5, 0, 0.5], [0.5, 0.5, 0]]
    assert hypervolume(corners, [1, 1, 1]) == pytest.approx(0.5)
    assert hypervolume([c + [0.0] for c in corners], [1, 1, 1, 1]) == pytest.approx(0.5)
    assert hypervolume(np.zeros((0, 3)), [1, 1, 1]) == 0.0


@examples
@given(point_sets(), st.data())
def test_hypervolume_of_one_point_is_its_box(points: np.ndarray, data: st.DataObject) -> None:
    m = points.shape[1]
    point = data.draw(st.lists(st.floats(-10, 10), min_size=m, max_size=m))
    sides = data.draw(st.lists(st.floats(0.01, 10), min_size=m, max_size=m))
    reference = [p + s for p, s in zip(point, sides, strict=True)]
    expected = math.prod(r - p for r, p in zip(reference, point, strict=True))
    assert hypervolume([point], reference) == pytest.approx(expected, rel=1e-9)


@examples
@given(point_sets())
def test_points_outside_the_reference_add_nothing(points: np.ndarray) -> None:
    reference = reference_for(points)
    on_boundary = points.copy()
    rows = np.arange(len(points))
    on_boundary[rows, rows % points.shape[1]] = reference[0]
    assert hypervolume(on_boundary, reference) == 0.0
    assert hypervolume(points + 6, reference) == 0.0
    assert hypervolume(np.vstack([points, points + 6]), reference) == hypervolume(points, reference)


@examples
@given(point_sets(), st.data())
def test_hypervolume_grows_when_points_are_added(points: np.ndarray, data: st.DataObject) -> None:
    reference = reference_for(points)
    split = data.draw(st.integers(0, len(points)))
    before = hypervolume(points[:split], reference)
    after = hypervolume(points, reference)
    assert after >= before - 1e-12 * max(1.0, before)


@examples
@given(point_sets(), st.data())
def test_hypervolume_ignores_order_and_dominated_points(
    points: np.ndarray, data: st.DataObject
) -> None:
    reference = reference_for(points)
    expected = hypervolume(points, reference)
    shuffled = points[data.draw(st.permutations(range(len(points))))]
    assert hypervolume(shuffled, reference) == pytest.approx(expected, rel=1e-12, abs=1e-12)
    dominated = np.vstack([points, points + 0.25, points])
    assert hypervolume(dominated, reference) == pytest.approx(expected, rel=1e-12, abs=1e-12)


@examples
@given(point_sets(max_n=7))
def test_hypervolume_matches_inclusion_exclusion(points: np.ndarray) -> None:
    reference = reference_for(points)
    expected = inclusion_exclusion_hypervolume(points, reference)
    assert hypervolume(points, reference) == pytest.approx(expected, rel=1e-9, abs=1e-9)


@examples
@given(point_sets(min_m=2))
def test_hypervolume_matches_optuna(points: np.ndarray) -> None:
    reference = reference_for(points)
    expected = optuna_hypervolume(points, reference)
    assert hypervolume(points, reference) == pytest.approx(expected, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("m", [2, 3, 4])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hypervolume_matches_optuna_on_random_data(m: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    reference = np.full(m, 1.05)
    for points in (rng.random((300, m)), on_sphere(rng, 200, m), rng.random((50, m)) * 1.1):
        expected = optuna_hypervolume(points, reference)
        assert hypervolume(points, reference) == pytest.approx(expected, rel=1e-9)


@examples
@given(st.sampled_from([3, 4]).flatmap(fronts))
def test_front_and_hypervolume_match_optuna_on_random_fronts(front: np.ndarray) -> None:
    reference = np.full(front.shape[1], 1.1)
    np.testing.assert_array_equal(non_dominated_mask(front), optuna_front(front))
    assert hypervolume(front, reference) == pytest.approx(optuna_hypervolume(front, reference), rel=1e-9)


@examples
@given(st.sampled_from([3, 4]).flatmap(fronts), st.data())
def test_duplicates_and_points_beyond_the_reference_match_optuna(front: np.ndarray, data: st.DataObject) -> None:
    """A reference that cuts through the front (points near an axis lie beyond it), repeated
    members, dominated copies and points on the reference's boundary."""
    m = front.shape[1]
    reference = np.full(m, 0.9)
    repeated = front[data.draw(st.lists(st.integers(0, len(front) - 1), max_size=20))]
    on_boundary = front * 0.5
    on_boundary[:, 0] = reference[0]
    points = np.vstack([front, repeated, front * 1.5, on_boundary])
    points = points[data.draw(st.permutations(range(len(points))))]
    np.testing.assert_array_equal(non_dominated_mask(points), optuna_front(points))
    expected = optuna_hypervolume(points, reference)
    assert hypervolume(points, reference) == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert hypervolume(front, reference) == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_hypervolume_rejects_what_it_cannot_measure() -> None:
    with pytest.raises(ValueError, match="NaN"):
        hypervolume([[1.0, math.nan]], [2.0, 2.0])
    with pytest.raises(ValueError, match="finite"):
        hypervolume([[1.0, 1.0]], [2.0, math.inf])
    with pytest.raises(ValueError, match="objectives"):
        hypervolume([[1.0, 1.0, 1.0]], [2.0, 2.0])
    assert hypervolume([[-math.inf, 1.0]], [2.0, 2.0]) == math.inf


@examples
@given(point_sets())
def test_hypervolume_history_is_the_running_hypervolume(points: np.ndarray) -> None:
    reference = reference_for(points)
    history = hypervolume_history(points, reference)
    expected = [hypervolume(points[: i + 1], reference) for i in range(len(points))]
    assert history == pytest.approx(expected, rel=1e-12, abs=1e-12)
    assert all(b >= a for a, b in itertools.pairwise(history))


@examples
@given(point_sets(min_m=2, max_m=2, max_n=40))
def test_the_running_2d_hypervolume_is_that_of_the_points_so_far(points: np.ndarray) -> None:
    reference = reference_for(points)
    running = Hypervolume2D(reference)
    for i, row in enumerate(points):
        assert running.add(row) == pytest.approx(optuna_hypervolume(points[: i + 1], reference), rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("seed", [0, 1])
def test_the_running_2d_hypervolume_follows_a_front_that_fills_in(seed: int) -> None:
    """Thousands of points that mostly land on the front and push earlier members off (the
    shape of a study's front as a sampler closes in), checked against Optuna at intervals."""
    rng = np.random.default_rng(seed)
    x = rng.random(3000)
    y = (1 - np.sqrt(x)) * np.linspace(3.0, 1.0, 3000) + 0.01 * rng.random(3000)
    points = np.column_stack([x, y])
    reference = np.array([1.1, 3.5])
    running = Hypervolume2D(reference)
    for i, row in enumerate(points):
        volume = running.add(row)
        if i % 500 == 499:
            assert volume == pytest.approx(optuna_hypervolume(points[: i + 1], reference), rel=1e-9)


def test_the_running_2d_hypervolume_skips_the_unknown_and_refuses_a_bad_reference() -> None:
    running = Hypervolume2D([2.0, 2.0])
    assert running.add([math.nan, 1.0]) == 0.0  # unknown: adds nothing
    assert running.add([3.0, 1.0]) == 0.0 and running.add([math.inf, 0.5]) == 0.0  # outside the reference
    assert running.add([1.0, 1.0]) == 1.0
    assert running.add([-math.inf, 1.5]) == math.inf  # as `hypervolume` says
    with pytest.raises(ValueError, match="2 objectives"):
        Hypervolume2D([1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="finite"):
        Hypervolume2D([1.0, math.inf])

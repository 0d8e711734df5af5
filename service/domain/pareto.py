"""Pareto fronts and hypervolume over objective vectors, with no I/O.

Every function here takes points already converted to MINIMISATION (see `to_minimisation`),
so one dominance rule serves every study whatever its objective directions.

Equal points never dominate each other: two trials that measured the same numbers both stay on
the front, because the service cannot tell which one a user would pick.

The batch front and hypervolume are moocore's (C, the best-known algorithms per dimension); the
front and two-objective hypervolume kept result by result are here, as no library has them.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from typing import Generic, TypeVar

import moocore
import numpy as np
from numpy.typing import ArrayLike, NDArray

K = TypeVar("K")
FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]
Reference = Sequence[float] | FloatArray

DIRECTIONS = ("minimize", "maximize")


def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """True when `a` is no worse than `b` in every objective and better in at least one."""
    if len(a) != len(b):
        raise ValueError(f"points have {len(a)} and {len(b)} objectives; they must match")
    strictly_better = False
    for x, y in zip(a, b, strict=True):
        if x > y:
            return False
        if x < y:
            strictly_better = True
    return strictly_better


def to_minimisation(values: Sequence[float], directions: Sequence[str]) -> tuple[float, ...]:
    """Negates maximised objectives so every function here can assume minimisation."""
    if len(values) != len(directions):
        raise ValueError(
            f"{len(values)} values but {len(directions)} directions; give one direction per value"
        )
    converted: list[float] = []
    for value, direction in zip(values, directions, strict=True):
        if direction not in DIRECTIONS:
            raise ValueError(f"direction {direction!r} is not one of {DIRECTIONS}")
        converted.append(-float(value) if direction == "maximize" else float(value))
    return tuple(converted)


def relative_to_baseline(
    values: Mapping[str, float], baseline: Mapping[str, float | None]
) -> dict[str, float]:
    """value / baseline per objective, so users read "0.8x the default build" directly.

    Objectives without a usable baseline (absent, None or zero) are left out rather than
    reported as inf or nan, which a dashboard would render as a misleading number.
    """
    ratios: dict[str, float] = {}
    for name, value in values.items():
        reference = baseline.get(name)
        if value is None or reference is None or reference == 0:
            continue
        ratios[name] = float(value) / float(reference)
    return ratios


def update_front(
    front: Sequence[tuple[K, Sequence[float]]], key: K, point: Sequence[float]
) -> tuple[bool, list[K]]:
    """Decides how one new result changes a front, in O(len(front)).

    Returns whether the new point belongs on the front and the keys it pushes off. `front` is
    not modified and `key` does not affect the decision: the caller (the store) records the
    new trial and flips the flags of exactly these keys. A dominated point cannot dominate any
    front member (dominance is transitive and the front is mutually non-dominated), so a
    rejected point never removes anything.
    """
    for _, member in front:
        if dominates(member, point):
            return False, []
    removed = [member_key for member_key, member in front if dominates(point, member)]
    return True, removed


class IncrementalFront(Generic[K]):
    """A front kept result by result, as `update_front` decides. Each member may carry a row
    of other numbers (`extra`, e.g. its point in another space), kept in step with it.

    With two objectives the members are kept in x order (y then falls), so an update is two
    bisections plus the members it pushes off: O(log n) on fronts of thousands. Otherwise
    the members' points are one array and each update is a vectorised pass over them. Points
    must not be NaN (a NaN point has no place in a dominance order)."""

    def __init__(self, n_objectives: int, n_extra: int = 0) -> None:
        self._n_objectives, self._n_extra = n_objectives, n_extra
        self._keys: list[K] = []
        if n_objectives == 2:
            self._xs: list[float] = []
            self._ys: list[float] = []
            self._extra_rows: list[tuple[float, ...]] = []
        else:
            self._points: FloatArray = np.empty((0, n_objectives))
            self._extra: FloatArray = np.empty((0, n_extra))

    def __len__(self) -> int:
        return len(self._keys)

    def member_keys(self) -> list[K]:
        """The members, in the order of `points` and `extra` (x order with two objectives,
        the order they joined otherwise)."""
        return list(self._keys)

    @property
    def points(self) -> FloatArray:
        """The members' points, in the order of `member_keys()`."""
        if self._n_objectives == 2:
            return np.array([self._xs, self._ys], dtype=float).T.reshape(len(self._keys), 2)
        return self._points

    @property
    def extra(self) -> FloatArray:
        """The members' extra rows, in the order of `member_keys()`."""
        if self._n_objectives == 2:
            return np.array(self._extra_rows, dtype=float).reshape(len(self._keys), self._n_extra)
        return self._extra

    @extra.setter
    def extra(self, rows: FloatArray) -> None:
        if rows.shape != (len(self._keys), self._n_extra):
            raise ValueError(f"extra rows of shape {rows.shape}; the front holds {(len(self._keys), self._n_extra)}")
        if self._n_objectives == 2:
            self._extra_rows = [tuple(row) for row in rows.tolist()]
        else:
            self._extra = np.array(rows, dtype=float)

    def update(self, key: K, point: Sequence[float], extra: Sequence[float] = ()) -> tuple[bool, list[K]]:
        """Whether `point` joins the front, and the keys of the members it pushes off (both
        applied here)."""
        if self._n_objectives == 2:
            return self._update_2d(key, float(point[0]), float(point[1]), tuple(map(float, extra)))
        new = np.asarray(point, dtype=float)
        members, rows = self._points, self._extra
        removed: list[K] = []
        if self._keys:
            if bool(np.any(np.all(members <= new, axis=1) & np.any(members < new, axis=1))):
                return False, []
            pushed = np.all(members >= new, axis=1) & np.any(members > new, axis=1)
            if pushed.any():
                removed = [self._keys[i] for i in np.flatnonzero(pushed)]
                self._keys = [k for k, off in zip(self._keys, pushed.tolist(), strict=True) if not off]
                members, rows = members[~pushed], rows[~pushed]
        self._keys.append(key)
        self._points = np.vstack([members, new[None, :]])
        self._extra = np.vstack([rows, np.asarray(extra, dtype=float).reshape(1, rows.shape[1])])
        return True, removed

    def _update_2d(self, key: K, x: float, y: float, extra: tuple[float, ...]) -> tuple[bool, list[K]]:
        if math.isnan(x) or math.isnan(y):
            raise ValueError("a point of the front is NaN; drop failed trials before Pareto sorting")
        if len(extra) != self._n_extra:
            raise ValueError(f"{len(extra)} extra numbers; the front holds {self._n_extra} per member")
        xs, ys = self._xs, self._ys
        # members are mutually non-dominated: in x order their y falls, strictly between
        # different points (equal points share both). The member with the largest x not
        # past `x` has the least y of those that could dominate the new point.
        left = bisect_right(xs, x) - 1
        if left >= 0 and (ys[left] < y or (ys[left] == y and xs[left] < x)):
            return False, []
        first = bisect_left(xs, x)
        last = first
        if not (first < len(xs) and xs[first] == x and ys[first] == y):  # an equal point pushes nothing off
            while last < len(xs) and ys[last] >= y:
                last += 1  # x and y no better than the new point's, one of them worse
        removed = self._keys[first:last]
        self._keys[first:last] = [key]
        xs[first:last] = [x]
        ys[first:last] = [y]
        self._extra_rows[first:last] = [extra]
        return True, removed


def non_dominated_mask(points: ArrayLike) -> BoolArray:
    """Marks the rows of an (n, m) array that no other row dominates; equal rows share their
    mark. O(n log n) for m <= 3, O(n log^(m-2) n) above (moocore's dimension sweeps)."""
    array = _as_points(points)
    if array.shape[0] == 0:
        return np.zeros(0, dtype=bool)
    return np.asarray(moocore.is_nondominated(array, keep_weakly=True), dtype=bool)


def best_first(points: ArrayLike) -> list[int]:
    """The row indices of an (n, m) array of minimised points, best first: by Pareto rank
    (the front, then the front of the rest, ...), ties by each row's mean rank per objective."""
    array = _as_points(points)
    rank = np.zeros(len(array))
    left = np.arange(len(array))
    level = 0
    while len(left):
        front = non_dominated_mask(array[left])
        rank[left[front]] = level
        left = left[~front]
        level += 1
    mean_rank = np.argsort(np.argsort(array, axis=0, kind="stable"), axis=0).mean(axis=1)
    return [int(i) for i in np.lexsort((mean_rank, rank))]


def hypervolume(points: ArrayLike, reference: Reference) -> float:
    """Exact volume dominated by `points` and bounded by `reference` (moocore's: O(n log n)
    up to three objectives, O(n^2) with four).

    Points that are not strictly better than the reference in every objective add no volume
    and are dropped first, so a bad reference choice shows as 0, never as an error.
    """
    ref = _as_reference(reference)
    array = _as_points(points, n_objectives=ref.size)
    inside = array[np.all(array < ref, axis=1)]
    if inside.shape[0] == 0:
        return 0.0
    if not np.all(np.isfinite(inside)):
        return float("inf")  # a -inf coordinate dominates an unbounded box
    return float(moocore.hypervolume(inside, ref=ref))


def hypervolume_history(points_in_completion_order: ArrayLike, reference: Reference) -> list[float]:
    """Hypervolume after each point, for the "progress over trials" curve.

    Keeps the front of the points inside the reference incrementally and recomputes the
    volume only when a point lands on it; other points repeat the previous value.
    """
    ref = _as_reference(reference)
    array = _as_points(points_in_completion_order, n_objectives=ref.size)
    if ref.size == 2:
        running = Hypervolume2D(ref)
        return [running.add(row) for row in array]
    front: IncrementalFront[int] = IncrementalFront(ref.size)
    history: list[float] = []
    current = 0.0
    for index, row in enumerate(array):
        if bool(np.all(row < ref)) and front.update(index, row)[0]:
            current = hypervolume(front.points, ref)
        history.append(current)
    return history


class Hypervolume2D:
    """The area that two-objective points dominate within `reference`, kept as points are
    added: O(log n) plus the points an addition covers, where `hypervolume` costs O(n log n)
    each time. Adding a front's new members keeps the front's hypervolume, since members
    leave a front only for a point that dominates them. Points not strictly inside the
    reference (NaN among them) add nothing; one with a -inf coordinate makes it infinite."""

    def __init__(self, reference: Reference) -> None:
        ref = _as_reference(reference)
        if ref.size != 2:
            raise ValueError(f"a reference of 2 objectives, got {ref.size}")
        if not np.all(np.isfinite(ref)):
            raise ValueError("the reference point must be finite")
        self._staircase = _Staircase(float(ref[0]), float(ref[1]))
        self._infinite = False

    @property
    def volume(self) -> float:
        return math.inf if self._infinite else self._staircase.area

    def add(self, point: Sequence[float]) -> float:
        """Adds one point; returns the volume now."""
        x, y = float(point[0]), float(point[1])
        if x < self._staircase.ref_x and y < self._staircase.ref_y:
            if math.isinf(x) or math.isinf(y):
                self._infinite = True
            else:
                self._staircase.add(x, y)
        return self.volume


# --- validation ----------------------------------------------------------------------------


def _as_points(points: ArrayLike, n_objectives: int | None = None) -> FloatArray:
    """An (n, m) float array; an empty input becomes (0, m) so callers need no special case."""
    array = np.asarray(points, dtype=np.float64)
    if array.size == 0:
        return np.zeros((0, n_objectives or (array.shape[-1] if array.ndim == 2 else 1)))
    if array.ndim != 2:
        raise ValueError(f"points must be a 2-D array (n points, m objectives), got {array.shape}")
    if n_objectives is not None and array.shape[1] != n_objectives:
        raise ValueError(
            f"points have {array.shape[1]} objectives but the reference has {n_objectives}"
        )
    if np.isnan(array).any():
        raise ValueError("points contain NaN; drop failed trials before Pareto sorting")
    return array


def _as_reference(reference: Reference) -> FloatArray:
    ref = np.asarray(reference, dtype=np.float64)
    if ref.ndim != 1 or ref.size == 0:
        raise ValueError(f"the reference must be one point with m >= 1 values, got {ref.shape}")
    if not np.all(np.isfinite(ref)):
        raise ValueError("the reference point must be finite; an infinite one bounds nothing")
    return ref


# --- the running two-objective hypervolume -------------------------------------------------


class _Staircase:
    """2-D non-dominated points (x ascending, y strictly descending) and the area they
    dominate within the reference; insertion costs O(log n) plus the points it removes."""

    def __init__(self, ref_x: float, ref_y: float) -> None:
        self.ref_x, self.ref_y = ref_x, ref_y
        self.xs: list[float] = []
        self.ys: list[float] = []
        self.area = 0.0

    def add(self, x: float, y: float) -> None:
        xs, ys = self.xs, self.ys
        at_or_left = bisect_right(xs, x)
        if at_or_left and ys[at_or_left - 1] <= y:
            return  # weakly dominated: covers nothing new
        first = bisect_left(xs, x)
        last = first
        while last < len(xs) and ys[last] >= y:
            last += 1  # xs[first:last] are dominated by (x, y) and leave the staircase
        ceiling = ys[first - 1] if first else self.ref_y
        covered = self._covered(first, last, y, ceiling)
        self.area += (self.ref_x - x) * (ceiling - y) - covered
        xs[first:last] = [x]
        ys[first:last] = [y]

    def _covered(self, first: int, last: int, y: float, ceiling: float) -> float:
        """Area already dominated inside [x, ref_x) x [y, ceiling): by the points about to be
        removed, and by the next point (its part above y)."""
        steps = list(zip(self.xs[first:last], self.ys[first:last], strict=True))
        if last < len(self.xs):
            steps.append((self.xs[last], y))
        covered = 0.0
        for i, (step_x, step_y) in enumerate(steps):
            next_x = steps[i + 1][0] if i + 1 < len(steps) else self.ref_x
            covered += (next_x - step_x) * (ceiling - step_y)
        return covered

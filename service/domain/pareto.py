"""Pareto fronts and hypervolume over objective vectors, with no I/O.

Every function here takes points already converted to MINIMISATION (see `to_minimisation`),
so one dominance rule serves every study whatever its objective directions.

Equal points never dominate each other: two trials that measured the same numbers both stay on
the front, because the service cannot tell which one a user would pick.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from typing import Generic, TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

K = TypeVar("K")
FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]
Reference = Sequence[float] | FloatArray

DIRECTIONS = ("minimize", "maximize")

# Bounds the boolean temporaries of the blocked dominance test (elements, before the m axis):
# large enough to amortise numpy's per-call cost, small enough to stay in cache-sized memory.
_COMPARISONS_PER_CHUNK = 1 << 20
_BLOCK_SIZE = 256


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
    """Marks the rows of an (n, m) array that no other row dominates.

    Sweeps for m <= 3, O(n log n) whatever the data. For m > 3 a blocked, vectorised
    elimination in an order where no point can be dominated by a later one: fast while the
    front is a small part of the data (random 4-D data: ~350 of 100k points), O(n^2 m) when
    nearly every point is on the front.
    """
    array = _as_points(points)
    n, m = array.shape
    if n == 0:
        return np.zeros(0, dtype=bool)
    if m == 1:
        return np.asarray(array[:, 0] == array[:, 0].min())
    if m == 2:
        return _non_dominated_mask_2d(array)
    unique_rows, inverse = np.unique(array, axis=0, return_inverse=True)
    ranks = _dense_ranks(unique_rows)
    unique_mask = _non_dominated_mask_3d(ranks) if m == 3 else _non_dominated_mask_blocked(ranks)
    return unique_mask[inverse.reshape(-1)]


def hypervolume(points: ArrayLike, reference: Reference) -> float:
    """Exact volume dominated by `points` and bounded by `reference`.

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
    return _hypervolume_inside(inside, ref)


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


# --- non-dominated sorting -----------------------------------------------------------------


def _non_dominated_mask_2d(points: FloatArray) -> BoolArray:
    """One sweep in x order: a point is dominated by a smaller-x point with y no larger, or by
    an equal-x point with a smaller y (the first of its x group, after sorting by y)."""
    order = np.lexsort((points[:, 1], points[:, 0]))
    x, y = points[order, 0], points[order, 1]
    starts_group = np.r_[True, x[1:] != x[:-1]]
    group = np.cumsum(starts_group) - 1
    group_min_y = y[starts_group]
    earlier_min_y = np.r_[np.inf, np.minimum.accumulate(group_min_y)[:-1]]
    dominated = (earlier_min_y[group] <= y) | (group_min_y[group] < y)
    mask = np.empty(points.shape[0], dtype=bool)
    mask[order] = ~dominated
    return mask


def _dense_ranks(points: FloatArray) -> NDArray[np.int64]:
    """Replaces each column by its dense rank: dominance is unchanged, and the row sums become
    exact integers that strictly increase along any dominance chain."""
    ranks = np.empty(points.shape, dtype=np.int64)
    for column in range(points.shape[1]):
        ranks[:, column] = np.unique(points[:, column], return_inverse=True)[1].reshape(-1)
    return ranks


def _non_dominated_mask_3d(ranks: NDArray[np.int64]) -> BoolArray:
    """Front of distinct rank rows in lexicographic order (as `np.unique` returns them).

    Every earlier row has x no larger, so a row is dominated exactly when an earlier front row
    has y and z no larger; a Fenwick tree over y answers "smallest z among y <= this" in
    O(log n). Plain Python, yet faster than any O(n * front) numpy pass at 100k points.
    """
    ys, zs = ranks[:, 1].tolist(), ranks[:, 2].tolist()
    size = max(ys) + 1
    no_point = len(zs)  # larger than every z rank
    smallest_z = [no_point] * (size + 1)  # 1-based Fenwick tree of prefix minima
    on_front = [False] * len(ys)
    for row, (y, z) in enumerate(zip(ys, zs, strict=True)):
        best, node = no_point, y + 1
        while node:
            if smallest_z[node] < best:
                best = smallest_z[node]
            node &= node - 1
        if best <= z:
            continue
        on_front[row] = True
        node = y + 1
        while node <= size:
            if z < smallest_z[node]:
                smallest_z[node] = z
            node += node & -node
    return np.array(on_front, dtype=bool)


def _non_dominated_mask_blocked(ranks: NDArray[np.int64]) -> BoolArray:
    """Front of distinct rank rows, taking blocks in increasing rank-sum order.

    A point cannot be dominated by one with a larger or equal rank sum, and every point removed
    so far was removed by a front point, so the survivors of a block that no other survivor of
    the same block dominates are exactly the next front points.
    """
    sums = ranks.sum(axis=1)
    remaining = np.argsort(sums, kind="stable")
    on_front = np.zeros(ranks.shape[0], dtype=bool)
    while remaining.size:
        block, rest = remaining[:_BLOCK_SIZE], remaining[_BLOCK_SIZE:]
        block_front = block[~_dominated_by(ranks, sums, block, block)]
        on_front[block_front] = True
        remaining = rest[~_dominated_by(ranks, sums, block_front, rest)]
    return on_front


def _dominated_by(
    ranks: NDArray[np.int64],
    sums: NDArray[np.int64],
    front: NDArray[np.intp],
    candidates: NDArray[np.intp],
) -> BoolArray:
    """Which `candidates` rows some `front` row dominates; for distinct rank rows, "no worse
    everywhere and a smaller rank sum" is exactly dominance. Chunked to bound temporaries."""
    dominated = np.zeros(candidates.size, dtype=bool)
    if front.size == 0:
        return dominated
    front_ranks, front_sums = ranks[front][:, None, :], sums[front][:, None]
    chunk = max(1, _COMPARISONS_PER_CHUNK // front.size)
    for start in range(0, candidates.size, chunk):
        part = candidates[start : start + chunk]
        no_worse = np.all(front_ranks <= ranks[part][None, :, :], axis=2)
        smaller = front_sums < sums[part][None, :]
        dominated[start : start + chunk] = np.any(no_worse & smaller, axis=0)
    return dominated


# --- hypervolume ---------------------------------------------------------------------------


def _hypervolume_inside(points: FloatArray, ref: FloatArray) -> float:
    """Exact volume for finite points all strictly inside the reference box."""
    m = ref.size
    if m == 1:
        return float(ref[0] - points[:, 0].min())
    if m == 2:
        return _hypervolume_2d(points, ref)
    if m == 3:
        return _hypervolume_3d(points.tolist(), ref.tolist())
    return _hypervolume_nd(points[non_dominated_mask(points)], ref)


def _hypervolume_2d(points: FloatArray, ref: FloatArray) -> float:
    """Sum of vertical strips in x order; each strip's height comes from the best y so far,
    so dominated and repeated points need no filtering."""
    order = np.lexsort((points[:, 1], points[:, 0]))
    x, best_y = points[order, 0], np.minimum.accumulate(points[order, 1])
    widths = np.diff(np.r_[x, ref[0]])
    return float(np.dot(widths, ref[1] - best_y))


def _hypervolume_3d(points: list[list[float]], ref: list[float]) -> float:
    """Slices along z: between consecutive z values the dominated cross-section is the 2-D
    area of the points seen so far, kept incrementally by `_Staircase`."""
    points = sorted(points, key=lambda p: p[2])
    staircase = _Staircase(ref[0], ref[1])
    volume = 0.0
    previous_z = points[0][2]
    for x, y, z in points:
        volume += staircase.area * (z - previous_z)
        staircase.add(x, y)
        previous_z = z
    return volume + staircase.area * (ref[2] - previous_z)


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


def _hypervolume_nd(front: FloatArray, ref: FloatArray) -> float:
    """WFG (While et al. 2012) for m >= 4, summing each point's exclusive volume.

    Points go in decreasing order of the last objective, so every later point limited by the
    current one shares its last coordinate: the exclusive volume is the slab height times an
    (m-1)-objective exclusive volume, and the recursion loses one dimension per level.
    """
    front = front[np.argsort(-front[:, -1], kind="stable")]
    inner_ref = ref[:-1]
    volume = 0.0
    for i, point in enumerate(front):
        own = float(np.prod(inner_ref - point[:-1]))
        limited = np.maximum(front[i + 1 :, :-1], point[:-1])
        shadowed = _hypervolume_inside(limited, inner_ref) if limited.shape[0] else 0.0
        volume += float(ref[-1] - point[-1]) * (own - shadowed)
    return volume

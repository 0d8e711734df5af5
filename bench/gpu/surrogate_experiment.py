"""An experiment, not a service sampler: model-based search over a small structured space,
replayed offline (bench/gpu/replay_offline.py, setting `surrogate`) against the recorded GEMM
sweep to see whether it beats the service's `auto` (NSGA-II). It did not; the numbers are in
bench/results/gpu_gemm_cold_search.md. Kept so that they can be reproduced and the next
attempt starts from here.

At each ask, after `n_startup_trials` random trials (the baseline among them):
- candidates: every unseen point of a finite space of at most MAX_ENUMERATED points (else
  random points and neighbours of good ones); a point the study has, running ones included,
  is never proposed;
- model `pairwise` (the default): Bayesian linear regression per objective over each
  parameter's position, a one-hot of its level and a one-hot of every pair of levels,
  Thompson sampling (one draw of the weights per ask); one objective: the lowest draw;
  several: the draw's hypervolume gain over the measured front (or, where it adds none, how
  little it misses by); a draw of the same model on feasible/infeasible labels keeps the
  candidates drawn feasible;
- model `gp`: a Gaussian process per objective (Matern 5/2, a length scale per feature,
  maximum likelihood), expected improvement for one objective, the optimistic point's
  hypervolume gain (mean - `kappa` sd) for several, times a GP estimate of feasibility; the
  running trials added at the model's mean; `radius` > 0 keeps candidates within that many
  changed parameters of the front's best `front_members`;
- targets: each objective's values as normal scores of their ranks; PT_TRANSFORM=log uses
  their log instead.

Knobs read from the environment, for the experiment only: PT_TRANSFORM (rank|log),
PT_PRIOR ("position,level,pair" prior variances of the pairwise model, default 1,0.5,0.25),
PT_NOISE (its noise variance, default 0.1), PT_PAIRS (GP features with pairwise sums and
differences of positions added).

Randomness comes from (seed, trial number).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.samplers import BaseSampler, RandomSampler
from optuna.search_space import IntersectionSearchSpace
from optuna.study import Study, StudyDirection
from optuna.trial import FrozenTrial, TrialState
from scipy.linalg import cho_factor, cho_solve
from scipy.optimize import minimize
from scipy.special import ndtr, ndtri
from scipy.stats import rankdata

from service.domain.pareto import hypervolume, non_dominated_mask

FloatArray = NDArray[np.float64]

MAX_ENUMERATED = 20_000  # a finite space up to this size is scored whole
MAX_TRAINING = 300  # trials the model is fitted on at most (the best by non-dominated rank)
SQRT5 = math.sqrt(5.0)


class SurrogateSampler(BaseSampler):
    """Gaussian-process search over the space's structure (see the module's docstring).

    Options: `n_startup_trials` random trials first (the baseline counts), `kappa` the
    standard deviations of optimism in the multi-objective acquisition, `n_candidates` the
    points scored per ask where the space is too large to score whole."""

    def __init__(self, *, seed: int | None = None, n_startup_trials: int = 5, kappa: float = 1.0,
                 n_candidates: int = 2000, radius: int = 0, front_members: int = 3,
                 model: str = "pairwise") -> None:
        if n_startup_trials < 1:
            raise ValueError(f"n_startup_trials must be at least 1, not {n_startup_trials}")
        if not kappa >= 0:
            raise ValueError(f"kappa must be at least 0, not {kappa}")
        if n_candidates < 1:
            raise ValueError(f"n_candidates must be at least 1, not {n_candidates}")
        self._seed = int(np.random.SeedSequence(seed).generate_state(1)[0]) if seed is None else seed
        self._n_startup = n_startup_trials
        self._kappa = kappa
        self._n_candidates = n_candidates
        self._radius = radius
        self._model = model
        self._front_members = front_members
        self._random = RandomSampler(seed=seed)
        self._space = IntersectionSearchSpace(include_pruned=True)

    def reseed_rng(self) -> None:
        self._random.reseed_rng()

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return {name: d for name, d in self._space.calculate(study).items() if not d.single()}

    def sample_relative(self, study: Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        if not search_space:
            return {}
        trials = study._get_trials(deepcopy=False, use_cache=True)
        finished = [t for t in trials if t.state == TrialState.COMPLETE and _covers(t, search_space)]
        if len(finished) < self._n_startup:
            return {}  # random, from sample_independent
        rng = np.random.default_rng([self._seed, trial.number])
        names = sorted(search_space)
        encoder = Encoder([search_space[n] for n in names])
        seen = {encoder.key([t.params[n] for n in names]) for t in trials
                if t.state != TrialState.WAITING and t.number != trial.number and _covers(t, search_space)}
        candidates = self._candidates(encoder, names, finished, seen, rng)
        if not candidates:
            return {}  # the space is exhausted: the mirror hands out what is left or stops
        pending = [t for t in trials if t.state == TrialState.RUNNING and t.number != trial.number
                   and _covers(t, search_space)]
        scores = self._scores(study, encoder, names, finished, pending, candidates, rng)
        if self._radius:
            near = self._near_front(study, names, finished, candidates)
            if near.any():
                scores = np.where(near, scores, -np.inf)
        best = max(range(len(candidates)), key=lambda i: (scores[i], -i))
        return dict(zip(names, candidates[best], strict=True))

    def sample_independent(self, study: Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return self._random.sample_independent(study, trial, param_name, param_distribution)

    def _near_front(self, study: Study, names: list[str], finished: list[FrozenTrial],
                    candidates: list[tuple[Any, ...]]) -> NDArray[np.bool_]:
        feasible = [t for t in finished if _is_feasible(t) and t.values is not None]
        if not feasible:
            return np.zeros(len(candidates), dtype=bool)
        y = _minimised(feasible, study.directions)
        front = [feasible[i] for i, m in enumerate(non_dominated_mask(y)) if m]
        if len(front) > self._front_members:
            front = sorted(front, key=lambda t: _minimised([t], study.directions)[0, 0])[: self._front_members]
        centres = np.array([[float(t.params[n]) if not isinstance(t.params[n], str) else hash(t.params[n])
                             for n in names] for t in front])
        points = np.array([[float(v) if not isinstance(v, str) else hash(v) for v in c] for c in candidates])
        differ = (points[:, None, :] != centres[None, :, :]).sum(axis=2)
        return np.asarray(differ.min(axis=1) <= self._radius)

    # --- candidates ---------------------------------------------------------------------

    def _candidates(self, encoder: Encoder, names: list[str], finished: list[FrozenTrial], seen: set[tuple[Any, ...]],
                    rng: np.random.Generator) -> list[tuple[Any, ...]]:
        grid = encoder.grid()
        if grid is not None:
            return [point for point in grid if encoder.key(point) not in seen]
        points: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        best = [[t.params[n] for n in names] for t in finished[: min(len(finished), 10)]]
        for i in range(self._n_candidates):
            if best and i % 2:  # a neighbour: one to two parameters of a good point changed
                point = list(best[int(rng.integers(len(best)))])
                for j in rng.choice(len(names), size=min(len(names), 1 + int(rng.integers(2))), replace=False):
                    point[j] = encoder.neighbour(int(j), point[j], rng)
            else:
                point = encoder.random(rng)
            key = encoder.key(point)
            if key not in seen:
                points.setdefault(key, tuple(point))
        return list(points.values())

    # --- scores -------------------------------------------------------------------------

    def _scores(self, study: Study, encoder: Encoder, names: list[str], finished: list[FrozenTrial],
                pending: list[FrozenTrial], candidates: list[tuple[Any, ...]], rng: np.random.Generator) -> FloatArray:
        if self._model == "pairwise":
            return self._sampled_scores(study, encoder, names, finished, candidates, rng)
        feasible = [t for t in finished if _is_feasible(t) and t.values is not None]
        x_all = encoder.encode([[t.params[n] for n in names] for t in finished])
        x_cand = encoder.encode(candidates)
        x_pending = encoder.encode([[t.params[n] for n in names] for t in pending])
        p_feasible = np.ones(len(candidates))
        if len(feasible) < len(finished):  # some were infeasible: how likely each candidate is not
            labels = np.array([1.0 if _is_feasible(t) else -1.0 for t in finished])
            mean, std = GaussianProcess(x_all, labels, standardize=False).predict(x_cand)
            p_feasible = ndtr(mean / np.sqrt(1.0 + std**2))
        if len(feasible) < 2:
            return p_feasible
        y = _minimised(feasible, study.directions)
        order = _by_rank(y)[:MAX_TRAINING]
        y = y[order]
        x = encoder.encode([[feasible[i].params[n] for n in names] for i in order])
        means, stds = [], []
        for k in range(y.shape[1]):
            gp = GaussianProcess(x, _normal_scores(y[:, k]))
            if len(x_pending):
                gp = gp.believing(x_pending)
            mean, std = gp.predict(x_cand)
            means.append(mean)
            stds.append(std)
        mu, sigma = np.stack(means, axis=1), np.stack(stds, axis=1)
        if y.shape[1] == 1:
            acquisition = _expected_improvement(mu[:, 0], sigma[:, 0], float(np.min(gp.y_train[: len(x)])))
            return acquisition * p_feasible
        observed = np.stack([_normal_scores(y[:, k]) for k in range(y.shape[1])], axis=1)
        scale = observed.std(axis=0) + 1e-12
        centre = observed.mean(axis=0)
        # every model's values are standardised the same way as their training targets
        front = (observed - centre) / scale
        optimistic = mu - self._kappa * sigma
        return _front_gain(front, optimistic) * np.where(p_feasible > 0, p_feasible, 1e-12)


    def _sampled_scores(self, study: Study, encoder: Encoder, names: list[str], finished: list[FrozenTrial],
                        candidates: list[tuple[Any, ...]], rng: np.random.Generator) -> FloatArray:
        """Thompson sampling from Bayesian linear models over the parameters' levels and every
        pair of them."""
        feasible = [t for t in finished if _is_feasible(t) and t.values is not None]
        features = PairwiseFeatures(encoder)
        x_cand = features(candidates)
        allowed = np.ones(len(candidates), dtype=bool)
        if len(feasible) < len(finished):
            labels = np.array([1.0 if _is_feasible(t) else -1.0 for t in finished])
            x_all = features([[t.params[n] for n in names] for t in finished])
            allowed = BayesianLinear(x_all, labels, features.prior, standardize=False).sample(x_cand, rng) > 0
            if not allowed.any():
                allowed[:] = True
        if len(feasible) < 2:
            return np.where(allowed, rng.random(len(candidates)), -np.inf)
        y = _minimised(feasible, study.directions)
        x = features([[t.params[n] for n in names] for t in feasible])
        observed = np.stack([_normal_scores(y[:, k]) for k in range(y.shape[1])], axis=1)
        centre, scale = observed.mean(axis=0), observed.std(axis=0) + 1e-12
        sampled = np.stack([BayesianLinear(x, observed[:, k], features.prior).sample(x_cand, rng)
                            for k in range(y.shape[1])], axis=1)
        scores = -sampled[:, 0] if y.shape[1] == 1 else _front_gain((observed - centre) / scale, sampled)
        return np.where(allowed, scores, -np.inf)


class PairwiseFeatures:
    """A configuration as the position of each parameter (0..1), a one-hot of each
    parameter's level, and a one-hot of each pair's levels; wide numeric ranges in bins."""

    BINS = 5

    def __init__(self, encoder: Encoder) -> None:
        self.encoder = encoder
        self.levels = [len(v) if (v := encoder._values(d)) is not None and len(v) <= 12 else self.BINS
                       for d in encoder.distributions]
        d = len(self.levels)
        pairs = [(i, j) for i in range(d) for j in range(i + 1, d)]
        self.pairs = pairs
        import os
        a, b, c = (float(v) for v in os.environ.get("PT_PRIOR", "1,0.5,0.25").split(","))
        prior = [a] * d + [b] * sum(self.levels) + [c] * sum(self.levels[i] * self.levels[j] for i, j in pairs)
        self.prior = np.array(prior)

    def __call__(self, points: Sequence[Sequence[Any]]) -> FloatArray:
        position = self.encoder.encode(points) if points else np.zeros((0, 1))
        n = len(points)
        level = np.zeros((n, len(self.levels)), dtype=int)
        column = 0
        for j, d in enumerate(self.encoder.distributions):
            values = self.encoder._values(d)
            if values is not None and len(values) <= 12:
                index = {self.encoder.key([v])[0]: i for i, v in enumerate(values)}
                level[:, j] = [index[self.encoder.key([p[j]])[0]] for p in points]
            else:
                width = 1 if isinstance(d, CategoricalDistribution) else 0
                level[:, j] = np.minimum(self.BINS - 1, (position[:, column] * self.BINS).astype(int))
                column += width
            column += 1 if not isinstance(d, CategoricalDistribution) or self.encoder._ordered_choices(d) is not None \
                or len(d.choices) == 2 else 0
        columns = [self._positions(points)]
        for j, k in enumerate(self.levels):
            columns.append(np.eye(k)[level[:, j]])
        for i, j in self.pairs:
            columns.append(np.eye(self.levels[i] * self.levels[j])[level[:, i] * self.levels[j] + level[:, j]])
        return np.hstack(columns) if n else np.zeros((0, len(self.prior)))

    def _positions(self, points: Sequence[Sequence[Any]]) -> FloatArray:
        out = np.zeros((len(points), len(self.levels)))
        for j in range(len(self.levels)):
            one = Encoder([self.encoder.distributions[j]]).encode([[p[j]] for p in points])
            out[:, j] = one[:, 0] if one.shape[1] == 1 else one.argmax(axis=1) / max(1, one.shape[1] - 1)
        return out


class BayesianLinear:
    """y = X w + noise, w ~ N(0, diag(prior)): the posterior of w, and draws from it."""

    import os
    NOISE = float(os.environ.get("PT_NOISE", "0.1"))

    def __init__(self, x: FloatArray, y: FloatArray, prior: FloatArray, standardize: bool = True) -> None:
        offset = float(np.mean(y)) if standardize else 0.0
        scale = float(np.std(y)) if standardize and np.std(y) > 0 else 1.0
        self.offset, self.scale = offset, scale
        precision = x.T @ x / self.NOISE + np.diag(1.0 / prior)
        self.chol = np.linalg.cholesky(precision)
        self.mean = cho_solve((self.chol, True), x.T @ ((y - offset) / scale) / self.NOISE)

    def sample(self, x: FloatArray, rng: np.random.Generator) -> FloatArray:
        # w = mean + L^-T z has covariance (L L^T)^-1, the posterior's
        z = rng.standard_normal(len(self.mean))
        w = self.mean + np.linalg.solve(self.chol.T, z)
        return np.asarray(x @ w, dtype=np.float64)


def _front_gain(front: FloatArray, points: FloatArray) -> FloatArray:
    """Per point: the hypervolume it adds to `front` (positive), else minus how far it must
    move in every objective to stop being dominated (the additive epsilon; negative)."""
    front = front[non_dominated_mask(front)]
    reference = np.max(front, axis=0) + 1.0
    base = hypervolume(front, reference)
    gains = np.empty(len(points))
    for i, p in enumerate(points):
        if not np.any(np.all(front <= p, axis=1)):
            gains[i] = hypervolume(np.vstack([front, np.minimum(p, reference - 1e-9)]), reference) - base + 1e-9
        else:
            gains[i] = -float(np.min(np.max(p - front, axis=1))) - 1e-9
    return gains


def _expected_improvement(mean: FloatArray, std: FloatArray, best: float) -> FloatArray:
    z = (best - mean) / std
    pdf = np.exp(-0.5 * z**2) / math.sqrt(2 * math.pi)
    return np.asarray((best - mean) * ndtr(z) + std * pdf, dtype=np.float64)


def _covers(trial: FrozenTrial, space: dict[str, BaseDistribution]) -> bool:
    return all(name in trial.params for name in space)


def _is_feasible(trial: FrozenTrial) -> bool:
    return all(c <= 0.0 for c in trial.constraints.values())


def _minimised(trials: Sequence[FrozenTrial], directions: Sequence[StudyDirection]) -> FloatArray:
    signs = np.array([1.0 if d == StudyDirection.MINIMIZE else -1.0 for d in directions])
    return np.array([t.values for t in trials], dtype=np.float64) * signs


def _by_rank(y: FloatArray) -> list[int]:
    """Row indices by non-dominated rank (the front first), ties in the given order."""
    left = list(range(len(y)))
    ordered: list[int] = []
    while left:
        mask = non_dominated_mask(y[left])
        ordered += [i for i, m in zip(left, mask, strict=True) if m]
        left = [i for i, m in zip(left, mask, strict=True) if not m]
    return ordered


def _normal_scores(values: FloatArray) -> FloatArray:
    """Each value as the normal quantile of its rank (ties share the mean rank): the order is
    kept and an outlier (a tile 8x slower than the rest) weighs no more than any other bad
    point, so it does not make its whole neighbourhood look bad to a smooth model."""
    import os
    if os.environ.get("PT_TRANSFORM") == "log" and np.all(values > 0):
        return np.log(values)
    ranks = rankdata(values)
    return np.asarray(ndtri((ranks - 0.5) / len(values)), dtype=np.float64)


class Encoder:
    """Parameters <-> points of [0, 1]^d (one column per ordered parameter, one per choice of
    an unordered one)."""

    def __init__(self, distributions: list[BaseDistribution]) -> None:
        self.distributions = distributions

    @staticmethod
    def _ordered_choices(d: CategoricalDistribution) -> list[Any] | None:
        numbers = [c for c in d.choices if isinstance(c, int | float) and not isinstance(c, bool)]
        if len(numbers) != len(d.choices) or len({float(c) for c in numbers}) != len(numbers):
            return None
        return sorted(numbers)

    def key(self, point: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(float(v) if isinstance(v, int | float) and not isinstance(v, bool) else v for v in point)

    def encode(self, points: Sequence[Sequence[Any]]) -> FloatArray:
        columns: list[FloatArray] = []
        for j, d in enumerate(self.distributions):
            values = [p[j] for p in points]
            if isinstance(d, CategoricalDistribution):
                order = self._ordered_choices(d)
                if order is not None:
                    position = {float(c): i for i, c in enumerate(order)}
                    columns.append(np.array([position[float(v)] / max(1, len(order) - 1) for v in values]))
                elif len(d.choices) == 2:
                    columns.append(np.array([float(d.choices.index(v)) for v in values]))
                else:
                    for c in d.choices:
                        columns.append(np.array([float(v == c) for v in values]))
            else:
                assert isinstance(d, IntDistribution | FloatDistribution)
                low, high, v = float(d.low), float(d.high), np.array(values, dtype=np.float64)
                if d.log:
                    low, high, v = math.log(low), math.log(high), np.log(v)
                columns.append((v - low) / (high - low) if high > low else np.zeros(len(values)))
        if not points:
            return np.zeros((0, len(columns) or 1))
        out = np.stack(columns, axis=1)
        import os
        if os.environ.get("PT_PAIRS"):
            d = out.shape[1]
            extra = [(out[:, i] + out[:, j]) / 2 for i in range(d) for j in range(i + 1, d)]
            extra += [(out[:, i] - out[:, j] + 1) / 2 for i in range(d) for j in range(i + 1, d)]
            out = np.hstack([out, np.stack(extra, axis=1)])
        return out

    def _values(self, d: BaseDistribution) -> list[Any] | None:
        if isinstance(d, CategoricalDistribution):
            return list(d.choices)
        if isinstance(d, IntDistribution):
            return list(range(d.low, d.high + 1, d.step)) if (d.high - d.low) // d.step < MAX_ENUMERATED else None
        if isinstance(d, FloatDistribution) and d.step is not None:
            n = int(round((d.high - d.low) / d.step))
            return [d.low + i * d.step for i in range(n + 1)] if n < MAX_ENUMERATED else None
        return None

    def grid(self) -> list[tuple[Any, ...]] | None:
        axes = [self._values(d) for d in self.distributions]
        if any(a is None for a in axes) or math.prod(len(a) for a in axes if a is not None) > MAX_ENUMERATED:
            return None
        return list(itertools.product(*[a for a in axes if a is not None]))

    def random(self, rng: np.random.Generator) -> list[Any]:
        return [self._random_value(d, rng) for d in self.distributions]

    def _random_value(self, d: BaseDistribution, rng: np.random.Generator) -> Any:
        values = self._values(d)
        if values is not None:
            return values[int(rng.integers(len(values)))]
        assert isinstance(d, IntDistribution | FloatDistribution)
        low, high = float(d.low), float(d.high)
        u = float(rng.random())
        value = math.exp(math.log(low) + u * (math.log(high) - math.log(low))) if d.log else low + u * (high - low)
        return int(round(value)) if isinstance(d, IntDistribution) else value

    def neighbour(self, j: int, value: Any, rng: np.random.Generator) -> Any:
        d = self.distributions[j]
        values = self._values(d)
        if values is None:  # a wide numeric range: a step of a tenth of it, on its scale
            assert isinstance(d, IntDistribution | FloatDistribution)
            low, high = float(d.low), float(d.high)
            if d.log:
                moved = math.exp(min(math.log(high), max(math.log(low), math.log(value)
                                                         + rng.normal(0, 0.1) * (math.log(high) - math.log(low)))))
            else:
                moved = min(high, max(low, value + rng.normal(0, 0.1) * (high - low)))
            return int(round(moved)) if isinstance(d, IntDistribution) else moved
        if isinstance(d, CategoricalDistribution) and self._ordered_choices(d) is None:
            return values[int(rng.integers(len(values)))]
        if isinstance(d, CategoricalDistribution):
            values = self._ordered_choices(d) or values
        i = next((k for k, v in enumerate(values) if v == value), 0)
        return values[min(len(values) - 1, max(0, i + (1 if rng.random() < 0.5 else -1)))]


class GaussianProcess:
    """Matern 5/2 with one length scale per feature, a constant mean and a noise term, fitted
    by maximum likelihood (L-BFGS from fixed starting points, so the same data gives the same
    model)."""

    def __init__(self, x: FloatArray, y: FloatArray, standardize: bool = True) -> None:
        self.x_train = x
        self.offset = float(np.mean(y)) if standardize else 0.0
        self.scale = float(np.std(y)) if standardize and np.std(y) > 0 else 1.0
        self.y_train = (y - self.offset) / self.scale
        self.params = self._fit()
        self._factor()

    def believing(self, x_pending: FloatArray) -> GaussianProcess:
        """The same process, with the pending points added at its own mean."""
        mean, _ = self.predict(x_pending)
        other = object.__new__(GaussianProcess)
        other.offset, other.scale, other.params = self.offset, self.scale, self.params
        other.x_train = np.vstack([self.x_train, x_pending])
        other.y_train = np.concatenate([self.y_train, (mean - self.offset) / self.scale])
        other._factor()
        return other

    def _kernel(self, a: FloatArray, b: FloatArray, params: FloatArray) -> FloatArray:
        scaled = (a[:, None, :] - b[None, :, :]) ** 2 / np.exp(2 * params[:-2])
        r = np.sqrt(np.sum(scaled, axis=2))
        return np.asarray(np.exp(params[-2]) * (1 + SQRT5 * r + 5.0 / 3.0 * r**2) * np.exp(-SQRT5 * r),
                          dtype=np.float64)

    def _nll(self, params: FloatArray) -> tuple[float, FloatArray]:
        """The negative log likelihood plus the priors' terms, and its gradient."""
        n = len(self.y_train)
        scaled = (self.x_train[:, None, :] - self.x_train[None, :, :]) ** 2 / np.exp(2 * params[:-2])
        r = np.sqrt(np.sum(scaled, axis=2))
        decay = np.exp(params[-2]) * np.exp(-SQRT5 * r)
        noise = np.exp(params[-1]) + 1e-8
        k = decay * (1 + SQRT5 * r + 5.0 / 3.0 * r**2) + noise * np.eye(n)
        try:
            factor = cho_factor(k, lower=True)
        except np.linalg.LinAlgError:
            return 1e10, np.zeros_like(params)
        alpha = cho_solve(factor, self.y_train)
        log_det = 2.0 * float(np.sum(np.log(np.diag(factor[0]))))
        # weak priors: length scales near half the space's width, little noise
        prior = 0.5 * float(np.sum((params[:-2] - math.log(0.5)) ** 2)) + 0.1 * float(np.exp(params[-1]))
        value = 0.5 * float(self.y_train @ alpha) + 0.5 * log_det + prior
        inner = cho_solve(factor, np.eye(n)) - np.outer(alpha, alpha)  # d nll = tr(inner dK) / 2
        d_lengths = 5.0 / 3.0 * decay * (1 + SQRT5 * r)
        gradient = np.empty_like(params)
        gradient[:-2] = 0.5 * np.einsum("ij,ij,ijd->d", inner, d_lengths, scaled) + (params[:-2] - math.log(0.5))
        gradient[-2] = 0.5 * float(np.sum(inner * (k - noise * np.eye(n))))
        gradient[-1] = 0.5 * float(np.trace(inner)) * np.exp(params[-1]) + 0.1 * np.exp(params[-1])
        return value, gradient

    def _fit(self) -> FloatArray:
        d = self.x_train.shape[1]
        bounds = [(math.log(0.02), math.log(20.0))] * d + [(math.log(0.05), math.log(20.0)),
                                                           (math.log(1e-6), math.log(1.0))]
        start = np.array([math.log(0.5)] * d + [0.0, math.log(1e-2)])
        result = minimize(self._nll, start, jac=True, method="L-BFGS-B", bounds=bounds, options={"maxiter": 60})
        return np.asarray(result.x, dtype=np.float64)

    def _factor(self) -> None:
        n = len(self.y_train)
        k = self._kernel(self.x_train, self.x_train, self.params) + (np.exp(self.params[-1]) + 1e-8) * np.eye(n)
        self._chol = cho_factor(k, lower=True)
        self._alpha = cho_solve(self._chol, self.y_train)

    def predict(self, x: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Mean and standard deviation at `x`, in the standardised units of the targets."""
        k_star = self._kernel(x, self.x_train, self.params)
        mean = k_star @ self._alpha
        v = cho_solve(self._chol, k_star.T)
        var = np.exp(self.params[-2]) - np.sum(k_star * v.T, axis=1)
        return mean, np.sqrt(np.maximum(var, 1e-12))


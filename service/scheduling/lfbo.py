"""`lfbo`: a classifier-filtered search over a kernel's structure (likelihood-free Bayesian
optimisation, as in Helion's LFBO), for finite spaces.

Every configuration of the space is described once, when the study's sampler is made: by the
built-in kernel's structure model (wire.kernels.structure) for the study's workload shapes,
their weighted mean, where it has one, else by the log2 of each numeric value; beside that, a
one-hot of each parameter's level. At each ask the sampler scores every configuration the
study does not have by

    logit P(among the best | x) = prior_scale * prior(x) + w . features(x) + b

where w, b are a logistic regression, the prior a fixed offset, fitted on a bootstrap resample
of the measured trials (Thompson-style exploration); the label is 1 for the best `gamma` of
them by Pareto rank (ties by their mean rank per objective), plus the log of the probability
that it is feasible, from a second logistic regression on the trials that failed or violate a
constraint against those that did not. It asks the highest. Before two trials are measured
the prior alone orders the configurations, ties at random.

With `warm_start: related`, related studies' trials join the regression's rows from the first
ask (History: at their own shapes, labelled within their own study, each weighing 2**-distance
of one of the study's own; service.studies.transfer says which).

Chosen by replaying recorded GPU sweeps (bench/results/gpu_gemm_cold_search.md): on the GEMM
the structure model's prior does most of the work, the classifier the rest. Without a
structure model it still needs fewer trials than NSGA-II or TPE on every built-in replayed,
so `auto` picks it for a built-in over a finite space (auto_picks;
bench/results/auto_enumerable.md).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.samplers import BaseSampler, RandomSampler
from optuna.study import Study, StudyDirection
from optuna.trial import FrozenTrial, TrialState

from service.domain import pareto
from service.studies.space import SearchSpace
from wire.contract import WorkloadShape
from wire.kernels import get_builtin
from wire.kernels.structure import Structure, StructureModel

FloatArray = NDArray[np.float64]
MAX_POINTS = 20_000  # configurations a space may have for `lfbo` (each is scored at every ask)
CONSTRAINT_PREFIX = "constraints:"


class StructuredSpace:
    """Every configuration of a finite space (the sampler's parameters), its standardised
    features and its prior, the best at 0; with `like`, standardised as that space's are (the
    same space described at another shape, for History)."""

    def __init__(self, distributions: dict[str, BaseDistribution], describe: Callable[[dict[str, Any]], Structure],
                 like: StructuredSpace | None = None) -> None:
        self.distributions = distributions
        names = sorted(distributions)
        axes = [_axis(distributions[n]) for n in names]
        self.points = [dict(zip(names, values, strict=True)) for values in itertools.product(*axes)]
        self.index = {_key(p): i for i, p in enumerate(self.points)}
        described = [describe(p) for p in self.points]
        levels = [[float(p[n] == v) for n, axis in zip(names, axes, strict=True) for v in axis] for p in self.points]
        x = np.hstack([np.array([d.features for d in described], dtype=float), np.array(levels)])
        self.mean: FloatArray = x.mean(axis=0) if like is None else like.mean
        self.scale: FloatArray = x.std(axis=0) + 1e-9 if like is None else like.scale
        self.features: FloatArray = (x - self.mean) / self.scale
        prior = np.array([d.prior for d in described], dtype=float)
        self.prior: FloatArray = prior - prior.max()


class History:
    """Related studies' trials that the classifier learns from beside the study's own
    (warm_start: related; service.studies.transfer.learning_set): each described at its own
    shape, standardised as the study's space is, weighing 2**-distance of one of the study's
    trials; the best `gamma` of each study's (stored best first) labelled among the best."""

    def __init__(self, features: FloatArray, prior: FloatArray, order: list[tuple[int, int]],
                 weights: FloatArray) -> None:
        self.features = features
        self.prior = prior  # at the trial's own shape, the best of that shape's space at 0
        self.order = order  # per trial: (its related study's index, its place in that study, best first)
        self.weights = weights

    def labels(self, gamma: float) -> FloatArray:
        sizes: dict[int, int] = {}
        for study, _ in self.order:
            sizes[study] = sizes.get(study, 0) + 1
        return np.array([float(place < best_count(sizes[study], gamma)) for study, place in self.order])


def structured_space(distributions: dict[str, BaseDistribution], to_config: Callable[[dict[str, Any]], dict[str, Any]],
                     backend: str, builtin: str | None, workload: list[WorkloadShape],
                     like: StructuredSpace | None = None) -> StructuredSpace:
    """The space described by the built-in's structure model over the workload, where it has
    one and it reads every shape; else by the configurations' own numbers."""
    kernel = get_builtin(backend, builtin) if builtin else None
    model = kernel.structure if kernel is not None else None
    if model is not None and workload:
        defaults = kernel.default_config if kernel is not None else {}
        try:
            return StructuredSpace(distributions, lambda p: _over_shapes(model, {**defaults, **to_config(p)}, workload),
                                   like)
        except (KeyError, TypeError, ValueError, ZeroDivisionError):  # a shape or value the model cannot read
            pass
    return StructuredSpace(distributions, lambda p: _numbers(to_config(p)), like)


def history(space: StructuredSpace, to_sampler: Callable[[dict[str, Any]], dict[str, Any]],
            to_config: Callable[[dict[str, Any]], dict[str, Any]], backend: str, builtin: str | None,
            learned: list[tuple[list[WorkloadShape], float, list[dict[str, Any]]]]) -> History | None:
    """The related trials (per study: its workload, its distance, its configurations best
    first) that lie in the study's space, as History; None when none does."""
    features, prior, order, weights = [], [], [], []
    for study, (workload, distance, configs) in enumerate(learned):
        there = structured_space(space.distributions, to_config, backend, builtin, workload, like=space)
        rows = [there.index[k] for k in (_key(to_sampler(c)) for c in configs) if k in there.index]
        features.append(there.features[rows])
        prior.append(there.prior[rows])
        order += [(study, place) for place in range(len(rows))]
        weights.append(np.full(len(rows), 2.0 ** -distance))
    if not order:
        return None
    return History(np.vstack(features), np.concatenate(prior), order, np.concatenate(weights))


def auto_picks(space: SearchSpace, builtin: str | None) -> bool:
    """Whether `auto` is `lfbo` here: a built-in kernel over a space lfbo can enumerate. The
    built-ins' recorded sweeps, replayed, are what it was chosen on; a kernel given by source
    keeps NSGA-II or TPE."""
    return builtin is not None and enumerable(space)


def enumerable(space: SearchSpace) -> bool:
    """Whether `lfbo` can score every configuration of the space: finite, without floats, at
    most MAX_POINTS."""
    return space.is_discrete() and (space.grid_size() or 0) <= MAX_POINTS


def _over_shapes(model: StructureModel, config: dict[str, Any], workload: list[WorkloadShape]) -> Structure:
    total = sum(shape.weight for shape in workload)
    each = [(model(config, shape.dims), shape.weight / total) for shape in workload]
    features = [sum(s.features[i] * w for s, w in each) for i in range(len(each[0][0].features))]
    return Structure(features, sum(s.prior * w for s, w in each))


def _numbers(config: dict[str, Any]) -> Structure:
    """log2 of each positive number, the number itself otherwise (bools as 0/1); strings
    count only through the one-hot of their level."""
    values = [config[k] for k in sorted(config)]
    return Structure([_log2(v) for v in values if isinstance(v, int | float)], 0.0)


def _log2(value: float) -> float:
    return math.log2(value) if not isinstance(value, bool) and value > 0 else float(value)


class LFBOSampler(BaseSampler):
    """Options: `gamma` the share of the measured trials labelled among the best,
    `prior_scale` the weight of the structure model's prior (log2 units of estimated
    throughput to logits), `l2` the logistic regression's penalty. Without a space (a
    document being checked) it samples at random."""

    def __init__(self, *, seed: int | None = None, gamma: float = 0.25, prior_scale: float = 2.0, l2: float = 1.0,
                 space: StructuredSpace | None = None, history: History | None = None) -> None:
        if not 0 < gamma < 1:
            raise ValueError(f"gamma must be between 0 and 1 (exclusive), not {gamma}")
        if not 0 <= prior_scale <= 100:
            raise ValueError(f"prior_scale must be between 0 and 100, not {prior_scale}")
        if not 1e-6 <= l2 <= 1e6:
            raise ValueError(f"l2 must be between 1e-6 and 1e6, not {l2}")
        self._seed = seed if seed is not None else int(np.random.SeedSequence().generate_state(1)[0])
        self._gamma = gamma
        self._prior_scale = prior_scale
        self._l2 = l2
        self._space = space
        self._history = history
        self._random = RandomSampler(seed=seed)

    def reseed_rng(self) -> None:
        self._random.reseed_rng()

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return dict(self._space.distributions) if self._space is not None else {}

    def sample_independent(self, study: Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return self._random.sample_independent(study, trial, param_name, param_distribution)

    def sample_relative(self, study: Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        space = self._space
        if space is None or not search_space:
            return {}
        rng = np.random.default_rng([self._seed, trial.number])
        trials = [t for t in study._get_trials(deepcopy=False, use_cache=True)
                  if t.number != trial.number and _key(t.params) in space.index]
        logit = self._prior_scale * space.prior + rng.normal(0.0, 1e-3, len(space.points))  # ties at random
        complete = [t for t in trials if t.state == TrialState.COMPLETE]
        measured = [t for t in complete if _feasible(t)]
        if len(measured) >= 2 or self._history is not None:
            x, y, offset, weight = self._rows(space, measured, logit, study.directions)
            take = rng.integers(len(y), size=len(y))
            weights = logistic(x[take], y[take], offset[take], self._l2, weight[take])
            logit = logit + space.features @ weights[:-1] + weights[-1]
        if measured and len(measured) < len(complete):  # some failed or violate a constraint: how likely each does
            rows = np.array([space.index[_key(t.params)] for t in complete])
            weights = logistic(space.features[rows], np.array([float(_feasible(t)) for t in complete]),
                               np.zeros(len(rows)), self._l2)
            logit = logit - np.logaddexp(0.0, -(space.features @ weights[:-1] + weights[-1]))  # + log P(feasible)
        for t in trials:
            if t.state != TrialState.WAITING:  # asked, running or finished: never again
                logit[space.index[_key(t.params)]] = -np.inf
        if np.isneginf(logit).all():
            return {}  # every configuration asked: the study's mirror says the space is exhausted
        return dict(space.points[int(np.argmax(logit))])


    def _rows(self, space: StructuredSpace, measured: list[FrozenTrial], logit: FloatArray,
              directions: list[StudyDirection]) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
        """The regression's rows (features, labels, offsets, weights): the measured trials, two
        at least, and the history's."""
        parts = []
        if len(measured) >= 2:
            rows = np.array([space.index[_key(t.params)] for t in measured])
            labels = best_share([_minimised(t.values, directions) for t in measured], self._gamma)
            parts.append((space.features[rows], labels, logit[rows], np.ones(len(rows))))
        if self._history is not None:
            h = self._history
            parts.append((h.features, h.labels(self._gamma), self._prior_scale * h.prior, h.weights))
        x, y, offset, weight = (np.concatenate(column) for column in zip(*parts, strict=True))
        return x, y, offset, weight


def best_share(values: list[list[float]], gamma: float) -> FloatArray:
    """1 for the best ceil(gamma * n) of n points (minimised; pareto.best_first), 0 for the rest."""
    labels = np.zeros(len(values))
    labels[pareto.best_first(values)[:best_count(len(values), gamma)]] = 1.0
    return labels


def best_count(n: int, gamma: float) -> int:
    return max(1, math.ceil(gamma * n))


def logistic(x: FloatArray, y: FloatArray, offset: FloatArray, l2: float, weight: FloatArray | None = None,
             steps: int = 25) -> FloatArray:
    """Weights of an L2-penalised logistic regression with a fixed offset and, optionally, a
    weight per row, by Newton's method; the intercept (not penalised) last."""
    a = np.hstack([x, np.ones((len(x), 1))])
    w = np.zeros(a.shape[1])
    rows = np.ones(len(y)) if weight is None else weight
    penalty = np.full(a.shape[1], l2)
    penalty[-1] = 1e-6
    for _ in range(steps):
        p = 0.5 * (1.0 + np.tanh(0.5 * (a @ w + offset)))
        step = np.linalg.solve((a.T * (rows * p * (1 - p))) @ a + np.diag(penalty),
                               a.T @ (rows * (p - y)) + penalty * w)
        w -= step
        if np.abs(step).max() < 1e-6:
            break
    return w


def _axis(dist: BaseDistribution) -> list[Any]:
    if isinstance(dist, CategoricalDistribution):
        return list(dist.choices)
    if isinstance(dist, IntDistribution):
        return list(range(dist.low, dist.high + 1, dist.step))
    raise ValueError(f"lfbo needs a finite space without floats, not {dist}")


def _key(params: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(sorted(params.items()))


def _feasible(trial: FrozenTrial) -> bool:
    return all(v <= 0.0 for k, v in trial.system_attrs.items() if k.startswith(CONSTRAINT_PREFIX))


def _minimised(values: list[float], directions: list[StudyDirection]) -> list[float]:
    return [v if d == StudyDirection.MINIMIZE else -v for v, d in zip(values, directions, strict=True)]

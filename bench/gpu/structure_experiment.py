"""An experiment: a classifier-filtered search over a kernel's structure (likelihood-free BO,
as Helion's LFBO), replayed offline (bench/gpu/replay_offline.py, setting `structure`).

Each configuration of a finite space is described by features of the kernel's structure for
the study's workload shape (`gemm_structure`: tile area, accumulator registers per thread,
shared memory, arithmetic intensity of a tile, CTAs against the SM count, padding waste), or,
for a kernel without a structure model, the log2 of each numeric parameter and every pair's
sum and difference (products and ratios). A structure model also gives a prior: the log2 of
a roofline-style throughput estimate, known before anything is measured.

At each ask the sampler scores every unseen configuration that fits the device with
    logit P(top quantile | x) = prior_scale * prior(x) + w . phi(x) + b
where w, b are a logistic regression with the prior as a fixed offset, fitted on a bootstrap
resample of the measured trials (Thompson-style exploration), labels: the best `gamma` of the
measured trials by Pareto rank (ties by mean rank per objective). The highest score is asked.
Before any measurement the prior alone orders the candidates (ties at random).

Randomness comes from (seed, trial number).
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

from service.domain.pareto import non_dominated_mask

FloatArray = NDArray[np.float64]
Describe = Callable[[dict[str, Any]], tuple[list[float], float, bool]]  # config -> (features, prior, fits)

H200_SMS = 132
H200_SHARED = 232_448


def gemm_structure(config: dict[str, Any], dims: dict[str, int], sms: int = H200_SMS,
                   shared_limit: int = H200_SHARED) -> tuple[list[float], float, bool]:
    bm, bn, bk = int(config["BLOCK_M"]), int(config["BLOCK_N"]), int(config["BLOCK_K"])
    warps, stages = int(config["num_warps"]), int(config["num_stages"])
    m, n = int(dims["m"]), int(dims["n"])
    shared = stages * (bm + bn) * bk * 2
    fits = shared <= shared_limit and warps * 32 <= 1024
    area = math.log2(bm * bn)
    accumulators = math.log2(bm * bn / (32 * warps))  # fp32 accumulator registers per thread
    spill = max(0.0, accumulators - 7)  # over half of the 255 registers a thread has
    intensity = math.log2(bm * bn / (bm + bn))  # flops per byte loaded, of one tile
    ctas = math.ceil(m / bm) * math.ceil(n / bn)
    useful = math.log2(m * n / (math.ceil(m / bm) * bm * math.ceil(n / bn) * bn))
    fill = math.log2(min(1.0, ctas / sms))
    tail = ctas / (math.ceil(ctas / sms) * sms)
    features = [area, accumulators, spill, intensity, useful, fill, tail, math.log2(shared),
                shared / shared_limit, math.log2(bk), float(stages), math.log2(warps), math.log2(ctas)]
    prior = intensity + useful + fill - 4.0 * spill
    return features, prior, fits


def generic_structure(config: dict[str, Any]) -> tuple[list[float], float, bool]:
    logs = [math.log2(float(v)) if not isinstance(v, bool) and float(v) > 0 else float(v)
            for v in (config[k] for k in sorted(config))]
    pairs = [f for a, b in itertools.combinations(logs, 2) for f in (a + b, a - b)]
    return logs + pairs, 0.0, True


class StructureSampler(BaseSampler):
    def __init__(self, describe: Describe, to_config: Callable[[dict[str, Any]], dict[str, Any]],
                 distributions: dict[str, BaseDistribution], *, seed: int | None = None, gamma: float = 0.25,
                 prior_scale: float = 2.0, l2: float = 1.0,
                 levels: bool = True, bootstrap: bool = True, filter_fits: bool = False,
                 infeasible_negative: bool = False) -> None:
        self._describe = describe
        self._to_config = to_config
        self._seed = 0 if seed is None else seed
        self._gamma = gamma
        self._prior_scale = prior_scale
        self._l2 = l2
        self._levels = levels
        self._bootstrap = bootstrap
        self._filter_fits = filter_fits
        self._infeasible_negative = infeasible_negative
        self._random = RandomSampler(seed=seed)
        self._distributions = distributions
        self._grid = self._describe_grid()

    def reseed_rng(self) -> None:
        self._random.reseed_rng()

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return dict(self._distributions)

    def sample_independent(self, study: Study, trial: FrozenTrial, name: str, dist: BaseDistribution) -> Any:
        return self._random.sample_independent(study, trial, name, dist)

    def _describe_grid(self) -> tuple[list[dict[str, Any]], FloatArray, FloatArray, NDArray[np.bool_]]:
        names = sorted(self._distributions)
        axes = [_axis(self._distributions[n]) for n in names]
        points = [dict(zip(names, values, strict=True)) for values in itertools.product(*axes)]
        described = [self._describe(self._to_config(p)) for p in points]
        x = np.array([d[0] for d in described], dtype=float)
        if self._levels:  # a one-hot of every parameter's level beside the structure
            onehot = [[float(p[n] == v) for n, axis in zip(names, axes, strict=True) for v in axis] for p in points]
            x = np.hstack([x, np.array(onehot)])
        x = (x - x.mean(axis=0)) / (x.std(axis=0) + 1e-9)
        prior = np.array([d[1] for d in described])
        fits = np.array([d[2] for d in described])
        return points, x, prior - prior[fits].max(), fits

    def sample_relative(self, study: Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        if not search_space:
            return {}
        points, x, prior, fits = self._grid
        rng = np.random.default_rng([self._seed, trial.number])
        index = {_key(p): i for i, p in enumerate(points)}
        trials = study._get_trials(deepcopy=False, use_cache=True)
        seen = {index[_key(t.params)] for t in trials if t.number != trial.number and t.state != TrialState.WAITING
                and _key(t.params) in index}
        complete = [t for t in trials if t.state == TrialState.COMPLETE and _key(t.params) in index]
        measured = [t for t in complete if _feasible(t)]
        infeasible = [t for t in complete if not _feasible(t)] if self._infeasible_negative else []
        logit = self._prior_scale * prior + rng.normal(0.0, 1e-3, len(points))  # ties at random
        if len(measured) >= 2:
            rows = np.array([index[_key(t.params)] for t in measured + infeasible])
            labels = _top(np.array([_minimised(t.values, study.directions) for t in measured]), self._gamma)
            labels = np.concatenate([labels, np.zeros(len(infeasible))])
            take = rng.integers(len(rows), size=len(rows)) if self._bootstrap else np.arange(len(rows))
            w = _logistic(x[rows[take]], labels[take], logit[rows[take]], self._l2)
            logit = logit + x @ w[:-1] + w[-1]
        open_ = fits.copy() if self._filter_fits else np.ones(len(points), dtype=bool)
        open_[list(seen)] = False
        if not open_.any():
            return {}
        return dict(points[int(np.argmax(np.where(open_, logit, -np.inf)))])


def _axis(dist: BaseDistribution) -> list[Any]:
    if isinstance(dist, CategoricalDistribution):
        return list(dist.choices)
    if isinstance(dist, IntDistribution):
        return list(range(dist.low, dist.high + 1, dist.step))
    raise ValueError(f"{dist} is not finite")


def _key(params: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(sorted(params.items()))


def _feasible(trial: FrozenTrial) -> bool:
    return all(v <= 0.0 for k, v in trial.system_attrs.items() if k.startswith("constraints:"))


def _minimised(values: list[float], directions: list[StudyDirection]) -> list[float]:
    return [v if d == StudyDirection.MINIMIZE else -v for v, d in zip(values, directions, strict=True)]


def _top(y: FloatArray, gamma: float) -> FloatArray:
    """1 for the best ceil(gamma * n) rows by Pareto rank, ties by mean rank per objective."""
    rank = np.zeros(len(y))
    left = np.arange(len(y))
    level = 0
    while len(left):
        mask = non_dominated_mask(y[left])
        rank[left[mask]] = level
        left = left[~mask]
        level += 1
    mean_rank = np.argsort(np.argsort(y, axis=0), axis=0).mean(axis=1)
    order = np.lexsort((mean_rank, rank))
    labels = np.zeros(len(y))
    labels[order[: max(1, math.ceil(gamma * len(y)))]] = 1.0
    return labels


def _logistic(x: FloatArray, y: FloatArray, offset: FloatArray, l2: float, steps: int = 25) -> FloatArray:
    """L2-penalised logistic regression with a fixed offset, by Newton's method; the intercept
    is the last weight (not penalised)."""
    a = np.hstack([x, np.ones((len(x), 1))])
    w = np.zeros(a.shape[1])
    penalty = np.full(a.shape[1], l2)
    penalty[-1] = 1e-6
    for _ in range(steps):
        p = 0.5 * (1.0 + np.tanh(0.5 * (a @ w + offset)))
        gradient = a.T @ (p - y) + penalty * w
        hessian = (a.T * (p * (1 - p))) @ a + np.diag(penalty)
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.abs(step).max() < 1e-6:
            break
    return w

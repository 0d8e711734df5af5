"""Turn a workload's per-shape samples into the study's objectives. Pure; no GPU.

A workload is a list of shapes with weights (the traffic mix). For each shape the harness
collects hot per-call times (one sample per CUDA-graph replay), the energy window of the hot
run, and cold per-call latencies. The objectives aggregate as a busy server would see them:

- runtime_ms, energy_mj: the weighted mean over shapes of each shape's value;
- power_w: weighted energy over weighted time (average power of the mix), each shape's time
  per call taken over the same spans as its energy;
- latency_ms, p99_ms: the median and 99th percentile of the weighted mixture of the cold
  latency distributions (a sample of shape s weighs w_s / n_s).

Each metric carries a confidence interval: for single-shape runtime the order-statistic
interval of the median (from `workers.measure.stats.summarize`), for mixtures a linear
combination of the shapes' intervals, and for mixture quantiles a stratified bootstrap with
a fixed seed (so the same samples always give the same interval).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np

from wire.contract import Metric
from workers.measure.gpu_energy import EnergyWindow, energy_per_call_mj
from workers.measure.stats import summarize

HOT_OBJECTIVES = frozenset({"runtime_ms", "energy_mj", "power_w"})
COLD_OBJECTIVES = frozenset({"latency_ms", "p99_ms"})
GPU_OBJECTIVES = HOT_OBJECTIVES | COLD_OBJECTIVES

BOOTSTRAP_RESAMPLES = 300
BOOTSTRAP_SEED = 20261129


@dataclass
class ShapeSamples:
    """What the harness measured for one workload shape."""

    key: str
    weight: float
    hot_ms: list[float] = field(default_factory=list)  # per-call time of each graph replay
    hot_mean_ms: float | None = None  # whole hot window: elapsed / calls
    energy: EnergyWindow | None = None
    energy_calls: float | None = None  # calls that ran in the energy window's spans
    edge_energy_mj: float | None = None  # first-to-last-tick estimate per call, kept for comparison
    edge_power_w: float | None = None
    cold_ms: list[float] = field(default_factory=list)


def weighted_quantile(groups: Sequence[Sequence[float] | np.ndarray], weights: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) of a mixture: group g has total weight weights[g].

    The smallest sample whose cumulative weight reaches q of the total (the inverse of the
    mixture's empirical distribution function).
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError("q must be within [0, 1]")
    values: list[float] = []
    masses: list[float] = []
    for samples, weight in zip(groups, weights, strict=True):
        if len(samples) == 0:
            continue
        values.extend(samples)
        masses.extend([weight / len(samples)] * len(samples))
    if not values:
        raise ValueError("no samples")
    order = np.argsort(np.asarray(values), kind="stable")
    sorted_values = np.asarray(values)[order]
    cumulative = np.cumsum(np.asarray(masses)[order])
    target = q * cumulative[-1]
    index = int(np.searchsorted(cumulative, target - 1e-12 * cumulative[-1], side="left"))
    return float(sorted_values[min(index, len(sorted_values) - 1)])


def bootstrap_quantile_ci(
    groups: Sequence[Sequence[float] | np.ndarray],
    weights: Sequence[float],
    q: float,
    confidence: float = 0.95,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float, float]:
    """Percentile-bootstrap interval of the mixture quantile, resampling within each shape."""
    rng = np.random.default_rng(seed)
    arrays = [np.asarray(g, dtype=float) for g in groups]
    estimates = np.empty(resamples)
    for i in range(resamples):
        drawn = [a[rng.integers(0, len(a), len(a))] if len(a) else a for a in arrays]
        estimates[i] = weighted_quantile(drawn, weights, q)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(estimates, [alpha, 1.0 - alpha])
    return float(low), float(high)


def _weighted_mean(values: Sequence[float], weights: Sequence[float]) -> float:
    total = sum(weights)
    return sum(v * w for v, w in zip(values, weights, strict=True)) / total


def _combine(metrics: Sequence[Metric], weights: Sequence[float], unit: str) -> Metric:
    """Weighted mean of per-shape metrics; the interval combines the shapes' bounds."""
    if len(metrics) == 1:
        return metrics[0]
    lows = [m.ci_low if m.ci_low is not None else m.value for m in metrics]
    highs = [m.ci_high if m.ci_high is not None else m.value for m in metrics]
    return Metric(
        value=_weighted_mean([m.value for m in metrics], weights),
        unit=unit,
        ci_low=_weighted_mean(lows, weights),
        ci_high=_weighted_mean(highs, weights),
        n=sum(m.n for m in metrics),
        stats={f"shape{i}": m.value for i, m in enumerate(metrics)},
    )


def shape_energy_per_call_mj(shape: ShapeSamples) -> float | None:
    """The energy window's energy over the calls counted between its ticks; where they were
    not counted, over the window's span at the hot run's mean call time."""
    if shape.energy is None or not shape.hot_mean_ms:
        return None
    if shape.energy_calls:
        return shape.energy.energy_mj / shape.energy_calls
    return energy_per_call_mj(shape.energy, shape.hot_mean_ms / 1000.0)


def shape_seconds_per_call(shape: ShapeSamples) -> float:
    """Time per call over the energy window's own spans, so that power and energy share a
    time base; the hot run's mean where the calls were not counted."""
    if shape.energy is not None and shape.energy_calls:
        return shape.energy.seconds / shape.energy_calls
    return float(shape.hot_mean_ms or 0.0) / 1000.0


def _energy_metric(shape: ShapeSamples, confidence: float) -> Metric | None:
    value = shape_energy_per_call_mj(shape)
    if value is None or shape.energy is None or not shape.hot_mean_ms:
        return None
    seconds_per_call = shape.hot_mean_ms / 1000.0
    per_interval = [p * 1000.0 * seconds_per_call for p in shape.energy.interval_power_w]
    stats: dict[str, float] = {
        "window_s": shape.energy.seconds,
        "ticks": float(shape.energy.ticks),
        "power_w": shape.energy.power_w,
        "calls": shape.energy_calls or shape.energy.seconds / seconds_per_call,
        "periods": float(shape.energy.periods),
    }
    if shape.edge_energy_mj is not None and shape.edge_power_w is not None:
        stats.update(edge_mj=shape.edge_energy_mj, edge_power_w=shape.edge_power_w)
    ci_low = ci_high = None
    if len(per_interval) >= 2:
        stats.update({f"interval_{k}": v for k, v in summarize(per_interval, "mJ", confidence).stats.items()})
        # The whole window is the estimate; its ~100 ms pieces are independent estimates of
        # the same quantity, so their standard error bounds the window's.
        z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
        half = z * float(np.std(per_interval, ddof=1)) / float(np.sqrt(len(per_interval)))
        ci_low, ci_high = value - half, value + half
    return Metric(value=value, unit="mJ", ci_low=ci_low, ci_high=ci_high, n=len(per_interval), stats=stats)


def _power_metric(shapes: Sequence[ShapeSamples], weights: Sequence[float], confidence: float) -> Metric | None:
    per_call = [shape_energy_per_call_mj(s) for s in shapes]
    if any(e is None for e in per_call):
        return None
    windows = [s.energy for s in shapes if s.energy is not None]
    times = [shape_seconds_per_call(s) * 1000.0 for s in shapes]
    energies = [float(e or 0.0) for e in per_call]
    value = _weighted_mean(energies, weights) / _weighted_mean(times, weights)
    interval = [p for w in windows for p in w.interval_power_w]
    ci_low = ci_high = None
    if len(interval) >= 2:
        z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
        half = z * float(np.std(interval, ddof=1)) / float(np.sqrt(len(interval)))
        ci_low, ci_high = value - half, value + half
    return Metric(
        value=value,
        unit="W",
        ci_low=ci_low,
        ci_high=ci_high,
        n=len(interval),
        stats={"window_s": sum(w.seconds for w in windows)},
    )


def _cold_metric(shapes: Sequence[ShapeSamples], weights: Sequence[float], q: float, confidence: float) -> Metric:
    groups = [s.cold_ms for s in shapes]
    value = weighted_quantile(groups, weights, q)
    low, high = bootstrap_quantile_ci(groups, weights, q, confidence)
    pooled = [x for g in groups for x in g]
    stats = dict(summarize(pooled, unit="ms", confidence=confidence).stats)
    return Metric(
        value=value,
        unit="ms",
        ci_low=min(low, value),
        ci_high=max(high, value),
        n=len(pooled),
        stats=stats,
    )


def workload_metrics(
    shapes: Sequence[ShapeSamples], objectives: Sequence[str], confidence: float = 0.95
) -> dict[str, Metric]:
    """The objectives this harness can measure, aggregated over the workload's shapes."""
    weights = [s.weight for s in shapes]
    wanted = set(objectives)
    metrics: dict[str, Metric] = {}
    if wanted & HOT_OBJECTIVES and all(s.hot_ms for s in shapes):
        per_shape = [summarize(s.hot_ms, unit="ms", confidence=confidence) for s in shapes]
        metrics["runtime_ms"] = _combine(per_shape, weights, "ms")
        energies = [_energy_metric(s, confidence) for s in shapes]
        if all(e is not None for e in energies):
            metrics["energy_mj"] = _combine(energies, weights, "mJ")  # type: ignore[arg-type]
            power = _power_metric(shapes, weights, confidence)
            if power is not None:
                metrics["power_w"] = power
    if wanted & COLD_OBJECTIVES and all(s.cold_ms for s in shapes):
        metrics["latency_ms"] = _cold_metric(shapes, weights, 0.5, confidence)
        metrics["p99_ms"] = _cold_metric(shapes, weights, 0.99, confidence)
    return metrics


def spread(values: Sequence[float]) -> float:
    """max/min - 1: how far apart repeated measurements of one configuration landed."""
    if not values:
        raise ValueError("no values")
    low = min(values)
    if low <= 0:
        raise ValueError("spread needs positive values")
    return max(values) / low - 1.0

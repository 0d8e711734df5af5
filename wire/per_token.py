"""Per-token objectives of a kernel under a traffic mix (docs/measurement.md, "Per-token
objectives"), derived where they are measured from the per-call ones.

A study may name `time_per_token_us`, `energy_per_token_mj` and `tokens_per_joule` as
objectives; a backend measures `runtime_ms` and `energy_mj` (weighted means over the workload's
shapes) and these follow with m = sum(w_s m_s) / sum(w_s), the mean tokens of a call, m_s being
the shape's token dim (`kernel.options.token_dim`, by default `m`):

    time_per_token_us   = 1000 * runtime_ms / m
    energy_per_token_mj = energy_mj / m
    tokens_per_joule    = 1000 / energy_per_token_mj

m is exact, so intervals and statistics scale with the value (tokens_per_joule's bounds are the
reciprocals of energy's, swapped; of its statistics, those a reciprocal keeps in order).
"""

from __future__ import annotations

from collections.abc import Sequence

from wire.contract import KernelSpec, Metric, WorkloadShape

SOURCES = {"time_per_token_us": "runtime_ms", "energy_per_token_mj": "energy_mj", "tokens_per_joule": "energy_mj"}
DEFAULT_TOKEN_DIM = "m"
SCALES = frozenset({"median", "mean", "std", "p50", "p95", "p99", "min", "max"})  # statistics in the value's unit


def token_dim(kernel: KernelSpec) -> str:
    return str(kernel.options.get("token_dim") or DEFAULT_TOKEN_DIM)


def tokens_per_call(workload: Sequence[WorkloadShape], dim: str) -> float:
    """The mean tokens of a call under the workload's weights; ValueError naming what is missing."""
    missing = [shape.dims for shape in workload if not shape.dims.get(dim)]
    if not workload or missing:
        raise ValueError(f"per-token objectives need the token dim {dim!r} (kernel.options.token_dim) above 0 in "
                         f"every workload shape; {missing or 'there is no shape'} lack it")
    total = sum(shape.weight for shape in workload)
    return sum(shape.weight * shape.dims[dim] for shape in workload) / total


def measured(objectives: Sequence[str]) -> list[str]:
    """What a backend measures for `objectives`: per-token ones replaced by their sources."""
    names: list[str] = []
    for name in objectives:
        source = SOURCES.get(name, name)
        if source not in names:
            names.append(source)
    return names


def _scaled(metric: Metric, factor: float, unit: str) -> Metric:
    def times(value: float | None) -> float | None:
        return None if value is None else value * factor

    return Metric(value=metric.value * factor, unit=unit, ci_low=times(metric.ci_low), ci_high=times(metric.ci_high),
                  n=metric.n, stats={k: v * factor if k in SCALES else v for k, v in metric.stats.items()})


def _reciprocal(metric: Metric, numerator: float, unit: str) -> Metric:
    def over(value: float | None) -> float | None:
        return None if value is None or value <= 0 else numerator / value

    swapped = {"median": "median", "min": "max", "max": "min"}
    stats = {new: numerator / metric.stats[old] for new, old in swapped.items() if metric.stats.get(old, 0) > 0}
    stats.update({k: v for k, v in metric.stats.items() if k not in SCALES})  # ci_coverage
    return Metric(value=numerator / metric.value, unit=unit, ci_low=over(metric.ci_high), ci_high=over(metric.ci_low),
                  n=metric.n, stats=stats)


def derived(metrics: dict[str, Metric], objectives: Sequence[str], kernel: KernelSpec) -> dict[str, Metric]:
    """The per-token metrics `objectives` name, from the measured `metrics`."""
    wanted = [name for name in objectives if name in SOURCES and SOURCES[name] in metrics]
    if not wanted:
        return {}
    tokens = tokens_per_call(kernel.workload, token_dim(kernel))
    values: dict[str, Metric] = {}
    for name in wanted:
        source = metrics[SOURCES[name]]
        if name == "time_per_token_us":
            values[name] = _scaled(source, 1000 / tokens, "us")
        elif source.value > 0:
            per_token = _scaled(source, 1 / tokens, "mJ")
            values[name] = per_token if name == "energy_per_token_mj" else _reciprocal(per_token, 1000, "tokens/J")
    return values

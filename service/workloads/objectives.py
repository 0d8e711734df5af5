"""Per-token objectives over a traffic mix (defined in docs/measurement.md, "Per-token
objectives").

A workload's weights w_s are the shares of forward steps whose tokens are m_s (the shape's
token dim, service.workloads.mix). The workload objectives `runtime_ms` and `energy_mj` are
the weighted means of the shapes' per-call values, and a mean call serves
m = sum(w_s m_s) / sum(w_s) tokens, so per token:

    time_per_token_us   = 1000 * runtime_ms / m
    energy_per_token_mj = energy_mj / m
    tokens_per_joule    = 1000 / energy_per_token_mj

m is exact, so an interval divides the same way (tokens_per_joule takes the reciprocal
bounds). A layer's figure adds its kernels' per-token time and energy, each as many times as
the kernel runs in a layer's step; tokens_per_joule is the reciprocal of the sum.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from wire.contract import WorkloadShape

OBJECTIVES: dict[str, tuple[Literal["minimize", "maximize"], str]] = {
    "time_per_token_us": ("minimize", "us"),
    "energy_per_token_mj": ("minimize", "mJ"),
    "tokens_per_joule": ("maximize", "tokens/J"),
}


@dataclass(frozen=True)
class Estimate:
    """A value with its confidence interval (None: no interval)."""

    value: float
    low: float | None = None
    high: float | None = None

    def scaled(self, factor: float) -> Estimate:
        return Estimate(self.value * factor, _times(self.low, factor), _times(self.high, factor))

    def reciprocal(self, numerator: float) -> Estimate:
        """numerator / this; the bounds swap."""
        return Estimate(numerator / self.value, _over(numerator, self.high), _over(numerator, self.low))

    def __add__(self, other: Estimate) -> Estimate:
        both = None not in (self.low, self.high, other.low, other.high)
        return Estimate(self.value + other.value,
                        (self.low or 0) + (other.low or 0) if both else None,
                        (self.high or 0) + (other.high or 0) if both else None)


def _times(bound: float | None, factor: float) -> float | None:
    return None if bound is None else bound * factor


def _over(numerator: float, bound: float | None) -> float | None:
    return None if bound is None or bound <= 0 else numerator / bound


def tokens_per_call(workload: Sequence[WorkloadShape], token_dim: str = "m") -> float:
    """The mean tokens of a call under the workload's weights."""
    total = sum(shape.weight for shape in workload)
    missing = [shape.dims for shape in workload if token_dim not in shape.dims]
    if not total or missing:
        raise ValueError(f"every shape needs the token dim {token_dim!r} and the weights a positive sum")
    return sum(shape.weight * shape.dims[token_dim] for shape in workload) / total


def per_token(workload: Sequence[WorkloadShape], runtime_ms: Estimate | None, energy_mj: Estimate | None,
              token_dim: str = "m") -> dict[str, Estimate]:
    """The per-token objectives a kernel's workload objectives give (those that can be had)."""
    tokens = tokens_per_call(workload, token_dim)
    values: dict[str, Estimate] = {}
    if runtime_ms is not None:
        values["time_per_token_us"] = runtime_ms.scaled(1000 / tokens)
    if energy_mj is not None and energy_mj.value > 0:
        values["energy_per_token_mj"] = energy_mj.scaled(1 / tokens)
        values["tokens_per_joule"] = values["energy_per_token_mj"].reciprocal(1000)
    return values


def layer_per_token(kernels: Iterable[tuple[int, dict[str, Estimate]]]) -> dict[str, Estimate]:
    """A layer's per-token time and energy from (calls per layer, the kernel's per_token); a
    figure only where every kernel has it (a partial sum would flatter the layer)."""
    listed = list(kernels)
    totals: dict[str, Estimate] = {}
    for name in ("time_per_token_us", "energy_per_token_mj"):
        if listed and all(name in values for _, values in listed):
            terms = [values[name].scaled(calls) for calls, values in listed]
            totals[name] = sum(terms[1:], terms[0])
    if "energy_per_token_mj" in totals:
        totals["tokens_per_joule"] = totals["energy_per_token_mj"].reciprocal(1000)
    return totals

"""What a worker's result means for a study, with no I/O: the objective values, the
constraint values (<= 0 is feasible) and feasibility, or why the result cannot count."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Outcome:
    values: dict[str, float]
    constraint_values: list[float] | None  # None when the study has no constraints
    feasible: bool


class Unusable(Exception):
    """The worker's result cannot count as completed (a needed metric is missing or bad)."""


class ConstraintLike(Protocol):
    """A study's constraint: `metric` `op` (<= or >=) `value`."""

    @property
    def metric(self) -> str: ...
    @property
    def op(self) -> str: ...
    @property
    def value(self) -> float: ...


def evaluate(objectives: Sequence[str], constraints: Sequence[ConstraintLike],
             metrics: Mapping[str, float]) -> Outcome:
    """`metrics` maps metric names to measured values; `objectives` are names."""
    needed = [*objectives, *(c.metric for c in constraints)]
    for name in needed:
        if name not in metrics:
            raise Unusable(f"the worker reported no value for {name!r}")
        if not math.isfinite(metrics[name]):
            raise Unusable(f"{name!r} is not a finite number ({metrics[name]})")
    values = {name: float(metrics[name]) for name in objectives}
    limits = [constraint_value(c.op, float(c.value), float(metrics[c.metric])) for c in constraints]
    return Outcome(values, limits or None, all(v <= 0 for v in limits))


def constraint_value(op: str, limit: float, measured: float) -> float:
    """How far the measurement is past a constraint's limit (`op` <= or >=; > 0 violates it)."""
    return measured - limit if op == "<=" else limit - measured

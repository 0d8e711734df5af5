"""Optuna's samplers by the names a study document uses, checked by constructing them.

The `grid` sampler is Optuna's RandomSampler fed the grid's points one by one (see
service.scheduling.mirror): Optuna's GridSampler materialises every point of the grid, and a
small document can describe billions of them.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import optuna

from service.domain.study_doc import DocumentError

SAMPLER_CLASSES: dict[str, type[optuna.samplers.BaseSampler]] = {
    "nsga2": optuna.samplers.NSGAIISampler,
    "nsga3": optuna.samplers.NSGAIIISampler,
    "tpe": optuna.samplers.TPESampler,
    "gp": optuna.samplers.GPSampler,
    "random": optuna.samplers.RandomSampler,
    "grid": optuna.samplers.RandomSampler,
}
RESERVED_OPTIONS = {"seed", "constraints_func", "search_space"}
# options a document may set: those whose annotation is made of plain scalar types
_SCALAR_ANNOTATION = re.compile(r"^(int|float|bool|str|None)( \| (int|float|bool|str|None))*$")
# they rank infeasible trials by their violation alone, so failures can be told as infeasible
CONSTRAINT_SAMPLERS = {"nsga2", "nsga3", "tpe"}


def resolve_name(name: str, n_objectives: int) -> str:
    if name == "auto":
        return "nsga2" if n_objectives > 1 else "tpe"
    return name


def settable_options(name: str) -> dict[str, inspect.Parameter]:
    if name == "grid":
        return {}
    params = inspect.signature(SAMPLER_CLASSES[name]).parameters
    return {k: p for k, p in params.items()
            if k not in RESERVED_OPTIONS and _SCALAR_ANNOTATION.match(str(p.annotation).strip("'\""))}


def build(name: str, seed: int | None, options: dict[str, Any]) -> optuna.samplers.BaseSampler:
    return SAMPLER_CLASSES[name](seed=seed, **options)  # type: ignore[call-arg]


def check(name: str, seed: int | None, options: dict[str, Any]) -> None:
    """Refuse options the sampler does not take, and any it refuses when built (field:
    sampler.options.<key>, or sampler.options with Optuna's own message)."""
    allowed = settable_options(name)
    for key in options:
        if key not in allowed:
            takes = ", ".join(sorted(allowed)) or "none"
            raise DocumentError(f"sampler.options.{key}", f"sampler {name!r} has no option {key!r}; it takes: {takes}")
    if name == "gp":
        try:
            import torch  # noqa: F401
        except ImportError as exc:
            raise DocumentError(
                "sampler.name", "sampler 'gp' needs PyTorch on the control plane; use nsga2, tpe or random"
            ) from exc
    try:
        build(name, seed, options)
    except Exception as exc:  # Optuna's own check of the values: say what it said
        field = f"sampler.options.{next(iter(options))}" if len(options) == 1 else "sampler.options"
        raise DocumentError(field, f"sampler {name!r} refused these options: {exc}") from exc

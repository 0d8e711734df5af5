"""The study document: what a platform team sends to start a tuning study.

Validation lives here so that every mistake is reported with the field that holds it and
what is allowed there (the API turns these into 422 responses).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from workers.contract import MeasureSettings, WorkloadShape

# name -> (default direction, unit, meaning)
KNOWN_OBJECTIVES: dict[str, tuple[str, str, str]] = {
    "runtime_ms": ("minimize", "ms", "hot time per call (back-to-back calls)"),
    "latency_ms": ("minimize", "ms", "median cold per-call latency"),
    "p99_ms": ("minimize", "ms", "99th percentile of cold per-call latency"),
    "energy_mj": ("minimize", "mJ", "energy per call in the hot window"),
    "power_w": ("minimize", "W", "average power in the hot window"),
    "compile_s": ("minimize", "s", "compile time of the configuration"),
}
ENERGY_OBJECTIVES = {"energy_mj", "power_w"}
BACKENDS = ("cpu", "python", "triton", "cuda")
SAMPLERS = ("nsga2", "nsga3", "tpe", "gp", "random", "grid")
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,99}$")
MAX_PARAMETERS = 200
MAX_CHOICES = 10_000

Scalar = str | int | float | bool | None


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class IntParam(StrictModel):
    name: str
    type: Literal["int"]
    low: int
    high: int
    step: int = Field(default=1, ge=1)
    log: bool = False
    default: int | None = None

    @model_validator(mode="after")
    def _range(self) -> IntParam:
        _check_range(self.low, self.high, self.log)
        if self.log and self.step != 1:
            raise ValueError("step must be 1 when log is true")
        if (self.high - self.low) % self.step:
            raise ValueError(f"high - low ({self.high - self.low}) must be a multiple of step ({self.step})")
        if self.default is not None and not (
            self.low <= self.default <= self.high and (self.default - self.low) % self.step == 0
        ):
            raise ValueError(f"default {self.default} is not in [{self.low}, {self.high}] step {self.step}")
        return self


class FloatParam(StrictModel):
    name: str
    type: Literal["float"]
    low: float
    high: float
    step: float | None = Field(default=None, gt=0)
    log: bool = False
    default: float | None = None

    @model_validator(mode="after")
    def _range(self) -> FloatParam:
        _check_range(self.low, self.high, self.log)
        if self.log and self.step is not None:
            raise ValueError("step cannot be combined with log: true")
        if self.default is not None and not self.low <= self.default <= self.high:
            raise ValueError(f"default {self.default} is not in [{self.low}, {self.high}]")
        return self


class CategoricalParam(StrictModel):
    name: str
    type: Literal["categorical"]
    choices: list[Scalar] = Field(max_length=MAX_CHOICES)
    default: Scalar = None

    @model_validator(mode="after")
    def _choices(self) -> CategoricalParam:
        if not self.choices:
            raise ValueError("choices must name at least one value")
        if len({repr(c) for c in self.choices}) != len(self.choices):
            raise ValueError("choices must not repeat a value")
        if "default" in self.model_fields_set and self.default not in self.choices:
            raise ValueError(f"default {self.default!r} is not one of the choices")
        return self


class BoolParam(StrictModel):
    name: str
    type: Literal["bool"]
    default: bool | None = None


Parameter = Annotated[IntParam | FloatParam | CategoricalParam | BoolParam, Field(discriminator="type")]


def _check_range(low: float, high: float, log: bool) -> None:
    if low > high:
        raise ValueError(f"low ({low}) must not be greater than high ({high})")
    if log and low <= 0:
        raise ValueError(f"low must be > 0 when log is true (got {low})")


class Objective(StrictModel):
    name: str
    direction: Literal["minimize", "maximize"] | None = None


class Constraint(StrictModel):
    metric: str
    op: Literal["<=", ">="]
    value: float


class Kernel(StrictModel):
    backend: str
    builtin: str | None = Field(default=None, max_length=100)
    source: str | None = Field(default=None, max_length=500_000)
    entry: str | None = Field(default=None, max_length=200)
    workload: list[WorkloadShape] = Field(default_factory=list, max_length=1000)
    options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("backend")
    @classmethod
    def _backend(cls, value: str) -> str:
        if value not in BACKENDS:
            raise ValueError(f"unknown backend {value!r}; use one of {', '.join(BACKENDS)}")
        return value

    @model_validator(mode="after")
    def _what(self) -> Kernel:
        if bool(self.builtin) == bool(self.source):
            raise ValueError("name exactly one of builtin (a built-in kernel) or source")
        return self


class Sampler(StrictModel):
    name: str = "auto"
    seed: int | None = None
    options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if value not in (*SAMPLERS, "auto"):
            raise ValueError(f"unknown sampler {value!r}; use one of {', '.join(SAMPLERS)}")
        return value


class Budget(StrictModel):
    max_trials: int = Field(default=100, ge=1, le=1_000_000)
    max_failed_trials: int | None = Field(default=None, ge=0)
    wall_time_s: float | None = Field(default=None, gt=0)


class Limits(StrictModel):
    compile_timeout_s: float = Field(default=300, gt=0, le=86_400)
    run_timeout_s: float = Field(default=600, gt=0, le=86_400)
    max_attempts: int = Field(default=3, ge=1, le=20)


class StudyDocument(StrictModel):
    name: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=10_000)
    kernel: Kernel
    space: list[Parameter] | None = Field(default=None, max_length=MAX_PARAMETERS)
    baseline: dict[str, Any] | None = None
    objectives: list[Objective | str] = Field(min_length=1, max_length=8)
    constraints: list[Constraint] = Field(default_factory=list, max_length=32)
    sampler: Sampler = Field(default_factory=Sampler)
    budget: Budget = Field(default_factory=Budget)
    parallelism: int = Field(default=4, ge=1, le=10_000)
    pool: str = Field(default="default", min_length=1, max_length=100)
    limits: Limits = Field(default_factory=Limits)
    measure: MeasureSettings = Field(default_factory=MeasureSettings)
    reference_point: dict[str, float] | None = None  # per objective, relative to the baseline

    @field_validator("objectives", mode="after")
    @classmethod
    def _objectives(cls, value: list[Objective | str]) -> list[Objective | str]:
        return [Objective(name=o) if isinstance(o, str) else o for o in value]

    @field_validator("space", mode="after")
    @classmethod
    def _space(cls, value: list[Any] | None) -> list[Any] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("space must hold at least one parameter (or be left out for a built-in)")
        names = [p.name for p in value]
        for name in names:
            if not NAME_RE.match(name):
                raise ValueError(f"parameter name {name!r} must match {NAME_RE.pattern}")
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"parameter names must be unique; repeated: {', '.join(duplicates)}")
        return value


class DocumentError(ValueError):
    """A semantic error found after the schema check, with the field that holds it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def resolve_objectives(doc: StudyDocument) -> list[dict[str, str]]:
    """Objectives as [{"name", "direction"}]; unknown names are refused except for python
    kernels, whose function returns metrics of its own naming."""
    resolved = []
    seen: set[str] = set()
    for i, objective in enumerate(doc.objectives):
        assert isinstance(objective, Objective)
        name = objective.name
        if name in seen:
            raise DocumentError(f"objectives.{i}.name", f"objective {name!r} is listed twice")
        seen.add(name)
        known = KNOWN_OBJECTIVES.get(name)
        if known is None and (doc.kernel.backend != "python" or not NAME_RE.match(name)):
            raise DocumentError(
                f"objectives.{i}.name",
                f"unknown objective {name!r}; use one of {', '.join(KNOWN_OBJECTIVES)}"
                + (" (python kernels may also name metrics their function returns)"),
            )
        direction = objective.direction or (known[0] if known else "minimize")
        resolved.append({"name": name, "direction": direction})
    for i, constraint in enumerate(doc.constraints):
        if constraint.metric not in KNOWN_OBJECTIVES and constraint.metric not in seen:
            raise DocumentError(
                f"constraints.{i}.metric",
                f"unknown metric {constraint.metric!r}; use an objective of this study or one of "
                f"{', '.join(KNOWN_OBJECTIVES)}",
            )
    return resolved


def param_default(param: Any) -> Any:
    if param.default is not None or isinstance(param, CategoricalParam) and "default" in param.model_fields_set:
        return param.default
    return None


def resolve_baseline(space: list[Any], given: dict[str, Any] | None, builtin_default: dict[str, Any]) -> dict[str, Any]:
    """The baseline configuration: the document's, else the built-in kernel's default, else
    each parameter's default. Every parameter must get a value inside its range."""
    baseline: dict[str, Any] = {}
    by_name = {p.name: p for p in space}
    for key in given or {}:
        if key not in by_name:
            raise DocumentError(f"baseline.{key}", f"baseline names {key!r}, which is not a parameter of the space")
    for index, param in enumerate(space):
        if given and param.name in given:
            value, field = given[param.name], f"baseline.{param.name}"
        elif param.name in builtin_default:
            value, field = builtin_default[param.name], f"space.{index}"
        else:
            value, field = param_default(param), f"space.{index}.default"
            if value is None:
                raise DocumentError(
                    field,
                    f"parameter {param.name!r} has no default: give it a default or set baseline.{param.name}",
                )
        problem = value_problem(param, value)
        if problem:
            raise DocumentError(field, f"baseline value for {param.name!r}: {problem}")
        baseline[param.name] = value
    return baseline


def value_problem(param: Any, value: Any) -> str | None:
    """Why `value` is not a valid setting of `param`, or None."""
    if isinstance(param, BoolParam):
        return None if isinstance(value, bool) else f"{value!r} is not true or false"
    if isinstance(param, CategoricalParam):
        return None if value in param.choices else f"{value!r} is not one of {param.choices}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"{value!r} is not a number"
    if isinstance(param, IntParam):
        if not isinstance(value, int):
            return f"{value!r} is not an integer"
        if not param.low <= value <= param.high or (value - param.low) % param.step:
            return f"{value} is not in [{param.low}, {param.high}] step {param.step}"
        return None
    if not param.low <= value <= param.high:
        return f"{value} is not in [{param.low}, {param.high}]"
    return None


def grid_size(space: list[Any]) -> int | None:
    """Number of points of the full grid, or None when a float parameter has no step."""
    size = 1
    for param in space:
        if isinstance(param, BoolParam):
            size *= 2
        elif isinstance(param, CategoricalParam):
            size *= len(param.choices)
        elif isinstance(param, IntParam):
            size *= (param.high - param.low) // param.step + 1
        elif param.step is None:
            return None
        else:
            size *= int(round((param.high - param.low) / param.step)) + 1
    return size


def grid_values(param: Any) -> list[Any]:
    if isinstance(param, BoolParam):
        return [False, True]
    if isinstance(param, CategoricalParam):
        return list(param.choices)
    if isinstance(param, IntParam):
        return list(range(param.low, param.high + 1, param.step))
    count = int(round((param.high - param.low) / param.step)) + 1
    return [param.low + i * param.step for i in range(count)]

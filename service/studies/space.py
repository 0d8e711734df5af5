"""The search space: one model that validates parameters and values, counts and walks the
grid without materialising it, and gives Optuna its distributions.

A study document holds the space as a list of parameters; `SearchSpace.parse` reads that
list (from a request or from a stored document) and everything else asks the model.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,99}$")
MAX_PARAMETERS = 200
MAX_CHOICES = 10_000
MAX_GRID_POINTS = 1_000_000  # the grid sampler refuses larger grids (see docs/api.md)
MAX_STRING = 1_000

Scalar = Annotated[str, Field(max_length=MAX_STRING)] | int | float | bool | None


class StrictModel(BaseModel):
    """Unknown fields, NaN and infinities are refused everywhere in a study document."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class IntParam(StrictModel):
    name: str
    type: Literal["int"]
    low: int = Field(ge=-(2**62), le=2**62)
    high: int = Field(ge=-(2**62), le=2**62)
    step: int = Field(default=1, ge=1, le=2**62)
    log: bool = False
    default: int | None = None

    @model_validator(mode="after")
    def _range(self) -> IntParam:
        _check_range(self.low, self.high, self.log)
        if self.log and self.step != 1:
            raise ValueError("step must be 1 when log is true")
        if (self.high - self.low) % self.step:
            raise ValueError(f"high - low ({self.high - self.low}) must be a multiple of step ({self.step})")
        if self.default is not None and value_problem(self, self.default):
            raise ValueError(f"default {self.default} is not in [{self.low}, {self.high}] step {self.step}")
        return self


class FloatParam(StrictModel):
    name: str
    type: Literal["float"]
    low: float = Field(ge=-1e300, le=1e300)
    high: float = Field(ge=-1e300, le=1e300)
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


SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
NO_CONTROLS = "none"


class CompilerControlsParam(StrictModel):
    """An NVIDIA Advanced Controls File for a compiler release (docs/acf.md). Its value is
    the sha256 of the file's bytes, or "none" (no file: the baseline). Without `pack` or
    `choices`, CompileIQ's engine generates the files from the operator's search-space
    catalog (compiler, version, variant), and only `sampler: compileiq` searches it; with a
    pack, the pack's files are the choices (the service lists them when the study is made),
    which every sampler searches like a categorical."""

    name: str
    type: Literal["compiler_controls"]
    compiler: Literal["ptxas", "nvcc"] = "ptxas"
    version: str = Field(pattern=r"^\d+\.\d+$")  # the compiler release: "13.3"
    variant: str = Field(default="default", max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    pack: str | None = Field(default=None, max_length=100)
    choices: list[str] | None = Field(default=None, max_length=MAX_CHOICES)  # "none" and sha256s
    default: str = NO_CONTROLS
    search_space_sha256: str | None = Field(default=None, pattern=SHA256_RE.pattern)  # the engine's, when made

    @model_validator(mode="after")
    def _values(self) -> CompilerControlsParam:
        for value in [*(self.choices or []), self.default]:
            if value != NO_CONTROLS and not SHA256_RE.match(value):
                raise ValueError(f"{value!r} names no controls file: use \"none\" or a file's sha256 (64 hex digits)")
        if self.choices is not None and len(set(self.choices)) != len(self.choices):
            raise ValueError("choices must not repeat a file")
        if self.choices is not None and self.default not in self.choices:
            raise ValueError(f"default {self.default!r} is not one of the choices")
        return self

    @property
    def engine(self) -> bool:
        """Whether CompileIQ's engine generates its files (no pack, no choices)."""
        return self.pack is None and self.choices is None


Parameter = Annotated[IntParam | FloatParam | CategoricalParam | BoolParam | CompilerControlsParam,
                      Field(discriminator="type")]
_PARAMETERS = TypeAdapter(list[Parameter])


def _check_range(low: float, high: float, log: bool) -> None:
    if low > high:
        raise ValueError(f"low ({low}) must not be greater than high ({high})")
    if log and low <= 0:
        raise ValueError(f"low must be > 0 when log is true (got {low})")


def value_problem(param: Any, value: Any) -> str | None:
    """Why `value` is not a valid setting of `param`, or None."""
    if isinstance(param, CompilerControlsParam):
        if param.choices is not None:
            return None if value in param.choices else f"{value!r} is not one of the parameter's controls files"
        ok = value == NO_CONTROLS or isinstance(value, str) and SHA256_RE.match(value)
        return None if ok else f"{value!r} is not \"none\" or a controls file's sha256"
    if isinstance(param, BoolParam):
        return None if isinstance(value, bool) else f"{value!r} is not true or false"
    if isinstance(param, CategoricalParam):
        return None if value in param.choices else f"{value!r} is not one of {param.choices}"
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
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


def param_default(param: Any) -> Any:
    if isinstance(param, CompilerControlsParam):
        return param.default
    if param.default is not None or isinstance(param, CategoricalParam) and "default" in param.model_fields_set:
        return param.default
    return None


def _axis_size(param: Any) -> int | None:
    if isinstance(param, CompilerControlsParam):
        return None if param.choices is None else len(param.choices)
    if isinstance(param, BoolParam):
        return 2
    if isinstance(param, CategoricalParam):
        return len(param.choices)
    if isinstance(param, IntParam):
        return (param.high - param.low) // param.step + 1
    if param.step is None:
        return None
    return int(round((param.high - param.low) / param.step)) + 1


def _axis_value(param: Any, index: int) -> Any:
    if isinstance(param, BoolParam):
        return bool(index)
    if isinstance(param, CategoricalParam):
        return param.choices[index]
    if isinstance(param, CompilerControlsParam):
        assert param.choices is not None, "an engine's controls parameter has no grid"
        return param.choices[index]
    if isinstance(param, IntParam):
        return param.low + index * param.step
    return param.low + index * param.step


class SearchSpace:
    """An ordered list of parameters with unique names."""

    def __init__(self, parameters: list[Any]) -> None:
        self.parameters = list(parameters)
        self.by_name = {p.name: p for p in self.parameters}

    @classmethod
    def parse(cls, raw: Any) -> SearchSpace:
        """From the document's list of parameter dicts; raises pydantic's ValidationError."""
        return cls(_PARAMETERS.validate_python(raw))

    @classmethod
    def validate_parameters(cls, parameters: list[Any]) -> list[Any]:
        """The document-level rules over a parsed list (names well formed and unique)."""
        if not parameters:
            raise ValueError("space must hold at least one parameter (or be left out for a built-in)")
        names = [p.name for p in parameters]
        for name in names:
            if not NAME_RE.match(name):
                raise ValueError(f"parameter name {name!r} must match {NAME_RE.pattern}")
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"parameter names must be unique; repeated: {', '.join(duplicates)}")
        return parameters

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.parameters]

    def dump(self) -> list[dict[str, Any]]:
        return [p.model_dump(mode="json", exclude_unset=True) for p in self.parameters]

    # -- the grid --------------------------------------------------------------------------

    def grid_size(self) -> int | None:
        """Points of the full grid, computed arithmetically; None when a float has no step."""
        size = 1
        for param in self.parameters:
            axis = _axis_size(param)
            if axis is None:
                return None
            size *= axis
        return size

    def is_discrete(self) -> bool:
        return all(not isinstance(p, FloatParam) and _axis_size(p) is not None for p in self.parameters)

    @property
    def controls(self) -> list[CompilerControlsParam]:
        return [p for p in self.parameters if isinstance(p, CompilerControlsParam)]

    def axis_values(self, name: str) -> list[Any]:
        param = self.by_name[name]
        size = _axis_size(param)
        assert size is not None, f"{name} has no grid"
        return [_axis_value(param, i) for i in range(size)]

    def grid_point(self, index: int) -> dict[str, Any]:
        """The index-th point of the grid in mixed radix (the last parameter varies fastest)."""
        point: dict[str, Any] = {}
        for param in reversed(self.parameters):
            size = _axis_size(param)
            assert size is not None, "grid_point needs a finite grid"
            index, digit = divmod(index, size)
            point[param.name] = _axis_value(param, digit)
        return {name: point[name] for name in self.names}

    def grid_order(self, seed: int | None) -> GridOrder:
        size = self.grid_size()
        assert size is not None
        return GridOrder(size, seed)

    # -- values ------------------------------------------------------------------------------

    def value_problem(self, name: str, value: Any) -> str | None:
        param = self.by_name.get(name)
        if param is None:
            return f"{name!r} is not a parameter of the space"
        return value_problem(param, value)

    # -- Optuna ------------------------------------------------------------------------------

    def distributions(self) -> dict[str, BaseDistribution]:
        return self.sampler_view(ordered_choices=False).distributions

    def sampler_view(self, ordered_choices: bool) -> SamplerView:
        """What the sampler sees of this space. With `ordered_choices`, a categorical
        parameter whose choices are all numbers (BLOCK_M: [64, 128, 256]) is shown as the
        index of its value in ascending order, an IntDistribution, so that samplers that
        model or mutate numbers (TPE's Parzen estimators, NSGA-II's numeric crossover and
        mutation) use the order; other samplers see each choice as unrelated."""
        return SamplerView(self, ordered_choices)


def ordered_choices(param: Any) -> list[Any] | None:
    """A categorical parameter's choices in ascending order when there are two or more and
    every one is a number (not a bool) unequal to the others; else None."""
    if not isinstance(param, CategoricalParam) or len(param.choices) < 2:
        return None
    numbers = [c for c in param.choices if isinstance(c, int | float) and not isinstance(c, bool)]
    if len(numbers) != len(param.choices) or len({float(c) for c in numbers}) != len(numbers):
        return None  # not all numbers, or two equal as numbers (1 and 1.0)
    return sorted(numbers)


class SamplerView:
    """The space as Optuna's distributions, and the translation of a configuration (the
    choice values users and workers see) to the sampler's parameters and back. Only ordered
    categoricals are translated (value <-> index); every other value passes unchanged."""

    def __init__(self, space: SearchSpace, ordered: bool) -> None:
        self.distributions: dict[str, BaseDistribution] = {}
        self.orders: dict[str, list[Any]] = {}  # name -> choices in ascending order
        for p in space.parameters:
            order = ordered_choices(p) if ordered else None
            if order is not None:
                self.orders[p.name] = order
                self.distributions[p.name] = IntDistribution(0, len(order) - 1)
            elif isinstance(p, IntParam):
                self.distributions[p.name] = IntDistribution(p.low, p.high, log=p.log, step=p.step)
            elif isinstance(p, FloatParam):
                self.distributions[p.name] = FloatDistribution(p.low, p.high, log=p.log, step=p.step)
            elif isinstance(p, CategoricalParam):
                self.distributions[p.name] = CategoricalDistribution(tuple(p.choices))
            elif isinstance(p, CompilerControlsParam):
                # a pack's files; the engine's are CompileIQ's to search (service.scheduling.engine)
                self.distributions[p.name] = CategoricalDistribution(tuple(p.choices or (NO_CONTROLS,)))
            else:
                self.distributions[p.name] = CategoricalDistribution((False, True))
        # by numeric value: a configuration may hold 64.0 for the choice 64 (value_problem accepts it)
        self._index = {name: {float(v): i for i, v in enumerate(order)} for name, order in self.orders.items()}

    def to_sampler(self, config: dict[str, Any]) -> dict[str, Any]:
        """The sampler's parameters for a configuration of the space."""
        return {name: self._index[name][float(value)] if name in self.orders else value
                for name, value in config.items()}

    def from_sampler(self, params: dict[str, Any]) -> dict[str, Any]:
        """The configuration (the choice values themselves) for the sampler's parameters."""
        return {name: self.orders[name][int(value)] if name in self.orders else value
                for name, value in params.items()}


class GridOrder:
    """A seeded permutation of range(size) that is never materialised: i -> (a*i + b) mod size
    with a coprime to size. Replicas computing the same study agree on it."""

    def __init__(self, size: int, seed: int | None) -> None:
        self.size = size
        rng = random.Random(seed if seed is not None else 0)
        if size <= 1:
            self.a, self.b = 1, 0
            return
        while True:
            a = rng.randrange(1, size)
            if math.gcd(a, size) == 1:
                break
        self.a, self.b = a, rng.randrange(size)

    def __getitem__(self, position: int) -> int:
        if not 0 <= position < self.size:
            raise IndexError(position)
        return (self.a * position + self.b) % self.size

    def __iter__(self) -> Iterator[int]:
        return (self[i] for i in range(self.size))


__all__ = [
    "MAX_CHOICES", "MAX_GRID_POINTS", "MAX_PARAMETERS", "NAME_RE", "NO_CONTROLS", "BoolParam", "CategoricalParam",
    "CompilerControlsParam",
    "FloatParam", "GridOrder", "IntParam", "Parameter", "SearchSpace", "StrictModel", "ValidationError",
    "SamplerView", "ordered_choices", "param_default", "value_problem",
]

"""The parameters of a search space, typed: what a study document's `space` holds and what
the built-in kernels declare (wire.kernels). Each model validates its own range, choices and
default; `value_problem` says why a value is not a setting of a parameter. The service's
SearchSpace (service.studies.space) walks a list of them as a grid and gives Optuna its
distributions.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from wire.contract import NO_CONTROLS

NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,99}$")
MAX_CHOICES = 10_000
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
PARAMETERS: TypeAdapter[list[Parameter]] = TypeAdapter(list[Parameter])


def _check_range(low: float, high: float, log: bool) -> None:
    if low > high:
        raise ValueError(f"low ({low}) must not be greater than high ({high})")
    if log and low <= 0:
        raise ValueError(f"low must be > 0 when log is true (got {low})")


def value_problem(param: Parameter, value: Any) -> str | None:
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


def param_default(param: Parameter) -> Any:
    """The parameter's own default, or None where it gives none."""
    if isinstance(param, CompilerControlsParam):
        return param.default
    if param.default is not None or isinstance(param, CategoricalParam) and "default" in param.model_fields_set:
        return param.default
    return None


def check_names(parameters: Sequence[Parameter]) -> None:
    """Every parameter's name well formed and unique, or a ValueError saying which is not."""
    names = [p.name for p in parameters]
    for name in names:
        if not NAME_RE.match(name):
            raise ValueError(f"parameter name {name!r} must match {NAME_RE.pattern}")
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"parameter names must be unique; repeated: {', '.join(duplicates)}")

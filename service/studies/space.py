"""The search space: one model over the typed parameters (wire.space) that validates values,
counts and walks the grid without materialising it, and gives Optuna its distributions.

A study document holds the space as a list of parameters; `SearchSpace.parse` reads that
list and everything else asks the model.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence
from typing import Any

from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

from wire.contract import NO_CONTROLS
from wire.space import (
    PARAMETERS,
    BoolParam,
    CategoricalParam,
    CompilerControlsParam,
    FloatParam,
    IntParam,
    Parameter,
    check_names,
    value_problem,
)

MAX_PARAMETERS = 200
MAX_GRID_POINTS = 1_000_000  # the grid sampler refuses larger grids (see docs/api.md)


def _axis_size(param: Parameter) -> int | None:
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


def _axis_value(param: Parameter, index: int) -> Any:
    if isinstance(param, BoolParam):
        return bool(index)
    if isinstance(param, CategoricalParam):
        return param.choices[index]
    if isinstance(param, CompilerControlsParam):
        assert param.choices is not None, "an engine's controls parameter has no grid"
        return param.choices[index]
    assert param.step is not None, "a float parameter without a step has no grid"
    return param.low + index * param.step


class SearchSpace:
    """An ordered list of parameters with unique names."""

    def __init__(self, parameters: Sequence[Parameter]) -> None:
        self.parameters: list[Parameter] = list(parameters)
        self.by_name = {p.name: p for p in self.parameters}

    @classmethod
    def parse(cls, raw: Any) -> SearchSpace:
        """From a list of parameter dicts; raises pydantic's ValidationError."""
        return cls(PARAMETERS.validate_python(raw))

    @classmethod
    def validate_parameters(cls, parameters: list[Parameter]) -> list[Parameter]:
        """The document-level rules over a parsed list (at least one; names well formed and unique)."""
        if not parameters:
            raise ValueError("space must hold at least one parameter (or be left out for a built-in)")
        check_names(parameters)
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


def ordered_choices(param: Parameter) -> list[Any] | None:
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


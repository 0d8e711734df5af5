"""What the sampler sees of a search space: numeric choices as ordered indexes when asked,
each choice value recovered exactly (value and type), everything else unchanged."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from service.studies.space import SearchSpace
from wire.kernels import all_builtins

MIXED = SearchSpace.parse([
    {"name": "BLOCK", "type": "categorical", "choices": [256, 32, 128, 64]},
    {"name": "scale", "type": "categorical", "choices": [0.5, 2, 0.25]},
    {"name": "opt", "type": "categorical", "choices": ["-O2", "-O3"]},
    {"name": "mixed", "type": "categorical", "choices": [1, "a"]},
    {"name": "flag", "type": "categorical", "choices": [True, False]},
    {"name": "one", "type": "categorical", "choices": [7]},
    {"name": "same", "type": "categorical", "choices": [1, 1.0]},
    {"name": "n", "type": "int", "low": 1, "high": 9, "step": 2},
    {"name": "x", "type": "float", "low": 0.1, "high": 1.0, "log": True},
    {"name": "unroll", "type": "bool"},
])


def test_numeric_choices_become_indexes_in_ascending_order() -> None:
    view = MIXED.sampler_view(ordered_choices=True)
    assert view.distributions["BLOCK"] == IntDistribution(0, 3)
    assert view.distributions["scale"] == IntDistribution(0, 2)
    assert view.to_sampler({"BLOCK": 32, "scale": 2}) == {"BLOCK": 0, "scale": 2}
    assert view.to_sampler({"BLOCK": 256, "scale": 0.25}) == {"BLOCK": 3, "scale": 0}
    # strings, mixed kinds, bools, a single choice and choices equal as numbers stay categorical
    for name in ("opt", "mixed", "flag", "one", "same"):
        assert isinstance(view.distributions[name], CategoricalDistribution), name
    plain = MIXED.distributions()
    for name in ("opt", "mixed", "flag", "one", "same", "n", "x", "unroll"):
        assert view.distributions[name] == plain[name], name


def test_without_ordered_choices_the_sampler_sees_what_it_always_saw() -> None:
    view = MIXED.sampler_view(ordered_choices=False)
    assert view.distributions["BLOCK"] == CategoricalDistribution((256, 32, 128, 64))
    assert view.distributions["n"] == IntDistribution(1, 9, step=2)
    assert view.distributions["x"] == FloatDistribution(0.1, 1.0, log=True)
    config = {"BLOCK": 64, "scale": 0.5, "opt": "-O3", "n": 3, "x": 0.2, "unroll": True}
    assert view.to_sampler(config) == config and view.from_sampler(config) == config


def _exact(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _round_trips_every_choice(space: SearchSpace) -> None:
    view = space.sampler_view(ordered_choices=True)
    for param in space.parameters:
        for value in space.axis_values(param.name) if param.type != "float" else []:
            params = view.to_sampler({param.name: value})
            assert view.distributions[param.name]._contains(view.distributions[param.name].to_internal_repr(
                params[param.name]))
            back = view.from_sampler(params)[param.name]
            assert _exact(back, value), (param.name, value, back)


def test_every_choice_of_every_builtin_space_round_trips_exactly() -> None:
    ordered = 0
    for kernel in all_builtins():
        space = SearchSpace(kernel.space)
        _round_trips_every_choice(space)
        ordered += len(space.sampler_view(ordered_choices=True).orders)
    names = {k.name for k in all_builtins()}
    assert {"gemm_bf16", "attention_fwd", "rmsnorm"} <= names
    assert ordered >= 14  # GEMM 5, attention 4, RMSNorm 5 numeric categoricals, and the CPU kernels'


numbers = st.one_of(st.integers(-(2**40), 2**40), st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False))


@given(st.lists(numbers, min_size=2, max_size=12, unique_by=float))
def test_any_numeric_choices_round_trip_and_keep_their_order(choices: list[int | float]) -> None:
    space = SearchSpace.parse([{"name": "p", "type": "categorical", "choices": choices}])
    view = space.sampler_view(ordered_choices=True)
    assert view.distributions["p"] == IntDistribution(0, len(choices) - 1)
    indexes = [view.to_sampler({"p": c})["p"] for c in choices]
    assert sorted(indexes) == list(range(len(choices)))
    for c, i in zip(choices, indexes, strict=True):
        assert _exact(view.from_sampler({"p": i})["p"], c)
        assert all((c < d) == (i < j) for d, j in zip(choices, indexes, strict=True))

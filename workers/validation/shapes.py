"""The shapes a validation checks correctness on: the workload's own, and shapes around them.

A configuration tuned on one shape may be wrong on another (a tile remainder it never
handled, an unrolled loop that assumes an even size). For every workload shape the set holds:
  the shape itself;
  half:    every varied dim halved;
  ragged:  every varied dim moved down to an odd size, each dim to a different one (256 ->
           255, 253, 251 for m, n, k), so that no dim is a multiple of a tile and a swapped
           pair of dims shows;
  double:  the first varied dim doubled;
bounded: a shape whose dims multiply to more than twice the largest workload shape's is left
out, and so are duplicates.

Which dims vary, and how, is the kernel's declaration (`shape_rules` of a built-in kernel, or
`options.shape_rules` of a study's kernel): per dim "free" (the default), "fixed" (a flag or a
size the kernel needs exactly, e.g. head_dim), "power_of_2", or "multiple_of:N" (a vector
width). `options.validation_shapes` (a list of dims) adds shapes of the kernel's own choice.
For the cpu backend, a problem's short dims are completed first (matmul's n = m = n = k).
"""

from __future__ import annotations

import math
from typing import Any

from wire.contract import KernelSpec, WorkloadShape
from wire.kernels import get_builtin

GROWTH_LIMIT = 2.0  # a derived shape may be at most this much bigger than the largest workload shape


class ShapeRuleError(ValueError):
    """A shape rule that is not one of free, fixed, power_of_2, multiple_of:N."""


def _step(rule: str) -> int | None:
    """The multiple a dim must keep (1 for free dims), None for dims that only double or halve."""
    if rule == "free":
        return 1
    if rule == "power_of_2":
        return None
    kind, _, value = rule.partition(":")
    if kind == "multiple_of" and value.isdigit() and int(value) > 0:
        return int(value)
    raise ShapeRuleError(f"unknown shape rule {rule!r}; use free, fixed, power_of_2 or multiple_of:N")


def half(value: int, rule: str) -> int:
    step = _step(rule)
    if step is None:
        return max(1, value // 2)
    return max(step, (value // 2) // step * step)


def ragged(value: int, rule: str, index: int) -> int:
    """An odd size (in units of the rule's multiple) below `value`, the index-th one down."""
    step = _step(rule)
    if step is None:
        return value
    units = value // step
    odd = (units - 1 if units % 2 == 0 else units - 2) - 2 * index
    return max(1, odd) * step


def double(value: int, rule: str) -> int:
    _step(rule)
    return 2 * value


def _size(dims: dict[str, int]) -> int:
    return math.prod(max(1, v) for v in dims.values())


def around(dims: dict[str, int], rules: dict[str, str]) -> list[dict[str, int]]:
    """The shape, its half, its ragged and its doubled neighbour (unbounded, may repeat)."""
    varied = [name for name in dims if rules.get(name, "free") != "fixed"]
    if not varied:
        return [dict(dims)]

    def rule(name: str) -> str:
        return rules.get(name, "free")

    halved = {**dims, **{n: half(dims[n], rule(n)) for n in varied}}
    odd = {**dims, **{n: ragged(dims[n], rule(n), i) for i, n in enumerate(varied)}}
    doubled = {**dims, varied[0]: double(dims[varied[0]], rule(varied[0]))}
    return [dict(dims), halved, odd, doubled]


def _workload_and_rules(kernel: KernelSpec) -> tuple[list[dict[str, int]], dict[str, str]]:
    rules: dict[str, str] = {}
    workload = [dict(w.dims) for w in kernel.workload]
    options = dict(kernel.options)
    if kernel.builtin:
        builtin = get_builtin(kernel.backend, kernel.builtin)
        if builtin is not None:
            rules.update(builtin.shape_rules)
            options = {**builtin.options, **options}
            workload = workload or [dict(w["dims"]) for w in builtin.workload]
    rules.update(options.get("shape_rules") or {})
    if kernel.backend == "cpu":
        workload = _complete_cpu(workload, options, kernel)
    return workload, rules


def _complete_cpu(workload: list[dict[str, int]], options: dict[str, Any], kernel: KernelSpec) -> list[dict[str, int]]:
    from workers.backends.cpu_problems import get_problem

    name = options.get("problem") or kernel.entry
    try:
        problem = get_problem(str(name))
        return [problem.shape(dims) for dims in workload]
    except (KeyError, ValueError):
        return workload  # the trial already failed on this; nothing to complete


def extended_shapes(kernel: KernelSpec) -> list[WorkloadShape]:
    """The correctness shapes of a validation of `kernel` (workload shapes first)."""
    workload, rules = _workload_and_rules(kernel)
    for rule in rules.values():
        if rule != "fixed":
            _step(rule)
    limit = GROWTH_LIMIT * max((_size(d) for d in workload), default=1)
    shapes: list[dict[str, int]] = []
    for dims in workload:
        for candidate in around(dims, rules):
            if candidate not in shapes and (dims == candidate or _size(candidate) <= limit):
                shapes.append(candidate)
    for dims in kernel.options.get("validation_shapes") or []:
        if dict(dims) not in shapes:
            shapes.append(dict(dims))
    return [WorkloadShape(dims=dims) for dims in shapes]

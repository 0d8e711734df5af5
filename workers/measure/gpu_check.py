"""Correctness of a GPU kernel: fresh random inputs, a poisoned output, a higher-precision
reference, and a tolerance set by the output's dtype.

The error measure is the relative L2 norm ||out - ref|| / ||ref||; any NaN in the output
fails (the output is filled with NaN before the call, so an element the kernel never wrote
stays NaN). The thresholds follow what correct kernels reach: float32 far under 1e-4, tf32
and the matrix units' float32 mode near 3e-4, 16-bit operands with float32 accumulation
between 1e-3 and 1e-2. A wrong result makes the trial infeasible whatever its speed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

TOLERANCE_BY_DTYPE: dict[str, float] = {
    "float64": 1e-10,
    "float32": 1e-4,
    "tf32": 2e-3,
    "float16": 5e-3,
    "bfloat16": 2e-2,
    "float8": 1e-1,
}


def tolerance_for(dtype: str, override: float | None = None) -> float:
    if override is not None:
        return float(override)
    name = dtype.removeprefix("torch.")
    for prefix, tolerance in TOLERANCE_BY_DTYPE.items():
        if name.startswith(prefix):
            return tolerance
    raise ValueError(f"no tolerance known for dtype {dtype!r}; set options.tolerance")


@dataclass(frozen=True)
class ShapeCheck:
    key: str
    rel_l2_err: float
    max_abs_err: float
    nan_count: int
    unwritten: int  # elements still holding the poison value

    def passed(self, tolerance: float) -> bool:
        return (
            self.nan_count == 0
            and self.unwritten == 0
            and math.isfinite(self.rel_l2_err)
            and self.rel_l2_err <= tolerance
        )


def verdict(
    checks: Sequence[ShapeCheck], tolerance: float, seed: int
) -> tuple[bool, dict[str, Any]]:
    """Pass only if every shape passes; the details say which failed and by how much."""
    passed = all(c.passed(tolerance) for c in checks)
    details: dict[str, Any] = {
        "tolerance": tolerance,
        "metric": "rel_l2",
        "seed": seed,
        "max_rel_l2_err": max((c.rel_l2_err for c in checks), default=0.0),
        "shapes": {
            c.key: {
                "rel_l2_err": c.rel_l2_err,
                "max_abs_err": c.max_abs_err,
                "nan_count": c.nan_count,
                "unwritten": c.unwritten,
                "passed": c.passed(tolerance),
            }
            for c in checks
        },
    }
    return passed, details


def compare(key: str, out: Any, ref: Any) -> ShapeCheck:
    """Compare a kernel's output tensor with the reference (torch tensors, any device)."""
    import torch

    out64 = out.detach().to(torch.float64)
    ref64 = ref.detach().to(torch.float64)
    nan_count = int(torch.isnan(out64).sum().item())
    finite = torch.nan_to_num(out64, nan=0.0, posinf=0.0, neginf=0.0)
    diff = finite - ref64
    ref_norm = float(torch.linalg.vector_norm(ref64).item())
    err_norm = float(torch.linalg.vector_norm(diff).item())
    rel = err_norm / ref_norm if ref_norm > 0 else err_norm
    if nan_count:
        rel = math.inf
    return ShapeCheck(
        key=key,
        rel_l2_err=rel,
        max_abs_err=float(diff.abs().max().item()) if diff.numel() else 0.0,
        nan_count=nan_count,
        unwritten=nan_count,
    )


def poison(tensor: Any) -> None:
    """Fill an output with NaN so that any element the kernel skips is caught."""
    if tensor.is_floating_point():
        tensor.fill_(float("nan"))
    else:
        tensor.fill_(-1)


def new_seed() -> int:
    """Fresh inputs for every check: a configuration must be right on any valid input."""
    import os

    return int.from_bytes(os.urandom(4), "little")


def check_once(
    key: str,
    make_inputs: Callable[[], Any],
    output: Callable[[Any], Any],
    run: Callable[[Any], None],
    reference: Callable[[Any], Any],
) -> ShapeCheck:
    import torch

    inputs = make_inputs()
    out = output(inputs)
    poison(out)
    torch.cuda.synchronize()
    run(inputs)
    torch.cuda.synchronize()
    ref = reference(inputs)
    return compare(key, out, ref)

"""Problems the cpu backend knows how to call, check and time.

A C kernel, built-in or user-written, implements one problem's calling convention (ABI);
the problem makes fresh random inputs for a workload shape, calls the kernel through ctypes
and computes the reference result in float64 with numpy.

Every buffer a kernel sees starts on a 64-byte boundary (`ALIGNMENT`). numpy aligns to 16
bytes only, and a vectorised kernel runs at one speed or another, up to 2.6 times as slow, as its
buffers happen to fall: fresh inputs for each measurement would make that a measurement's
noise.
"""

from __future__ import annotations

import ctypes
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Case:
    """One shape's buffers, ready to call the kernel on again and again."""

    dims: dict[str, int]
    call: Callable[[], None]  # runs the kernel once on the buffers
    output: np.ndarray
    reference: Callable[[], np.ndarray]  # float64 expected output
    flops: float
    buffers: tuple[np.ndarray, ...]  # every array the kernel sees: kept alive with the case

    @property
    def nbytes(self) -> int:
        """Bytes of input and output touched by one call."""
        return sum(buffer.nbytes for buffer in self.buffers)


class Problem(ABC):
    name: str
    abi: str  # the C prototype a kernel must have, shown in error messages
    tolerance: float  # allowed max |out - ref| / max(|ref|, 1) for float32 outputs

    @abstractmethod
    def shape(self, dims: dict[str, int]) -> dict[str, int]:
        """Complete a workload shape's dims with defaults; raise ValueError if unusable."""

    @abstractmethod
    def edge_shapes(self) -> list[dict[str, int]]:
        """Small ragged shapes checked in addition to the workload (tile remainders)."""

    @abstractmethod
    def case(self, fn: Any, dims: dict[str, int], rng: np.random.Generator) -> Case:
        """Fresh random inputs for `dims` bound to the kernel function `fn`."""


ALIGNMENT = 64  # bytes: a cache line, and every SIMD load width up to AVX-512


def aligned(array: np.ndarray, offset: int = 0) -> np.ndarray:
    """A C-contiguous copy of `array` that starts on an ALIGNMENT boundary (`offset` bytes past
    one: bench/cpu_alignment.py measures what that costs)."""
    raw = np.empty(array.nbytes + ALIGNMENT + offset, dtype=np.uint8)
    start = -raw.ctypes.data % ALIGNMENT + offset
    out = raw[start : start + array.nbytes].view(array.dtype).reshape(array.shape)
    out[...] = array
    return out


def bind(fn: Any, *args: int | float | np.ndarray) -> Callable[[], None]:
    """`fn` called on `args` as its C prototype takes them: ints as int, floats as float and
    arrays as pointers to their data (the arrays must outlive the call: Case.buffers)."""

    def c_type(arg: int | float | np.ndarray) -> type:
        if isinstance(arg, np.ndarray):
            return ctypes.c_void_p
        return ctypes.c_int if isinstance(arg, int | np.integer) else ctypes.c_float

    fn.argtypes = [c_type(a) for a in args]
    fn.restype = None
    values = tuple(ctypes.c_void_p(a.ctypes.data) if isinstance(a, np.ndarray) else a for a in args)

    def call() -> None:
        fn(*values)

    return call


class Matmul(Problem):
    name = "matmul"
    abi = "void f(int M, int N, int K, const float *A, const float *B, float *C)"
    tolerance = 1e-4

    def shape(self, dims: dict[str, int]) -> dict[str, int]:
        n = dims.get("n")
        m, cols, k = dims.get("m", n), dims.get("n", n), dims.get("k", n)
        if not all(isinstance(v, int) and v > 0 for v in (m, cols, k)):
            raise ValueError(f"matmul needs positive dims n (or m, n, k), got {dims}")
        return {"m": m, "n": cols, "k": k}  # type: ignore[dict-item]

    def edge_shapes(self) -> list[dict[str, int]]:
        return [{"m": 37, "n": 53, "k": 29}]

    def case(self, fn: Any, dims: dict[str, int], rng: np.random.Generator) -> Case:
        m, n, k = dims["m"], dims["n"], dims["k"]
        a = aligned(rng.uniform(-1, 1, (m, k)).astype(np.float32))
        b = aligned(rng.uniform(-1, 1, (k, n)).astype(np.float32))
        c = aligned(np.full((m, n), np.nan, dtype=np.float32))
        return Case(
            dims=dims,
            call=bind(fn, m, n, k, a, b, c),
            output=c,
            reference=lambda: a.astype(np.float64) @ b.astype(np.float64),
            flops=2.0 * m * n * k,
            buffers=(a, b, c),
        )


def stencil_reference(grid: np.ndarray, steps: int) -> np.ndarray:
    cur = grid.astype(np.float64)
    for _ in range(steps):
        nxt = cur.copy()
        nxt[1:-1, 1:-1] = 0.5 * cur[1:-1, 1:-1] + 0.125 * (
            cur[:-2, 1:-1] + cur[2:, 1:-1] + cur[1:-1, :-2] + cur[1:-1, 2:]
        )
        cur = nxt
    return cur


class Stencil(Problem):
    name = "stencil"
    abi = "void f(int N, int M, int steps, const float *in, float *out, float *scratch)"
    tolerance = 1e-5

    def shape(self, dims: dict[str, int]) -> dict[str, int]:
        n = dims.get("n")
        m, steps = dims.get("m", n), dims.get("steps", 1)
        if not all(isinstance(v, int) and v > 0 for v in (n, m, steps)):
            raise ValueError(f"stencil needs positive dims n (and optionally m, steps), got {dims}")
        return {"n": n, "m": m, "steps": steps}  # type: ignore[dict-item]

    def edge_shapes(self) -> list[dict[str, int]]:
        return [{"n": 37, "m": 53, "steps": 3}]

    def case(self, fn: Any, dims: dict[str, int], rng: np.random.Generator) -> Case:
        n, m, steps = dims["n"], dims["m"], dims["steps"]
        grid = aligned(rng.uniform(-1, 1, (n, m)).astype(np.float32))
        out = aligned(np.full((n, m), np.nan, dtype=np.float32))
        scratch = aligned(np.zeros((n, m), dtype=np.float32))
        return Case(
            dims=dims,
            call=bind(fn, n, m, steps, grid, out, scratch),
            output=out,
            reference=lambda: stencil_reference(grid, steps),
            flops=6.0 * max(n - 2, 0) * max(m - 2, 0) * steps,
            buffers=(grid, out, scratch),  # ctypes holds raw pointers: without this, freed memory
        )


def _rows_cols(name: str, dims: dict[str, int]) -> dict[str, int]:
    rows, cols = dims.get("rows"), dims.get("cols")
    if not all(isinstance(v, int) and v > 0 for v in (rows, cols)):
        raise ValueError(f"{name} needs positive dims rows and cols, got {dims}")
    return {"rows": rows, "cols": cols}  # type: ignore[dict-item]


class RmsNorm(Problem):
    """y = x / sqrt(mean(x^2) + eps) * w over each row (a layer's RMSNorm forward)."""

    name = "rmsnorm"
    abi = "void f(int rows, int cols, const float *x, const float *w, float *y, float eps)"
    tolerance = 1e-5
    eps = 1e-6

    def shape(self, dims: dict[str, int]) -> dict[str, int]:
        return _rows_cols(self.name, dims)

    def edge_shapes(self) -> list[dict[str, int]]:
        return [{"rows": 3, "cols": 37}]

    def case(self, fn: Any, dims: dict[str, int], rng: np.random.Generator) -> Case:
        rows, cols = dims["rows"], dims["cols"]
        x = aligned(rng.uniform(-1, 1, (rows, cols)).astype(np.float32))
        w = aligned(rng.uniform(0.5, 1.5, cols).astype(np.float32))
        y = aligned(np.full((rows, cols), np.nan, dtype=np.float32))

        def reference() -> np.ndarray:
            x64 = x.astype(np.float64)
            return x64 / np.sqrt(np.mean(x64 * x64, axis=1, keepdims=True) + self.eps) * w.astype(np.float64)

        return Case(dims=dims, call=bind(fn, rows, cols, x, w, y, self.eps), output=y, reference=reference,
                    flops=4.0 * rows * cols, buffers=(x, w, y))


class SwiGlu(Problem):
    """c = silu(a) * b elementwise over rows x cols (the MLP's gate, Liger's swiglu forward)."""

    name = "swiglu"
    abi = "void f(int rows, int cols, const float *a, const float *b, float *c)"
    tolerance = 1e-5

    def shape(self, dims: dict[str, int]) -> dict[str, int]:
        return _rows_cols(self.name, dims)

    def edge_shapes(self) -> list[dict[str, int]]:
        return [{"rows": 3, "cols": 37}]

    def case(self, fn: Any, dims: dict[str, int], rng: np.random.Generator) -> Case:
        rows, cols = dims["rows"], dims["cols"]
        a = aligned(rng.uniform(-4, 4, (rows, cols)).astype(np.float32))
        b = aligned(rng.uniform(-1, 1, (rows, cols)).astype(np.float32))
        c = aligned(np.full((rows, cols), np.nan, dtype=np.float32))

        def reference() -> np.ndarray:
            a64 = a.astype(np.float64)
            return a64 / (1.0 + np.exp(-a64)) * b.astype(np.float64)

        return Case(dims=dims, call=bind(fn, rows, cols, a, b, c), output=c, reference=reference,
                    flops=5.0 * rows * cols, buffers=(a, b, c))


PROBLEMS: dict[str, Problem] = {p.name: p for p in (Matmul(), Stencil(), RmsNorm(), SwiGlu())}


def get_problem(name: str) -> Problem:
    try:
        return PROBLEMS[name]
    except KeyError:
        raise KeyError(f"unknown cpu problem {name!r}; known: {', '.join(sorted(PROBLEMS))}") from None

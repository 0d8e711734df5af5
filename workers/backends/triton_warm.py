"""What a warm Triton runner pays once, paid in its warm-up before a trial comes: Triton's first
compile, its C glue kept across jobs, and the first kernel inputs made on PyTorch's meta device.

Triton builds C extension modules with the host's C compiler: `cuda_utils` once per process
and a `__triton_launcher` for every kernel it loads, each cached in TRITON_CACHE_DIR under a
hash of its generated source. A job's TRITON_CACHE_DIR is its own (workers.sandbox.jobs), so a
warm runner built the same launcher again for every trial. `GlueCache`, the cache manager a
warm Triton runner names in TRITON_CACHE_MANAGER, keeps kernel binaries in the job's cache as
before and also keeps the glue modules in a directory of the runner's own; a job that asks for
one gets a copy in its cache, so its build still carries the launcher to the run phase.

To compile a kernel the backend makes its inputs on the meta device (their dtypes, no memory).
PyTorch's first meta tensors in a process take seconds (3.9-5.6 s for the GEMM's on an H100,
bench/results/gpu_screening_compare.md): the runner makes each Triton built-in's inputs once.

This module imports Triton: only a Triton runner's warm-up imports it, and Triton itself
through TRITON_CACHE_MANAGER.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import triton
import triton.language as tl
from triton.runtime.cache import FileCacheManager

MANAGER = f"{__name__}:GlueCache"
STORE_ENV = "PARETUNE_TRITON_GLUE"  # the runner's directory of glue modules
GLUE_MODULES = ("cuda_utils", "__triton_launcher")


def _is_glue(filename: str) -> bool:
    return filename.startswith(GLUE_MODULES) and filename.endswith(".so")


class GlueCache(FileCacheManager):
    """Triton's file cache, with its C glue modules also kept in the runner's store."""

    def __init__(self, key: str, override: bool = False, dump: bool = False) -> None:
        super().__init__(key, override=override, dump=dump)
        store = os.environ.get(STORE_ENV)
        self.store = Path(store) / key if store and not (override or dump) else None

    def get_file(self, filename: str) -> str | None:
        found = super().get_file(filename)
        if found is not None or self.store is None or not _is_glue(filename):
            return found
        kept = self.store / filename
        if not kept.is_file():
            return None
        return self.put(kept.read_bytes(), filename, binary=True)

    def put(self, data: Any, filename: str, binary: bool = True) -> str:
        path = super().put(data, filename, binary=binary)
        if self.store is not None and _is_glue(filename) and not (self.store / filename).is_file():
            with contextlib.suppress(OSError):  # a store that cannot take it only costs a rebuild
                self.store.mkdir(parents=True, exist_ok=True)
                partial = self.store / f"{filename}.{os.getpid()}.tmp"
                partial.write_bytes(Path(path).read_bytes())
                os.replace(partial, self.store / filename)
        return path


@triton.jit
def _double(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2, mask=mask)


def keep_glue() -> bool:
    """From now on, this process keeps Triton's glue modules for every later job, unless the
    host names a cache manager of its own; returns whether it does."""
    if os.environ.get("TRITON_CACHE_MANAGER"):
        return False
    os.environ[STORE_ENV] = tempfile.mkdtemp(prefix="triton-glue-")
    os.environ["TRITON_CACHE_MANAGER"] = MANAGER
    return True


def warm() -> None:
    """A warm runner's Triton warm-up: keep the glue, the first compile, then the built-ins'
    inputs on the meta device. If the compile fails, the runner goes on without the glue
    store (each job builds its own glue, as Triton does) and the error is raised for the
    warm-up to report."""
    kept = keep_glue()
    try:
        first_compile()
    except BaseException:
        if kept:
            os.environ.pop("TRITON_CACHE_MANAGER", None)
            os.environ.pop(STORE_ENV, None)
        raise
    meta_inputs()


def meta_inputs() -> list[str]:
    """Make each Triton built-in's inputs on the meta device, as the backend does to compile
    one (workers.backends.triton_backend), at the first shape of its workload. The modules
    are imported from a scratch directory and forgotten after. Returns the built-ins' names."""
    from wire.contract import KernelSpec
    from wire.kernels import all_builtins
    from workers.backends.gpu_loader import load_module, resolve

    made = []
    with tempfile.TemporaryDirectory(prefix="triton-inputs-") as scratch:
        for builtin in all_builtins():
            if builtin.backend != "triton":
                continue
            kernel = resolve(KernelSpec(backend="triton", builtin=builtin.name), {}, "triton")
            module = load_module(kernel.source, Path(scratch), "warm")
            try:
                if kernel.workload and hasattr(module, "make_inputs"):
                    module.make_inputs(kernel.workload[0].dims, "meta")
                    made.append(builtin.name)
            finally:
                sys.modules.pop(module.__name__, None)
    return made


def first_compile() -> None:
    """Compile, load and launch a small kernel in a scratch cache: what a process pays at its
    first Triton compile (the compiler's start, the host compiler building `cuda_utils` and a
    launcher, ptxas's first run)."""
    import torch

    before = os.environ.get("TRITON_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="triton-warm-") as scratch:
        os.environ["TRITON_CACHE_DIR"] = scratch
        try:
            x = torch.ones(256, device="cuda")
            _double[(2,)](x, 256, BLOCK=128)
            torch.cuda.synchronize()
            if float(x.sum().item()) != 512.0:
                raise RuntimeError("the warm-up kernel computed a wrong result")
        finally:
            if before is None:
                os.environ.pop("TRITON_CACHE_DIR", None)
            else:
                os.environ["TRITON_CACHE_DIR"] = before

"""What a GPU backend needs to know about a kernel, whether built-in or sent as source.

A GPU kernel comes with a *harness*: plain Python that makes inputs for a workload shape,
computes the reference, names the output and lays out the launch. For Triton the harness
lives in the same module as the `@triton.jit` kernel; for CUDA C++ it is a Python module
named by `options.harness` (a built-in's, such as `wire.kernels.gpu.rmsnorm`) or sent as
text in `options.harness_source`; so is the harness of a Triton kernel given by module
(`package.path:function`, an installed package's JIT function: wire.modules), whose launch
grid is the harness's `grid`.

Triton harness (module-level names): `DTYPE`, `make_inputs(dims, device, generator)`,
`arguments(inputs, dims)` (the runtime arguments, in order), `grid(dims, meta)`,
`output(inputs)`, `reference(inputs, dims)` and optionally `work(dims)` (flops, bytes).
CUDA harness: the same, except `arguments(inputs, dims, config)`, `launch_geometry(dims,
config)` -> (grid, block, shared_bytes) instead of `grid`, and `macros(dims, config)` ->
the compile-time macros a shape needs (tunable macros come from the configuration).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from wire.contract import DeviceLimits, FailureReason, KernelSpec, WorkloadShape
from wire.failures import TrialFailure
from wire.kernels.resources import ResourceUse, describe, violations
from wire.modules import module_target

LEGACY_KERNELS = "workers.kernels."


@dataclass
class GpuKernel:
    backend: str
    name: str
    source: str
    entry: str
    options: dict[str, Any] = field(default_factory=dict)
    workload: list[WorkloadShape] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def source_hash(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()


def resolve(kernel: KernelSpec, config: dict[str, Any], backend: str) -> GpuKernel:
    """Merge a spec with its built-in (source, options, workload, default configuration)."""
    if kernel.builtin:
        from wire.kernels import get_builtin

        builtin = get_builtin(backend, kernel.builtin)
        if builtin is None:
            raise TrialFailure(
                FailureReason.UNSUPPORTED, f"no built-in {backend} kernel named {kernel.builtin!r}"
            )
        source = kernel.source or builtin.read_source()
        entry = kernel.entry or builtin.entry or ""
        options = {**builtin.options, **kernel.options}
        workload = kernel.workload or [WorkloadShape(**w) for w in builtin.workload]
        merged = {**builtin.default_config, **config}
        name = builtin.name
    else:
        target = module_target(kernel)
        if target is None and (not kernel.source or not kernel.entry):
            raise TrialFailure(
                FailureReason.ERROR, "a kernel without `builtin` needs `source` and `entry`, or `module`"
            )
        source = module_harness(kernel) if target is not None else str(kernel.source)
        entry, options = str(kernel.entry), dict(kernel.options)
        workload, merged, name = list(kernel.workload), dict(config), target or "custom"
    if not workload:
        raise TrialFailure(
            FailureReason.ERROR, "the kernel names no workload shapes; add kernel.workload"
        )
    return GpuKernel(
        backend=backend,
        name=name,
        source=source,
        entry=entry,
        options=options,
        workload=workload,
        config=merged,
    )


def module_harness(kernel: KernelSpec) -> str:
    """The harness of a kernel given by module (the JIT function is the package's): its text,
    options.harness_source, or the source of the module options.harness names."""
    text = kernel.options.get("harness_source")
    if text:
        return str(text)
    name = kernel.options.get("harness")
    spec = importlib.util.find_spec(harness_module(str(name))) if name else None
    if spec is None or not spec.origin:
        raise TrialFailure(
            FailureReason.ERROR,
            f"a kernel given by module ({kernel.entry}) needs its harness: options.harness_source (make_inputs, "
            "arguments, grid, output, reference, DTYPE) or options.harness (an importable module)"
            + (f"; no module {name!r} here" if name else ""),
        )
    return Path(spec.origin).read_text()


def shape_key(dims: dict[str, int]) -> str:
    return "_".join(f"{k}{v}" for k, v in dims.items())


def _source_file(source: str, directory: Path, filename: str) -> Path:
    """`directory`/`filename` holding `source`: the file there if it already does, else
    written there; where `directory` cannot be written (a build directory the compile
    sandbox's user made, read by the run sandbox's), a private directory of this process."""
    path = directory / filename
    with contextlib.suppress(OSError, UnicodeDecodeError):
        if path.read_text() == source:
            return path
    try:
        directory.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
        return path
    except OSError:
        private = Path(tempfile.mkdtemp(prefix="paretune-src-")) / filename
        private.write_text(source)
        return private


def load_module(source: str, directory: Path, stem: str) -> ModuleType:
    """Import Python source from a file in `directory` (Triton reads kernels' source files)."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    name = f"paretune_{stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    path = _source_file(source, directory, f"{name}.py")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise TrialFailure(FailureReason.ERROR, f"cannot import kernel source from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise TrialFailure(
            FailureReason.COMPILE_ERROR,
            f"kernel source does not import: {type(exc).__name__}: {exc}",
        ) from exc
    return module


def load_harness(kernel: GpuKernel, directory: Path) -> ModuleType:
    """The Python harness of a CUDA C++ kernel."""
    text = kernel.options.get("harness_source")
    if text:
        return load_module(text, directory, "harness")
    name = kernel.options.get("harness")
    if not name:
        raise TrialFailure(
            FailureReason.ERROR,
            "a CUDA kernel needs options.harness (module) or options.harness_source",
        )
    name = harness_module(name)
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise TrialFailure(FailureReason.ERROR, f"cannot import harness {name!r}: {exc}") from exc


def harness_module(name: str) -> str:
    """The module of a harness name; names from before the catalog moved to `wire.kernels`
    (kept in older studies and artifacts) still resolve."""
    if name.startswith(LEGACY_KERNELS):
        return "wire.kernels." + name[len(LEGACY_KERNELS):]
    return name


def require(module: ModuleType, names: tuple[str, ...]) -> None:
    missing = [n for n in names if not hasattr(module, n)]
    if missing:
        raise TrialFailure(
            FailureReason.ERROR,
            f"the kernel harness lacks {', '.join(missing)} (see docs/measurement.md)",
        )


def refuse_unlaunchable(kernel: KernelSpec, resolved: GpuKernel, limits: DeviceLimits | None) -> None:
    """Fail a built-in's configuration that its resource model puts over this device's
    limits, before anything is compiled (wire.kernels.resources). `options.resource_model:
    false` leaves it to the compiler (a sweep that checks the model does)."""
    if not kernel.builtin or limits is None or resolved.options.get("resource_model") is False:
        return
    from wire.kernels import resource_violations

    shapes = [w.dims for w in resolved.workload]
    found = resource_violations(resolved.backend, kernel.builtin, resolved.config, shapes, limits)
    if found:
        raise TrialFailure(FailureReason.INFEASIBLE, describe(found, limits) + " (refused before compiling)")


def refuse_compiled(use: ResourceUse, limits: DeviceLimits | None, what: str) -> None:
    """Fail a compiled kernel whose own figures (shared memory, registers, threads) are over
    this device's limits, before it is launched."""
    if limits is None:
        return
    found = violations(use, limits)
    if found:
        raise TrialFailure(FailureReason.INFEASIBLE, describe(found, limits) + f" ({what})")


def warm_up_gpu() -> None:
    """What the first trial in a process would pay for: torch and triton imported, the CUDA
    context, cuBLAS (references), NVML and the measurement modules."""
    import torch

    import workers.measure.gpu_check  # noqa: F401
    import workers.measure.gpu_harness  # noqa: F401

    with contextlib.suppress(ImportError):  # the cuda backend's machines may lack it
        import triton  # noqa: F401

    if not torch.cuda.is_available():
        return
    torch.cuda.init()
    a = torch.ones((64, 64), device="cuda", dtype=torch.bfloat16)
    (a @ a).float().sum().item()
    with contextlib.suppress(Exception):
        import pynvml

        pynvml.nvmlInit()

"""What the Triton backend knows of a kernel and its configuration without running it: the
compile options and meta-parameters a configuration gives, the ptxas Triton invokes and the
flags that apply the configuration's compiler controls files, and what a compiled kernel
reports (registers, spills, shared memory, warps; the resources it needs per block, and why
it cannot launch). triton and torch are not imported here.
"""

from __future__ import annotations

import functools
from pathlib import Path
from types import ModuleType
from typing import Any

from wire.contract import FailureReason, KernelSpec, Metric
from wire.failures import TrialFailure
from wire.kernels.resources import ResourceUse
from wire.modules import is_module_target
from wire.options import TRITON_COMPILE_OPTIONS, split_config
from workers.backends.gpu_loader import GpuKernel
from workers.backends.modules import import_kernel
from workers.compilers import controls, ptxas, toolchains
from workers.measure.gpu_toolchain import acf_ptxas_flags, format_version, ptxas_version_of, supports_acf
from workers.runtime.apply import triton_ptxas_version

HARNESS = ("DTYPE", "make_inputs", "arguments", "grid", "output", "reference")
COMPILE_HARNESS = ("compile_arguments",)  # what a compile-only trial needs of the harness
REPORT_FILE = "triton-report.json"
SOURCE_DIR = "src"


@functools.cache
def triton_ptxas() -> tuple[str | None, tuple[int, int] | None]:
    """The ptxas Triton invokes (TRITON_PTXAS_PATH, else the one bundled with Triton)."""
    path = toolchains.triton_ptxas_path()
    return path, ptxas_version_of(path) if path else None


def ptxas_label() -> str:
    """The version of Triton's ptxas as workers report it: exact where ptxas says it."""
    return triton_ptxas_version() or format_version(triton_ptxas()[1])


def compile_options(config: dict[str, Any], acf_flags: list[str]) -> dict[str, Any]:
    """Triton's launch-time compile options from a configuration (pure)."""
    options, _ = split_config(config, TRITON_COMPILE_OPTIONS)
    options.pop("acf", None)
    if not options.get("maxnreg"):
        options.pop("maxnreg", None)
    ptx = " ".join(x for x in [str(options.pop("ptx_options", "") or ""), *acf_flags] if x)
    if ptx:
        options["ptx_options"] = ptx
    return options


def meta_parameters(kernel: GpuKernel, module: ModuleType | None, dims: dict[str, int]) -> dict:
    """The constexpr arguments of one launch: fixed, shape-dependent, then tuned (pure)."""
    _, tuned = split_config(kernel.config, TRITON_COMPILE_OPTIONS)
    shape_constants = module.constants(dims) if module is not None and hasattr(module, "constants") else {}
    return {**kernel.options.get("constants", {}), **shape_constants, **tuned}


def applied_controls(kernel: KernelSpec, resolved: GpuKernel, directory: Path,
                     version: tuple[int, int] | None) -> list[str]:
    """The ptxas flags that apply the configuration's controls files (the kernel's controls
    parameters, or the older `acf` key); the configuration left holds kernel parameters only."""
    files = controls.applied(kernel, resolved.config, directory)
    resolved.config = controls.kernel_parameters(kernel, resolved.config)
    flags = acf_ptxas_flags(resolved.config.get("acf"), resolved.options, version, directory)
    for file in files:
        if file.compiler != "ptxas":
            raise TrialFailure(FailureReason.UNSUPPORTED, f"{file.parameter}: the triton backend applies ptxas "
                               f"controls files, not {file.compiler}'s")
        if not supports_acf(version):
            raise TrialFailure(FailureReason.UNSUPPORTED, f"{file.parameter}: the controls file needs ptxas "
                               f"{file.version} (--apply-controls); Triton's ptxas here is {format_version(version)}: "
                               "give the worker --toolchain")
        flags += file.flags()
    return flags


def jit_of(module: ModuleType, kernel: GpuKernel) -> Any:
    """The kernel's JIT function: the source's, or an installed package's (`package.path:function`)."""
    if is_module_target(kernel.entry):
        return import_kernel(kernel.entry)
    jit = getattr(module, kernel.entry, None)
    if jit is None:
        raise TrialFailure(FailureReason.COMPILE_ERROR, f"the source defines no kernel named {kernel.entry!r}")
    return jit


def forget_compiled(jit: Any) -> None:
    """Drop what the kernel's JIT function compiled earlier in this process. A compile runner
    keeps a kernel's module across jobs (gpu_loader.load_module), and a configuration it built
    for an earlier job (the same tiles at another shape, say) would come from the JIT's memory:
    the new job's Triton cache would then hold neither the binary nor the launcher that its run
    phase loads, and the run phase would compile again on the measuring GPU's process. A
    wrapper (heuristics, autotune) is followed to its JIT function through `fn`."""
    while jit is not None:
        caches = getattr(jit, "device_caches", None)
        if caches is not None:
            caches.clear()
            return
        jit = getattr(jit, "fn", None)


def resource_failure(exc: Exception) -> TrialFailure:
    """Triton's OutOfResources (shared memory, registers or threads over the device's
    limits) means the configuration cannot launch: infeasible, not a compile error. A ptxas
    that refuses an ACF (another release's) cannot run the trial: unsupported."""
    text = f"{type(exc).__name__}: {exc}"
    reason = FailureReason.INFEASIBLE if type(exc).__name__ == "OutOfResources" else FailureReason.COMPILE_ERROR
    if ptxas.INVALID_CONTROLS in text:
        reason = FailureReason.UNSUPPORTED
    return TrialFailure(reason, text[:2000], log=text)


def compiled_use(compiled: Any) -> ResourceUse:
    """What a compiled kernel needs per block, from its metadata (shared memory, warps) and,
    once loaded, its register count."""
    metadata_ = getattr(compiled, "metadata", None)
    shared = getattr(metadata_, "shared", None)
    warps = getattr(metadata_, "num_warps", None)
    registers = getattr(compiled, "n_regs", None)
    return ResourceUse(
        shared_bytes=shared if isinstance(shared, int) else None,
        threads=warps * 32 if isinstance(warps, int) else None,
        registers_per_thread=registers if isinstance(registers, int) and registers > 0 else None,
    )


def kernel_info(compiled: Any) -> dict[str, Any]:
    if compiled is None:
        return {}
    info: dict[str, Any] = {}
    for attribute in ("n_regs", "n_spills", "n_max_threads"):
        value = getattr(compiled, attribute, None)
        if isinstance(value, int):
            info[attribute] = value
    metadata_ = getattr(compiled, "metadata", None)
    for attribute, key in (
        ("shared", "smem_bytes"),
        ("num_warps", "num_warps"),
        ("num_stages", "num_stages"),
        ("num_ctas", "num_ctas"),
        ("maxnreg", "maxnreg"),
    ):
        value = getattr(metadata_, attribute, None)
        if isinstance(value, int | float | str):
            info[key] = value
    return info


def throughput(module: ModuleType, kernel: GpuKernel, metrics: dict[str, Metric]) -> dict:
    """Achieved TFLOP/s and TB/s of the hot runtime, for comparison with the ceilings."""
    if not hasattr(module, "work") or "runtime_ms" not in metrics:
        return {}
    total = sum(w.weight for w in kernel.workload)
    flops = sum(module.work(w.dims)["flops"] * w.weight for w in kernel.workload) / total
    nbytes = sum(module.work(w.dims)["bytes"] * w.weight for w in kernel.workload) / total
    seconds = metrics["runtime_ms"].value / 1000.0
    return {"tflops": flops / seconds / 1e12, "tbps": nbytes / seconds / 1e12}

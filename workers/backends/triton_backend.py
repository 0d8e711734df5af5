"""Triton backend: a `@triton.jit` kernel plus its harness, compiled ahead and measured hot
and cold.

Configuration keys that are Triton compile options (num_warps, num_stages, maxnreg,
num_ctas, enable_fp_fusion, ptx_options) go to the compiler; the kernel's compiler controls
parameters (and the older `acf` key) name Advanced Controls Files, applied through
ptx_options with ptxas 13.3+; every other key is one of the kernel's constexpr
meta-parameters. Shape-dependent constexprs come from the harness's `constants(dims)`, fixed
ones from `options.constants`.

A compile-only trial (its objectives are compile metrics) needs no GPU: the kernel is lowered
to PTX for the study's target (the harness's `compile_arguments(dims)` gives the runtime
arguments' types and values, specialised as Triton's launcher specialises them) and the
worker's ptxas assembles it with the configuration's ptxas options and ACF, reporting what
it used (workers.compilers.ptxas).

`compile` warms Triton's own on-disk cache (TRITON_CACHE_DIR, by default ~/.triton/cache) for
every workload shape through the same JIT path and specialisation the launches use, so that
`check` and `measure`, in another process, load the binary instead of compiling again.
(Triton's cache records absolute paths, so it stays where Triton keeps it rather than moving
with the artifact directory; a missing entry only means compiling again at first launch.)
torch and triton are imported inside the methods: this module imports on machines without
them.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import shlex
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from wire.contract import FailureReason, KernelSpec, MeasureSettings, Metric
from wire.failures import TrialFailure
from wire.kernels.resources import ResourceUse
from wire.options import TRITON_COMPILE_OPTIONS, split_config
from workers.backends.base import Backend, CheckOutcome, CompiledKernel
from workers.backends.gpu_loader import (
    GpuKernel,
    load_module,
    refuse_compiled,
    refuse_unlaunchable,
    require,
    resolve,
    shape_key,
)
from workers.compilers import controls, ptxas, toolchains
from workers.measure.gpu_energy import nvml_energy_readable
from workers.measure.gpu_limits import local_device_limits
from workers.measure.gpu_toolchain import (
    acf_ptxas_flags,
    format_version,
    package_version,
    ptxas_version_of,
    supports_acf,
)
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


def _as_dtypes(args: tuple) -> tuple:
    import torch

    return tuple(a.dtype if isinstance(a, torch.Tensor) else a for a in args)


def _resource_failure(exc: Exception) -> TrialFailure:
    """Triton's OutOfResources (shared memory, registers or threads over the device's
    limits) means the configuration cannot launch: infeasible, not a compile error. A ptxas
    that refuses an ACF (another release's) cannot run the trial: unsupported."""
    text = f"{type(exc).__name__}: {exc}"
    reason = FailureReason.INFEASIBLE if type(exc).__name__ == "OutOfResources" else FailureReason.COMPILE_ERROR
    if ptxas.INVALID_CONTROLS in text:
        reason = FailureReason.UNSUPPORTED
    return TrialFailure(reason, text[:2000], log=text)


def specialised_source(jit: Any, values: list[Any], meta: dict[str, Any]) -> Any:
    """Triton's ASTSource for a launch with these runtime argument values (a pointer given
    as its type, "*bf16") and constexprs, specialised as Triton's launcher specialises a
    real launch: integers equal to 1 become constants, those divisible by 16 and every
    pointer (torch allocations are aligned) carry the divisibility hint."""
    from triton.backends.compiler import BaseBackend
    from triton.compiler import ASTSource
    from triton.runtime.jit import native_specialize_impl

    signature: dict[str, str] = {}
    constants: dict[str, Any] = {}
    attrs: dict[tuple[int, ...], list[list[Any]]] = {}
    given = iter(values)
    for index, param in enumerate(jit.params):
        if param.is_constexpr:
            if param.name not in meta:
                raise TrialFailure(FailureReason.ERROR, f"no value for the kernel's constexpr {param.name!r}")
            signature[param.name], constants[param.name] = "constexpr", meta[param.name]
            continue
        value = next(given, None)
        if value is None:
            raise TrialFailure(FailureReason.ERROR, f"compile_arguments gives no value for {param.name!r}")
        kind, hint = (value, "D") if isinstance(value, str) else native_specialize_impl(BaseBackend, value, False,
                                                                                        True, True)
        signature[param.name] = kind
        if kind == "constexpr":
            constants[param.name] = hint
        elif hint == "D":
            attrs[(index,)] = BaseBackend.parse_attr(hint)
    return ASTSource(jit, signature, constants, attrs)


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


class TritonBackend(Backend):
    name = "triton"
    warm_by_default = True

    def warm_up(self) -> None:
        warm_up_gpu()

    def probe(self) -> dict[str, Any]:
        try:
            import triton
        except ImportError as exc:
            return {"available": False, "reason": f"triton missing: {exc}"}
        try:
            import torch
        except ImportError:
            torch = None
        if torch is None or not torch.cuda.is_available():
            return self._compile_only_probe(triton.__version__, "torch missing" if torch is None else "no CUDA GPU")
        path, version = triton_ptxas()
        energy = nvml_energy_readable()
        return {
            "available": True,
            "reason": "",
            "compilers": {
                "triton": triton.__version__,
                "ptxas": ptxas_label(),
                "torch": torch.__version__,
            },
            "ptxas_path": path,
            "energy": energy,
            "features": {"acf": supports_acf(version), "compile_only": toolchains.selected() is not None},
            "gpu": torch.cuda.get_device_name(0),
            "device_limits": _limits_dump(),
        }

    @staticmethod
    def _compile_only_probe(triton_version: str, why: str) -> dict[str, Any]:
        """Without a GPU, compile-only trials still run where a ptxas is installed."""
        toolchain = toolchains.selected()
        if toolchain is None:
            return {"available": False, "reason": f"{why} and no ptxas for compile-only trials "
                    "(install nvidia-cuda-nvcc: the acf extra)"}
        return {"available": True, "reason": "", "energy": False, "gpu": None,
                "compilers": {"triton": triton_version, **toolchain.describe()},
                "features": {"acf": True, "compile_only": True, "gpu": False, "why_no_gpu": why}}

    def cache_key(self, kernel: KernelSpec, config: dict[str, Any], compile_only: bool = False) -> str:
        resolved = resolve(kernel, config, self.name)
        identity = {
            "source": resolved.source_hash,
            "entry": resolved.entry,
            "config": resolved.config,
            "constants": resolved.options.get("constants", {}),
            "acf_files": resolved.options.get("acf_files", {}),
            "shapes": [w.dims for w in resolved.workload],
            "triton": package_version("triton"),
            "ptxas": ptxas_label(),
            **({"compile_only": ptxas.toolchain().version, "target": ptxas.compile_arch(resolved.options)}
               if compile_only else {}),
        }
        text = json.dumps(identity, sort_keys=True, default=str)
        return "triton-" + hashlib.sha256(text.encode()).hexdigest()[:32]

    # -- compile: CPU side, another process ------------------------------------------------

    def compile(
        self, kernel: KernelSpec, config: dict[str, Any], workdir: Path, compile_only: bool = False
    ) -> CompiledKernel:
        resolved = resolve(kernel, config, self.name)
        workdir.mkdir(parents=True, exist_ok=True)
        if compile_only:
            return self._compile_only(kernel, resolved, workdir)
        refuse_unlaunchable(kernel, resolved, local_device_limits())
        flags = _applied_controls(kernel, resolved, workdir, triton_ptxas()[1])
        module = load_module(resolved.source, workdir / SOURCE_DIR, "kernel")
        require(module, HARNESS)
        jit = _jit(module, resolved)
        options = compile_options(resolved.config, flags)
        report: dict[str, Any] = {
            "options": options,
            "shapes": {},
            "triton": package_version("triton"),
            "ptxas": ptxas_label(),
        }
        import torch

        if not torch.cuda.is_available():
            report["deferred"] = "no GPU visible at compile time: compiled at first launch"
        else:
            for shape in resolved.workload:
                report["shapes"][shape_key(shape.dims)] = self._warm(jit, module, resolved, shape.dims, options)
        (workdir / REPORT_FILE).write_text(json.dumps(report, default=str))
        return CompiledKernel(directory=workdir, files={"report": REPORT_FILE}, report=report)

    def _compile_only(self, kernel: KernelSpec, resolved: GpuKernel, workdir: Path) -> CompiledKernel:
        """Lower the kernel to PTX for the study's target on every shape and assemble it with
        the worker's ptxas: no GPU, no driver, no torch."""
        import triton
        from triton.backends.compiler import GPUTarget

        toolchain = ptxas.toolchain()
        arch = ptxas.compile_arch(resolved.options)
        files = controls.applied(kernel, resolved.config, workdir)
        acf = next((f for f in files if f.compiler == "ptxas"), None)
        resolved.config = controls.kernel_parameters(kernel, resolved.config)
        module = load_module(resolved.source, workdir / SOURCE_DIR, "kernel")
        require(module, COMPILE_HARNESS)
        jit = _jit(module, resolved)
        options = compile_options(resolved.config, [])
        extra = shlex.split(str(options.pop("ptx_options", "")))
        if options.get("enable_fp_fusion") is False:
            extra.insert(0, "--fmad=false")  # as Triton asks its ptxas
        target = GPUTarget("cuda", int(arch[3:].rstrip("a")), 32)
        shapes: dict[str, dict[str, Any]] = {}
        for shape in resolved.workload:
            key = shape_key(shape.dims)
            started = time.perf_counter()
            try:
                source = specialised_source(jit, list(module.compile_arguments(shape.dims)),
                                            meta_parameters(resolved, module, shape.dims))
                lowered = triton.compile(source, target=target, options=options)
            except TrialFailure:
                raise
            except Exception as exc:
                raise TrialFailure(FailureReason.COMPILE_ERROR, f"Triton: {type(exc).__name__}: {exc}"[:2000],
                                   log=f"{type(exc).__name__}: {exc}") from exc
            ptx = workdir / f"{key}.ptx"
            ptx.write_text(lowered.asm["ptx"])
            assembled = ptxas.assemble(ptx, ptxas=toolchain.ptxas, arch=arch, options=extra,
                                       acf=acf.path if acf else None, acf_release=acf.version if acf else None,
                                       version=toolchain.version)
            ptx.with_suffix(".cubin").write_bytes(assembled.cubin)
            shapes[key] = ptxas.shape_entry(assembled, time.perf_counter() - started)
        report = {"compile_only": True, "arch": arch, "options": options, "ptxas_options": extra,
                  "triton": package_version("triton"), "toolchain": toolchain.describe(), "shapes": shapes,
                  "metrics": ptxas.summary(shapes), "acfs": {f.parameter: f.sha256 for f in files}}
        (workdir / REPORT_FILE).write_text(json.dumps(report, default=str))
        return CompiledKernel(directory=workdir, files={"report": REPORT_FILE}, report=report,
                              log="\n".join(entry["ptxas_log"] for entry in shapes.values()))

    def _warm(
        self,
        jit: Any,
        module: ModuleType,
        kernel: GpuKernel,
        dims: dict[str, int],
        options: dict[str, Any],
    ) -> dict[str, Any]:
        meta = meta_parameters(kernel, module, dims)
        args = _as_dtypes(module.arguments(module.make_inputs(dims, "meta"), dims))
        started = time.perf_counter()
        try:
            compiled = jit.warmup(*args, grid=(1,), **meta, **options)
        except Exception as exc:
            raise _resource_failure(exc) from exc
        info = _kernel_info(compiled)
        info["compile_s"] = time.perf_counter() - started
        limits = local_device_limits()
        refuse_compiled(compiled_use(compiled), limits, "from the compiled kernel")
        try:
            compiled._init_handles()  # loads it: out-of-resource configurations fail here
        except Exception as exc:
            raise _resource_failure(exc) from exc
        refuse_compiled(compiled_use(compiled), limits, "from the loaded kernel's registers")
        info.update(_kernel_info(compiled))
        return info

    # -- check and measure: own the GPU ---------------------------------------------------

    def _prepare(
        self, kernel: KernelSpec, config: dict[str, Any], built: CompiledKernel
    ) -> tuple[GpuKernel, ModuleType, Any, dict[str, Any]]:
        import torch

        if not torch.cuda.is_available():
            raise TrialFailure(FailureReason.UNSUPPORTED, "no CUDA GPU visible")
        resolved = resolve(kernel, config, self.name)
        flags = _applied_controls(kernel, resolved, built.directory, triton_ptxas()[1])
        module = load_module(resolved.source, built.directory / SOURCE_DIR, "kernel")
        require(module, HARNESS)
        return (
            resolved,
            module,
            getattr(module, resolved.entry),
            compile_options(resolved.config, flags),
        )

    def _launch(
        self,
        jit: Any,
        module: ModuleType,
        kernel: GpuKernel,
        dims: dict[str, int],
        inputs: dict[str, Any],
        options: dict[str, Any],
    ) -> Any:
        meta = meta_parameters(kernel, module, dims)
        args = module.arguments(inputs, dims)
        launcher = jit[module.grid(dims, {**meta, **options})]

        def launch() -> Any:
            return launcher(*args, **meta, **options)

        return launch

    def check(self, kernel: KernelSpec, config: dict[str, Any], built: CompiledKernel) -> CheckOutcome:
        if built.report.get("compile_only"):
            return ptxas.compiled_check(built)
        import torch

        from workers.measure.gpu_check import check_once, new_seed, tolerance_for, verdict

        resolved, module, jit, options = self._prepare(kernel, config, built)
        seed = new_seed()
        checks, kernels = [], {}
        for index, shape in enumerate(resolved.workload):
            dims, key = shape.dims, shape_key(shape.dims)
            generator = torch.Generator(device="cuda").manual_seed(seed + index)
            holder: dict[str, Any] = {}

            def run(inputs: dict[str, Any], dims: dict[str, int] = dims, holder: dict[str, Any] = holder) -> None:
                holder["kernel"] = self._launch(jit, module, resolved, dims, inputs, options)()

            def reference(inputs: dict[str, Any], dims: dict[str, int] = dims) -> Any:
                return module.reference(inputs, dims)

            make_inputs = functools.partial(module.make_inputs, dims, "cuda", generator)
            try:
                checks.append(check_once(key, make_inputs, module.output, run, reference))
            except TrialFailure:
                raise
            except Exception as exc:
                raise _resource_failure(exc) from exc
            kernels[key] = _kernel_info(holder.get("kernel"))
        tolerance = tolerance_for(module.DTYPE, resolved.options.get("tolerance"))
        passed, details = verdict(checks, tolerance, seed)
        details["kernel"] = kernels
        return CheckOutcome(passed=passed, details=details)

    def measure(
        self,
        kernel: KernelSpec,
        config: dict[str, Any],
        built: CompiledKernel,
        objectives: list[str],
        settings: Any,
    ) -> tuple[dict[str, Metric], dict[str, Any]]:
        if built.report.get("compile_only"):
            return ptxas.metrics_of(built.report, objectives), {"compile_only": True}
        import torch

        from workers.measure.gpu_harness import ShapeLaunch, measure_workload

        resolved, module, jit, options = self._prepare(kernel, config, built)
        settings = _settings(settings)
        generator = torch.Generator(device="cuda").manual_seed(int(time.time_ns() % 2**31))
        shapes = []
        for shape in resolved.workload:
            inputs = module.make_inputs(shape.dims, "cuda", generator)
            launch = self._launch(jit, module, resolved, shape.dims, inputs, options)
            shapes.append(ShapeLaunch(shape_key(shape.dims), shape.weight, launch))
        metrics, environment = measure_workload(shapes, objectives, settings)
        environment["throughput"] = _throughput(module, resolved, metrics)
        return metrics, environment


def _jit(module: ModuleType, kernel: GpuKernel) -> Any:
    jit = getattr(module, kernel.entry, None)
    if jit is None:
        raise TrialFailure(FailureReason.COMPILE_ERROR, f"the source defines no kernel named {kernel.entry!r}")
    return jit


def _applied_controls(kernel: KernelSpec, resolved: GpuKernel, directory: Path,
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


def _limits_dump() -> dict[str, Any] | None:
    limits = local_device_limits()
    return limits.model_dump() if limits else None


def _settings(settings: Any) -> MeasureSettings:
    if isinstance(settings, MeasureSettings):
        return settings
    if settings is None:
        return MeasureSettings()
    return MeasureSettings.model_validate(settings)


def _kernel_info(compiled: Any) -> dict[str, Any]:
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


def _throughput(module: ModuleType, kernel: GpuKernel, metrics: dict[str, Metric]) -> dict:
    """Achieved TFLOP/s and TB/s of the hot runtime, for comparison with the ceilings."""
    if not hasattr(module, "work") or "runtime_ms" not in metrics:
        return {}
    total = sum(w.weight for w in kernel.workload)
    flops = sum(module.work(w.dims)["flops"] * w.weight for w in kernel.workload) / total
    nbytes = sum(module.work(w.dims)["bytes"] * w.weight for w in kernel.workload) / total
    seconds = metrics["runtime_ms"].value / 1000.0
    return {"tflops": flops / seconds / 1e12, "tbps": nbytes / seconds / 1e12}


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


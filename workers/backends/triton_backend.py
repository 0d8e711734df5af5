"""Triton backend: a `@triton.jit` kernel plus its harness, compiled ahead and measured hot
and cold.

Configuration keys that are Triton compile options (num_warps, num_stages, maxnreg,
num_ctas, enable_fp_fusion, ptx_options) go to the compiler; the kernel's compiler controls
parameters (and the older `acf` key) name Advanced Controls Files, applied through
ptx_options with ptxas 13.3+; every other key is one of the kernel's constexpr
meta-parameters. Shape-dependent constexprs come from the harness's `constants(dims)`, fixed
ones from `options.constants`.

A compile-only trial (its objectives are compile metrics) needs no GPU
(workers.backends.triton_compile_only); what the backend reads of a configuration and of a
compiled kernel is workers.backends.triton_kernel's.

`compile` warms Triton's own on-disk cache (TRITON_CACHE_DIR, by default ~/.triton/cache) for
every workload shape through the same JIT path and specialisation the launches use, so that
`check` and `measure`, in another process, load the binary instead of compiling again.
(Triton's cache records absolute paths, so it stays where Triton keeps it rather than moving
with the artifact directory; a missing entry only means compiling again at first launch.)
torch and triton are imported inside the methods: this module imports on machines without
them.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from wire.contract import FailureReason, KernelSpec, MeasureSettings, Metric
from wire.failures import TrialFailure
from workers.backends import triton_compile_only
from workers.backends.base import Backend, CheckOutcome, CompiledKernel
from workers.backends.gpu_loader import (
    GpuKernel,
    load_module,
    refuse_compiled,
    refuse_unlaunchable,
    require,
    resolve,
    shape_key,
    warm_up_gpu,
)
from workers.backends.modules import identity as module_identity
from workers.backends.triton_kernel import (
    HARNESS,
    REPORT_FILE,
    SOURCE_DIR,
    applied_controls,
    compile_options,
    compiled_use,
    forget_compiled,
    jit_of,
    kernel_info,
    meta_parameters,
    ptxas_label,
    resource_failure,
    throughput,
    triton_ptxas,
)
from workers.compilers import ptxas, toolchains
from workers.measure.gpu_limits import local_device_limits
from workers.measure.gpu_toolchain import package_version, supports_acf
from workers.measure.nvml_sampler import nvml_energy_readable


def _as_dtypes(args: tuple) -> tuple:
    import torch

    return tuple(a.dtype if isinstance(a, torch.Tensor) else a for a in args)


class TritonBackend(Backend):
    name = "triton"
    warm_by_default = True

    def warm_up(self, phase: str) -> None:
        """A warm runner's: the GPU stack; a compile runner's also what its first Triton
        compile would pay (workers.backends.triton_warm)."""
        warm_up_gpu()
        import torch

        if phase != "compile" or not torch.cuda.is_available():
            return
        from workers.backends import triton_warm

        triton_warm.warm()

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
            **module_identity(kernel),
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
            return triton_compile_only.build(kernel, resolved, workdir)
        refuse_unlaunchable(kernel, resolved, local_device_limits())
        flags = applied_controls(kernel, resolved, workdir, triton_ptxas()[1])
        module = load_module(resolved.source, workdir / SOURCE_DIR, "kernel")
        require(module, HARNESS)
        jit = jit_of(module, resolved)
        forget_compiled(jit)  # each job's build lands in its own job's cache
        options = compile_options(resolved.config, flags)
        report: dict[str, Any] = {
            "options": options,
            "shapes": {},
            "triton": package_version("triton"),
            "ptxas": ptxas_label(),
            **module_identity(kernel),
        }
        import torch

        if not torch.cuda.is_available():
            report["deferred"] = "no GPU visible at compile time: compiled at first launch"
        else:
            for shape in resolved.workload:
                report["shapes"][shape_key(shape.dims)] = self._warm(jit, module, resolved, shape.dims, options)
        (workdir / REPORT_FILE).write_text(json.dumps(report, default=str))
        return CompiledKernel(directory=workdir, files={"report": REPORT_FILE}, report=report)

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
            raise resource_failure(exc) from exc
        info = kernel_info(compiled)
        info["compile_s"] = time.perf_counter() - started
        limits = local_device_limits()
        refuse_compiled(compiled_use(compiled), limits, "from the compiled kernel")
        try:
            compiled._init_handles()  # loads it: out-of-resource configurations fail here
        except Exception as exc:
            raise resource_failure(exc) from exc
        refuse_compiled(compiled_use(compiled), limits, "from the loaded kernel's registers")
        info.update(kernel_info(compiled))
        return info

    # -- check and measure: own the GPU ---------------------------------------------------

    def _prepare(
        self, kernel: KernelSpec, config: dict[str, Any], built: CompiledKernel
    ) -> tuple[GpuKernel, ModuleType, Any, dict[str, Any]]:
        import torch

        if not torch.cuda.is_available():
            raise TrialFailure(FailureReason.UNSUPPORTED, "no CUDA GPU visible")
        resolved = resolve(kernel, config, self.name)
        flags = applied_controls(kernel, resolved, built.directory, triton_ptxas()[1])
        module = load_module(resolved.source, built.directory / SOURCE_DIR, "kernel")
        require(module, HARNESS)
        return (
            resolved,
            module,
            jit_of(module, resolved),
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
                raise resource_failure(exc) from exc
            kernels[key] = kernel_info(holder.get("kernel"))
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
        environment["throughput"] = throughput(module, resolved, metrics)
        return metrics, environment


def _limits_dump() -> dict[str, Any] | None:
    limits = local_device_limits()
    return limits.model_dump() if limits else None


def _settings(settings: Any) -> MeasureSettings:
    if isinstance(settings, MeasureSettings):
        return settings
    if settings is None:
        return MeasureSettings()
    return MeasureSettings.model_validate(settings)



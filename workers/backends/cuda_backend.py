"""CUDA C++ backend through cuda.core: NVRTC compiles the source to a cubin per workload
variant, the trial process loads it and launches it on torch's stream
(workers.backends.cuda_launch), and the shared GPU harness measures it.

Configuration keys that are NVRTC program options (use_fast_math, fma, ftz, prec_div,
prec_sqrt, extra_device_vectorization, max_register_count, restrict), `ptxas_options` (a
string of ptxas flags) and `acf` (an Advanced Controls File, ptxas 13.3+) go to the compiler;
every other key becomes a `-D` macro (booleans as 1/0) and is also handed to the harness,
which derives the launch geometry from it. Shapes that need different compile-time macros
(the harness's `macros(dims, config)`) get their own cubin; equal ones share it. ptxas runs
with -v and its report (registers, spills, stack frame, shared memory) is kept per cubin.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from wire.contract import FailureReason, KernelSpec, MeasureSettings, Metric
from wire.failures import TrialFailure
from wire.options import CUDA_PROGRAM_OPTIONS, macro_value, split_config
from workers.backends.base import Backend, CheckOutcome, CompiledKernel
from workers.backends.cuda_launch import (
    TorchStreams,
    cuda_core,
    kernel_attributes,
    launch_failure_reason,
    load_kernel,
    refuse_loaded,
)
from workers.backends.gpu_loader import (
    GpuKernel,
    load_harness,
    refuse_unlaunchable,
    require,
    resolve,
    shape_key,
    warm_up_gpu,
)
from workers.compilers import controls, ptxas, toolchains
from workers.measure.gpu_limits import local_device_limits
from workers.measure.gpu_toolchain import (
    acf_ptxas_flags,
    format_version,
    package_version,
    parse_ptxas_report,
    supports_acf,
)
from workers.measure.nvml_sampler import nvml_energy_readable

HARNESS = ("DTYPE", "make_inputs", "arguments", "launch_geometry", "output", "reference", "macros")
DEFAULT_ARCH = "sm_90"


@functools.cache
def nvrtc_version() -> tuple[int, int] | None:
    """NVRTC's version, which is also the version of the ptxas it embeds."""
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        try:
            from cuda import nvrtc  # type: ignore[no-redef]
        except ImportError:
            return None
    try:
        _, major, minor = nvrtc.nvrtcVersion()
        return int(major), int(minor)
    except Exception:
        return None


def program_settings(config: dict[str, Any], acf_flags: list[str]) -> dict[str, Any]:
    """Keyword arguments of ProgramOptions from a configuration's compiler keys (pure)."""
    options, _ = split_config(config, CUDA_PROGRAM_OPTIONS)
    options.pop("acf", None)
    ptxas = str(options.pop("ptxas_options", "") or "").split()
    if not options.get("max_register_count"):
        options.pop("max_register_count", None)
    options["ptxas_options"] = ["-v", *ptxas, *acf_flags]
    return {k: v for k, v in options.items() if v is not None}


def variant_macros(harness: ModuleType, dims: dict[str, int], config: dict[str, Any]) -> dict[str, str]:
    _, params = split_config(config, CUDA_PROGRAM_OPTIONS)
    try:
        shape_macros = harness.macros(dims, params)
    except ValueError as exc:
        raise TrialFailure(FailureReason.ERROR, f"workload shape {dims}: {exc}") from exc
    return {k: macro_value(v) for k, v in {**shape_macros, **params}.items()}


def variant_id(macros: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(macros, sort_keys=True).encode()).hexdigest()[:12]


def _arch(kernel: GpuKernel) -> str:
    if kernel.options.get("arch"):
        return str(kernel.options["arch"])
    try:
        device = cuda_core().Device()
        major, minor = device.compute_capability
        return f"sm_{major}{minor}"
    except Exception:
        return DEFAULT_ARCH


class CudaBackend(Backend):
    name = "cuda"
    warm_by_default = True

    def warm_up(self, phase: str) -> None:
        warm_up_gpu()
        nvrtc_version()
        import torch

        if torch.cuda.is_available():
            cuda_core().Device(torch.cuda.current_device()).set_current()

    def probe(self) -> dict[str, Any]:
        try:
            import torch

            core = cuda_core()
        except ImportError as exc:
            return {"available": False, "reason": f"cuda.core or torch missing: {exc}"}
        if not torch.cuda.is_available():
            return {"available": False, "reason": "no CUDA GPU visible to torch"}
        version = nvrtc_version()

        return {
            "available": True,
            "reason": "",
            "compilers": {
                "nvrtc": format_version(version),
                "ptxas": format_version(version),
                "cuda.core": getattr(core, "__version__", package_version("cuda-core")),
            },
            "energy": nvml_energy_readable(),
            "features": {"acf": supports_acf(version)},
            "gpu": torch.cuda.get_device_name(0),
            "device_limits": limits.model_dump() if (limits := local_device_limits()) else None,
        }

    def cache_key(self, kernel: KernelSpec, config: dict[str, Any], compile_only: bool = False) -> str:
        resolved = resolve(kernel, config, self.name)
        identity = {
            "source": resolved.source_hash,
            "entry": resolved.entry,
            "config": resolved.config,
            "harness": resolved.options.get("harness"),
            "harness_source": hashlib.sha256(str(resolved.options.get("harness_source", "")).encode()).hexdigest(),
            "acf_files": resolved.options.get("acf_files", {}),
            "arch": resolved.options.get("arch"),
            "shapes": [w.dims for w in resolved.workload],
            "nvrtc": format_version(nvrtc_version()),
            "cuda-core": package_version("cuda-core"),
        }
        text = json.dumps(identity, sort_keys=True, default=str)
        return "cuda-" + hashlib.sha256(text.encode()).hexdigest()[:32]

    # -- compile: CPU side, another process ------------------------------------------------

    def compile(
        self, kernel: KernelSpec, config: dict[str, Any], workdir: Path, compile_only: bool = False
    ) -> CompiledKernel:
        resolved = resolve(kernel, config, self.name)
        refuse_unlaunchable(kernel, resolved, local_device_limits())
        workdir.mkdir(parents=True, exist_ok=True)
        applied = [f for f in controls.applied(kernel, resolved.config, workdir) if f.compiler == "ptxas"]
        resolved.config = controls.kernel_parameters(kernel, resolved.config)
        flags = acf_ptxas_flags(resolved.config.get("acf"), resolved.options, nvrtc_version(), workdir)
        harness = load_harness(resolved, workdir / "src")
        require(harness, HARNESS)
        settings = program_settings(resolved.config, flags)
        acf = applied[0] if applied else None
        arch = _arch(resolved)
        files: dict[str, str] = {}
        report: dict[str, Any] = {
            "arch": arch,
            "program_options": settings,
            "variants": {},
            "nvrtc": format_version(nvrtc_version()),
        }
        logs = []
        for shape in resolved.workload:
            macros = variant_macros(harness, shape.dims, resolved.config)
            variant = variant_id(macros)
            files[f"cubin:{shape_key(shape.dims)}"] = f"{resolved.entry}-{variant}.cubin"
            if variant in report["variants"]:
                continue
            info, log = self._compile_variant(
                resolved, settings, macros, arch, workdir / f"{resolved.entry}-{variant}.cubin", acf
            )
            report["variants"][variant] = {"macros": macros, **info}
            logs.append(log)
        return CompiledKernel(directory=workdir, files=files, report=report, log="\n".join(logs))

    def _compile_variant(
        self,
        kernel: GpuKernel,
        settings: dict[str, Any],
        macros: dict[str, str],
        arch: str,
        path: Path,
        acf: controls.Applied | None = None,
    ) -> tuple[dict, str]:
        """NVRTC to a cubin; with an ACF, NVRTC to PTX and the worker's toolchain's ptxas to
        the cubin (NVRTC's own ptxas is of its release, which may not be the ACF's)."""
        core = cuda_core()
        buffer = io.StringIO()
        started = time.perf_counter()
        if acf is not None:
            settings = {k: v for k, v in settings.items() if k != "ptxas_options"}
        try:
            options = core.ProgramOptions(
                name=kernel.entry,
                arch=arch,
                std="c++17",
                define_macro=list(macros.items()),
                **settings,
            )
            program = core.Program(kernel.source, "c++", options=options)
            code = program.compile("ptx" if acf is not None else "cubin", logs=buffer)
        except Exception as exc:
            log = buffer.getvalue()
            raise TrialFailure(
                FailureReason.COMPILE_ERROR,
                f"NVRTC failed: {type(exc).__name__}: {exc}"[:2000],
                log=f"{log}\n{exc}",
            ) from exc
        if acf is not None:
            return self._assemble(kernel, bytes(code.code), arch, path, acf, started)
        path.write_bytes(bytes(code.code))
        log = buffer.getvalue()
        info: dict[str, Any] = {
            "compile_s": time.perf_counter() - started,
            **parse_ptxas_report(log),
        }
        return info, log

    @staticmethod
    def _assemble(kernel: GpuKernel, ptx: bytes, arch: str, path: Path, acf: controls.Applied,
                  started: float) -> tuple[dict, str]:
        toolchain = toolchains.selected()
        if toolchain is None:
            raise TrialFailure(FailureReason.UNSUPPORTED, f"{acf.parameter}: an ACF is applied by the toolchain's "
                               "ptxas, and this worker has none: give it --toolchain")
        source = path.with_suffix(".ptx")
        source.write_bytes(ptx.rstrip(b"\0"))
        ptxas_options = str(kernel.config.get("ptxas_options") or "").split()
        assembled = ptxas.assemble(source, ptxas=toolchain.ptxas, arch=arch, options=ptxas_options, acf=acf.path,
                                   acf_release=acf.version, version=toolchain.version)
        path.write_bytes(assembled.cubin)
        info = {"compile_s": time.perf_counter() - started, **assembled.metrics(), "ptxas": toolchain.version}
        return info, assembled.log

    # -- check and measure: own the GPU ---------------------------------------------------

    def _prepare(
        self, kernel: KernelSpec, config: dict[str, Any], built: CompiledKernel
    ) -> tuple[GpuKernel, ModuleType, dict[str, Any]]:
        import torch

        if not torch.cuda.is_available():
            raise TrialFailure(FailureReason.UNSUPPORTED, "no CUDA GPU visible")
        resolved = resolve(kernel, config, self.name)
        resolved.config = controls.kernel_parameters(kernel, resolved.config)
        harness = load_harness(resolved, built.directory / "src")
        require(harness, HARNESS)
        torch.cuda.init()
        core = cuda_core()
        core.Device(torch.cuda.current_device()).set_current()
        kernels = {}
        for shape in resolved.workload:
            key = shape_key(shape.dims)
            path = built.directory / built.files[f"cubin:{key}"]
            kernels[key] = load_kernel(core, path, resolved.entry)
            refuse_loaded(kernels[key], harness, resolved.config, shape.dims)
        return resolved, harness, kernels

    def _launch(
        self,
        kernel_handle: Any,
        harness: ModuleType,
        config: dict[str, Any],
        dims: dict[str, int],
        inputs: dict[str, Any],
    ) -> Any:
        core = cuda_core()
        _, params = split_config(config, CUDA_PROGRAM_OPTIONS)
        grid, block, shared = harness.launch_geometry(dims, params)
        launch_config = core.LaunchConfig(grid=grid, block=block, shmem_size=shared)
        args = harness.arguments(inputs, dims, params)
        streams = TorchStreams(core)

        def launch() -> None:
            core.launch(streams.current(), launch_config, kernel_handle, *args)

        return launch

    def check(self, kernel: KernelSpec, config: dict[str, Any], built: CompiledKernel) -> CheckOutcome:
        import torch

        from workers.measure.gpu_check import check_once, new_seed, tolerance_for, verdict

        resolved, harness, kernels = self._prepare(kernel, config, built)
        seed = new_seed()
        checks = []
        for index, shape in enumerate(resolved.workload):
            dims, key = shape.dims, shape_key(shape.dims)
            generator = torch.Generator(device="cuda").manual_seed(seed + index)

            def run(inputs: dict[str, Any], dims: dict[str, int] = dims, key: str = key) -> None:
                self._launch(kernels[key], harness, resolved.config, dims, inputs)()

            def reference(inputs: dict[str, Any], dims: dict[str, int] = dims) -> Any:
                return harness.reference(inputs, dims)

            make_inputs = functools.partial(harness.make_inputs, dims, "cuda", generator)
            try:
                checks.append(check_once(key, make_inputs, harness.output, run, reference))
            except Exception as exc:
                raise TrialFailure(launch_failure_reason(exc), f"{type(exc).__name__}: {exc}"[:2000]) from exc
        tolerance = tolerance_for(harness.DTYPE, resolved.options.get("tolerance"))
        passed, details = verdict(checks, tolerance, seed)
        details["kernel"] = {key: kernel_attributes(handle) for key, handle in kernels.items()}
        return CheckOutcome(passed=passed, details=details)

    def measure(
        self,
        kernel: KernelSpec,
        config: dict[str, Any],
        built: CompiledKernel,
        objectives: list[str],
        settings: Any,
    ) -> tuple[dict[str, Metric], dict[str, Any]]:
        import torch

        from workers.measure.gpu_harness import ShapeLaunch, measure_workload

        resolved, harness, kernels = self._prepare(kernel, config, built)
        settings = settings if isinstance(settings, MeasureSettings) else MeasureSettings.model_validate(settings or {})
        generator = torch.Generator(device="cuda").manual_seed(int(time.time_ns() % 2**31))
        shapes = []
        for shape in resolved.workload:
            key = shape_key(shape.dims)
            inputs = harness.make_inputs(shape.dims, "cuda", generator)
            launch = self._launch(kernels[key], harness, resolved.config, shape.dims, inputs)
            shapes.append(ShapeLaunch(key, shape.weight, launch))
        metrics, environment = measure_workload(shapes, objectives, settings)
        if hasattr(harness, "work") and "runtime_ms" in metrics:
            total = sum(w.weight for w in resolved.workload)
            nbytes = sum(harness.work(w.dims)["bytes"] * w.weight for w in resolved.workload)
            environment["throughput"] = {"tbps": nbytes / total / (metrics["runtime_ms"].value / 1000.0) / 1e12}
        return metrics, environment



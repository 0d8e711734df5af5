"""The target this process runs on: the device and the toolchain versions, as strings.

The same function names the target a validation measured on (inside the worker's sandbox)
and the target a runtime or a build asks for, so equal machines give equal strings. Every
probe is optional: torch, pynvml, triton, cuda-python and nvidia-smi are used when present,
and what cannot be found stays None (unknown, never guessed).
"""

from __future__ import annotations

import contextlib
import functools
import platform
import shutil
import subprocess
from typing import Any

from wire.contract import KernelSpec, Target
from wire.targets import parse_toolchain  # noqa: F401  (re-exported by workers.runtime)
from workers.measure.gpu_toolchain import format_version, package_version

GPU_BACKENDS = ("triton", "cuda")


@functools.cache
def detect_target(backend: str) -> Target:
    """The target a `backend` kernel runs on here (cached: it does not change in a process)."""
    if backend not in GPU_BACKENDS:
        return _host_target()
    target = Target(**_gpu_identity(), **_driver())
    if backend == "triton":
        version = package_version("triton")
        target.triton = None if version == "absent" else version
        target.ptxas = _triton_ptxas()
    else:
        from workers.backends.cuda_backend import nvrtc_version

        version_tuple = nvrtc_version()
        target.nvrtc = target.ptxas = format_version(version_tuple) if version_tuple else None
    return target


def compile_target(kernel: KernelSpec) -> Target:
    """The target of a compile-only build: the compute capability it was built for and the
    toolchain that built it (no GPU, no driver)."""
    from workers.compilers import toolchains

    toolchain = toolchains.selected()
    capability = kernel.options.get("compute_capability")
    if capability is None and str(kernel.options.get("arch", "")).startswith("sm_"):
        digits = str(kernel.options["arch"])[3:].rstrip("a")
        capability = f"{digits[:-1]}.{digits[-1]}"
    version = package_version("triton") if kernel.backend == "triton" else "absent"
    return Target(compute_capability=capability, ptxas=toolchain.version if toolchain else None,
                  triton=None if version == "absent" else version)


def _host_target() -> Target:
    from workers.backends.cpu import CpuBackend
    from workers.fingerprint import cpu_model

    return Target(cpu=cpu_model(), machine=platform.machine(), cc=CpuBackend().compiler_version or None)


def _triton_ptxas() -> str | None:
    """The exact version of the ptxas Triton compiles with (the selected toolchain's, when a
    worker pins one), as workers report it."""
    from workers.runtime.apply import triton_ptxas_version

    return triton_ptxas_version()


def _gpu_identity() -> dict[str, Any]:
    """Name and compute capability of the current CUDA device (torch's numbering)."""
    with contextlib.suppress(Exception):
        import torch

        if torch.cuda.is_available():
            index = torch.cuda.current_device()
            major, minor = torch.cuda.get_device_capability(index)
            return {"gpu": torch.cuda.get_device_name(index), "compute_capability": f"{major}.{minor}"}
    with contextlib.suppress(Exception):
        nvml = _nvml()
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
        return {"gpu": _text(nvml.nvmlDeviceGetName(handle)), "compute_capability": f"{major}.{minor}"}
    rows = _nvidia_smi("--query-gpu=name,compute_cap", "--format=csv,noheader").strip().splitlines()
    if rows and "," in rows[0]:
        name, capability = (part.strip() for part in rows[0].split(",", 1))
        return {"gpu": name, "compute_capability": capability}
    return {}


def _driver() -> dict[str, Any]:
    """The driver version and the CUDA version it supports."""
    with contextlib.suppress(Exception):
        nvml = _nvml()
        cuda = int(nvml.nvmlSystemGetCudaDriverVersion_v2())
        return {"driver": _text(nvml.nvmlSystemGetDriverVersion()), "cuda": f"{cuda // 1000}.{cuda % 1000 // 10}"}
    from workers.fingerprint import gpus

    info = gpus()
    return {"driver": info.get("driver_version"), "cuda": info.get("cuda_version")}


def _nvidia_smi(*arguments: str) -> str:
    if not shutil.which("nvidia-smi"):
        return ""
    try:
        done = subprocess.run(["nvidia-smi", *arguments], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout if done.returncode == 0 else ""


def _nvml() -> Any:
    import pynvml

    pynvml.nvmlInit()
    return pynvml


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)



"""The hardware and software a worker measures on, sent at registration and kept with every
trial it runs, so a result can be traced to (and compared only with) its machine."""

from __future__ import annotations

import os
import platform
import re
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

from wire import paretune_version
from wire.contract import Fingerprint
from workers.compilers.toolchains import Toolchain


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def usable_cpus() -> list[int]:
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def _run(command: list[str], timeout: float = 10.0) -> str:
    if not shutil.which(command[0]):
        return ""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout if done.returncode == 0 else ""


def cc_version() -> str:
    out = _run([os.environ.get("CC", "cc"), "--version"])
    return out.splitlines()[0].strip() if out else ""


def gpus() -> dict[str, Any]:
    """GPU name, count, driver and CUDA version from nvidia-smi; empty without NVIDIA GPUs."""
    listing = _run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
    rows = [line.split(",") for line in listing.strip().splitlines() if line.strip()]
    if not rows:
        return {}
    info: dict[str, Any] = {
        "gpu_name": rows[0][0].strip(),
        "gpu_count": len(rows),
        "driver_version": rows[0][1].strip() if len(rows[0]) > 1 else None,
    }
    names = sorted({row[0].strip() for row in rows})
    if len(names) > 1:
        info["gpu_names"] = names
    match = re.search(r"CUDA Version:\s*([\d.]+)", _run(["nvidia-smi"]))
    if match:
        info["cuda_version"] = match.group(1)
    return info


def gpu_identity(index: int) -> dict[str, Any]:
    """Which physical GPU a worker pinned to GPU `index` measures on (nvidia-smi's and
    NVML's numbering, which CUDA_VISIBLE_DEVICES does not change)."""
    listing = _run(
        ["nvidia-smi", "-i", str(index), "--query-gpu=index,name,uuid,pci.bus_id", "--format=csv,noheader"]
    )
    fields = [f.strip() for f in listing.strip().split(",")] if listing.strip() else []
    info: dict[str, Any] = {"gpu_index": index}
    if len(fields) >= 4:
        info.update(gpu_name=fields[1], gpu_uuid=fields[2], gpu_pci_bus=fields[3])
    return info


def collect(
    probes: dict[str, dict[str, Any]],
    gpu: int | None = None,
    isolation: dict[str, Any] | None = None,
    limits: dict[str, Any] | None = None,
    toolchain: Toolchain | None = None,
) -> Fingerprint:
    """The fingerprint of this machine given the backends' probe() results; `gpu` is the
    one GPU the worker is pinned to, if any; `isolation` how its trials are isolated
    (Isolation.describe()), `limits` the caps on their resources and `toolchain` the CUDA
    toolchain its trials compile with."""
    compilers: dict[str, str] = {}
    cc = cc_version()
    if cc:
        compilers["cc"] = cc
    for probe in probes.values():
        if probe.get("available"):
            compilers.update({k: str(v) for k, v in probe.get("compilers", {}).items()})
    available = sorted(name for name, probe in probes.items() if probe.get("available"))
    gpu_info = gpus()
    extra: dict[str, Any] = {  # Fingerprint allows extra fields: kept with every trial
        "usable_cpus": len(usable_cpus()),
        "memory_gib": memory_gib(),
        "machine": platform.machine(),
        "energy_by_backend": {name: bool(probes[name].get("energy")) for name in available},
        "unavailable_backends": {
            name: str(probe.get("reason", "")) for name, probe in probes.items() if not probe.get("available")
        },
        **gpu_info,
        **(gpu_identity(gpu) if gpu is not None else {}),
        **({"isolation_detail": isolation} if isolation else {}),
        **({"sandbox_limits": limits} if limits else {}),
        # whether its GPU backends run on a GPU (false: they build compile-only trials only)
        "gpu": any(bool(probes[name].get("gpu")) for name in available) or bool(gpu_info.get("gpu_count")),
        **({"toolchain": {"package": toolchain.package, "version": toolchain.version,
                          "release": toolchain.release, "ptxas": toolchain.version}} if toolchain else {}),
    }
    limits = next((probes[name]["device_limits"] for name in available if probes[name].get("device_limits")), None)
    return Fingerprint(
        device_limits=limits,
        hostname=socket.gethostname(),
        os=platform.platform(),
        python=platform.python_version(),
        cpu_model=cpu_model(),
        cpu_count=os.cpu_count() or 0,
        compilers=compilers,
        backends=available,
        energy=any(probes[name].get("energy") for name in available),
        paretune=paretune_version(),
        isolation=(isolation or {}).get("level", "none"),
        **extra,
    )

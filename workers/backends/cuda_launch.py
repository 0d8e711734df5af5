"""Loading a CUDA kernel's cubin and launching it through cuda.core on torch's stream:
cuda.core's names (1.x or 0.x), torch's streams as cuda.core sees them, a loaded kernel's
attributes, the refusal of a loaded kernel over the device's limits, and what a refused
launch means.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

from wire.contract import FailureReason
from wire.failures import TrialFailure
from wire.kernels.resources import ResourceUse
from wire.options import CUDA_PROGRAM_OPTIONS, split_config
from workers.backends.gpu_loader import refuse_compiled
from workers.measure.gpu_limits import local_device_limits


def cuda_core() -> ModuleType:
    """cuda.core's public names (1.x at the top level, 0.x under `experimental`)."""
    import cuda.core as core

    if hasattr(core, "Program"):
        return core
    import cuda.core.experimental as experimental

    return experimental


class TorchStreams:
    """cuda.core views of torch's current stream (the capture stream inside graph capture),
    one per stream handle, so that kernels launch in torch's stream order."""

    def __init__(self, core: ModuleType) -> None:
        self._core = core
        self._streams: dict[int, Any] = {}

    def current(self) -> Any:
        import torch

        handle = int(torch.cuda.current_stream().cuda_stream)
        stream = self._streams.get(handle)
        if stream is None:
            try:
                stream = self._core.Stream.from_handle(handle)
            except Exception:  # older cuda.core: hand it the stream protocol instead
                stream = _StreamProtocol(handle)
            self._streams[handle] = stream
        return stream


class _StreamProtocol:
    def __init__(self, handle: int) -> None:
        self.handle = handle

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)


def load_kernel(core: ModuleType, path: Path, entry: str) -> Any:
    try:
        return core.ObjectCode.from_cubin(path.read_bytes()).get_kernel(entry)
    except FileNotFoundError as exc:
        raise TrialFailure(FailureReason.ERROR, f"compiled cubin missing: {path}") from exc
    except Exception as exc:
        raise TrialFailure(
            FailureReason.COMPILE_ERROR, f"cannot load {path.name}: {type(exc).__name__}: {exc}"
        ) from exc


def kernel_attributes(handle: Any) -> dict[str, Any]:
    info: dict[str, Any] = {}
    try:
        attributes = handle.attributes
        for name in (
            "num_regs",
            "shared_size_bytes",
            "local_size_bytes",
            "max_threads_per_block",
            "binary_version",
        ):
            value = getattr(attributes, name)
            info[name] = value() if callable(value) else value
    except Exception as exc:
        info["error"] = f"{type(exc).__name__}: {exc}"
    return info


def launch_failure_reason(exc: Exception) -> FailureReason:
    """Resources over the device's limits: infeasible; another refusal of the launch (an
    invalid geometry): a compile error; anything else: a crash."""
    text = str(exc).upper()
    if "OUT_OF_RESOURCES" in text or "TOO MANY RESOURCES" in text:
        return FailureReason.INFEASIBLE
    return FailureReason.COMPILE_ERROR if "INVALID_VALUE" in text else FailureReason.CRASH


def refuse_loaded(handle: Any, harness: ModuleType, config: dict[str, Any], dims: dict[str, int]) -> None:
    """A loaded kernel over this device's limits (its registers times the block's threads,
    its static plus the launch's dynamic shared memory) is failed before it is launched."""
    attributes = kernel_attributes(handle)
    if "error" in attributes:
        return
    _, params = split_config(config, CUDA_PROGRAM_OPTIONS)
    try:
        _, block, dynamic = harness.launch_geometry(dims, params)
    except ValueError as exc:
        raise TrialFailure(FailureReason.ERROR, f"workload shape {dims}: {exc}") from exc
    threads = 1
    for extent in block:
        threads *= int(extent)
    use = ResourceUse(shared_bytes=int(attributes.get("shared_size_bytes") or 0) + int(dynamic or 0),
                      threads=threads, registers_per_thread=int(attributes.get("num_regs") or 0) or None)
    refuse_compiled(use, local_device_limits(), "from the loaded kernel")

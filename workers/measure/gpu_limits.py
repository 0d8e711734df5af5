"""The launch limits of this worker's GPU, read from the device (torch), else looked up by its
compute capability; reported in the worker's fingerprint and checked before compiling."""

from __future__ import annotations

import functools
from typing import Any

from wire.contract import DeviceLimits
from wire.kernels.resources import limits_for


def limits_from_properties(major: int, minor: int, properties: Any) -> DeviceLimits | None:
    """DeviceLimits from torch's device properties; the table fills what this torch lacks."""
    capability = f"{major}.{minor}"
    known = limits_for(capability)
    values: dict[str, Any] = known.model_dump() if known else {"compute_capability": capability}
    for field, attribute in (("shared_memory_per_block", "shared_memory_per_block_optin"),
                             ("threads_per_block", "max_threads_per_block"),
                             ("registers_per_block", "regs_per_multiprocessor")):
        value = getattr(properties, attribute, None)
        if isinstance(value, int) and value > 0:
            # an SM's registers bound a block's; no sm_70+ block may use more than 64 K
            values[field] = min(value, 65536) if field == "registers_per_block" else value
    if "shared_memory_per_block" not in values:
        return None
    return DeviceLimits.model_validate(values)


@functools.cache
def local_device_limits() -> DeviceLimits | None:
    """The limits of the current CUDA device; None without one (or without torch)."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    device = torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(device)
    return limits_from_properties(major, minor, torch.cuda.get_device_properties(device))

"""NVML beside a measurement: a sampler thread that polls the GPU's total-energy counter as
fast as NVML answers and the card's state (SM clock, temperature, power, throttle reasons)
every `detail_s`; what a set of those readings says about the card's state; and the NVML
handle of the GPU torch uses. The energy arithmetic over the readings is
workers.measure.gpu_energy's.

Everything above the `NvmlSampler` class is pure and tested on the CPU.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

# NVML clock-event ("throttle") reason bits, from nvml.h.
THROTTLE_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def decode_throttle_reasons(mask: int) -> list[str]:
    """Names of the reasons set in an NVML clock-event bit mask; unknown bits by value."""
    names = [name for bit, name in THROTTLE_REASONS.items() if mask & bit]
    unknown = mask & ~sum(THROTTLE_REASONS)
    if unknown:
        names.append(f"unknown_0x{unknown:x}")
    return names


@dataclass(frozen=True)
class Reading:
    """One poll of the sampler: host time (perf_counter seconds) and what NVML said."""

    t: float
    energy_mj: float
    sm_clock_mhz: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None  # nvmlDeviceGetPowerUsage: a 1 s mean on Hopper and later
    throttle_mask: int | None = None
    power_instant_w: float | None = None  # NVML_FI_DEV_POWER_INSTANT, where the driver has it


def readings_between(readings: Sequence[Reading], start: float, end: float) -> list[Reading]:
    return [r for r in readings if start <= r.t <= end]


def environment_summary(readings: Sequence[Reading]) -> dict[str, Any]:
    """SM clock, temperature, power and throttle reasons seen during a sample set."""
    clocks = sorted(r.sm_clock_mhz for r in readings if r.sm_clock_mhz is not None)
    temps = [r.temperature_c for r in readings if r.temperature_c is not None]
    powers = [r.power_w for r in readings if r.power_w is not None]
    instants = [r.power_instant_w for r in readings if r.power_instant_w is not None]
    mask = 0
    for reading in readings:
        if reading.throttle_mask is not None:
            mask |= reading.throttle_mask
    summary: dict[str, Any] = {"readings": len(readings)}
    if clocks:
        summary["sm_clock_mhz"] = {
            "min": clocks[0],
            "median": clocks[len(clocks) // 2],
            "max": clocks[-1],
        }
    if temps:
        summary["temperature_c"] = {"start": temps[0], "end": temps[-1], "max": max(temps)}
    if powers:
        summary["power_w_instant"] = {"min": min(powers), "max": max(powers)}  # the reading's name
        summary["power_w_nvml_end"] = powers[-1]  # a 1 s mean on Hopper: the window's last second
    if instants:
        summary["power_w_field_instant"] = {"min": min(instants), "max": max(instants)}
    summary["throttle_reasons"] = decode_throttle_reasons(mask)
    return summary


class NvmlSampler:
    """Polls the energy counter (every loop) and clocks/temperature (every `detail_s`).

    Runs in a daemon thread so that the measuring thread never waits on NVML; NVML calls
    release the GIL inside ctypes, and the measuring thread spends the window blocked in a
    device synchronize.
    """

    def __init__(
        self,
        device_handle: Any,
        detail_s: float = 0.02,
        nvml: Any | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if nvml is None:  # a stand-in (a simulated device) may be given instead
            import pynvml

            nvml = pynvml
        self._nvml: Any = nvml
        self._clock = clock
        self._instant_field: int | None = getattr(nvml, "NVML_FI_DEV_POWER_INSTANT", None)
        self._handle = device_handle
        self._detail_s = detail_s
        self._readings: list[Reading] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None

    def __enter__(self) -> NvmlSampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="nvml-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def readings(self) -> list[Reading]:
        return list(self._readings)

    def _run(self) -> None:
        nvml, handle = self._nvml, self._handle
        last_detail = 0.0
        try:
            while not self._stop.is_set():
                energy = float(nvml.nvmlDeviceGetTotalEnergyConsumption(handle))
                now = self._clock()
                if now - last_detail >= self._detail_s:
                    last_detail = now
                    self._readings.append(Reading(t=now, energy_mj=energy, **self._details()))
                else:
                    self._readings.append(Reading(t=now, energy_mj=energy))
        except Exception as exc:  # recorded and reported with the measurement
            self.error = f"{type(exc).__name__}: {exc}"

    def _details(self) -> dict[str, Any]:
        nvml, handle = self._nvml, self._handle
        reasons = (
            getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        temperature = nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)
        return {
            "sm_clock_mhz": float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
            "temperature_c": float(temperature),
            "power_w": nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
            "throttle_mask": int(reasons(handle)),
            "power_instant_w": self._instant_power_w(),
        }

    def _instant_power_w(self) -> float | None:
        """NVML_FI_DEV_POWER_INSTANT in W, or None (and never asked again) where unanswered."""
        if self._instant_field is None:
            return None
        try:
            (value,) = self._nvml.nvmlDeviceGetFieldValues(self._handle, [self._instant_field])
            if value.nvmlReturn != 0:
                raise ValueError(f"NVML return {value.nvmlReturn}")
            return float(value.value.uiVal) / 1000.0
        except Exception:
            self._instant_field = None
            return None


def nvml_energy_readable() -> bool:
    """Whether NVML answers the total-energy counter for this process's first GPU."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(nvml_index(0))
        pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        return True
    except Exception:
        return False


def nvml_handle_for_torch_device(device_index: int = 0) -> Any:
    """The NVML handle of the GPU that torch calls `cuda:<device_index>`.

    CUDA and NVML number GPUs differently once CUDA_VISIBLE_DEVICES is set, so match by UUID.
    """
    import pynvml
    import torch

    pynvml.nvmlInit()
    props = torch.cuda.get_device_properties(device_index)
    uuid = getattr(props, "uuid", None)
    if uuid is not None:
        text = str(uuid)
        for candidate in (text if text.startswith("GPU-") else f"GPU-{text}", text):
            try:
                return pynvml.nvmlDeviceGetHandleByUUID(candidate)
            except pynvml.NVMLError:
                continue
    return pynvml.nvmlDeviceGetHandleByIndex(nvml_index(device_index))


def nvml_index(device_index: int) -> int:
    """NVML numbers every GPU; CUDA only the visible ones, in CUDA_VISIBLE_DEVICES order."""
    import os

    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
    if device_index < len(visible) and visible[device_index].isdigit():
        return int(visible[device_index])
    return device_index

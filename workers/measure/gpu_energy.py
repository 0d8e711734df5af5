"""Energy per call from NVML's total-energy counter, read by a thread beside the hot window.

The counter (mJ since the driver loaded) advances in steps about 100 ms apart, and one NVML
call takes milliseconds, so energy cannot be read around a single kernel call. Instead a
sampler thread polls the counter while the measuring thread keeps the GPU busy with calls
back to back. A *tick* is a reading where the counter moved; its time is the midpoint
between that reading and the one before it (the change happened somewhere in between).
The energy of the busy interval is the counter difference between the first and the last
tick that fall inside it, over the host-clock time between those ticks; dividing by the
calls that ran in that time gives energy per call. Ticks outside the busy interval are never
used, so idle time before or after the window is not charged to the kernel.

Everything above the `NvmlSampler` class is pure and tested on the CPU.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
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
    power_w: float | None = None
    throttle_mask: int | None = None


@dataclass(frozen=True)
class Tick:
    t: float  # estimated host time at which the counter advanced
    energy_mj: float


@dataclass(frozen=True)
class EnergyWindow:
    """Counter difference between the first and last tick inside a busy interval."""

    energy_mj: float
    seconds: float
    t_first: float
    t_last: float
    ticks: int
    interval_power_w: list[float] = field(default_factory=list)  # between consecutive ticks

    @property
    def power_w(self) -> float:
        return self.energy_mj / self.seconds / 1000.0


def ticks_from_readings(readings: Sequence[Reading]) -> list[Tick]:
    """The readings at which the counter moved, timed at the midpoint since the last poll."""
    ticks: list[Tick] = []
    for before, after in zip(readings, readings[1:], strict=False):
        if after.energy_mj != before.energy_mj:
            ticks.append(Tick(t=(before.t + after.t) / 2.0, energy_mj=after.energy_mj))
    return ticks


def energy_window(ticks: Sequence[Tick], busy_start: float, busy_end: float) -> EnergyWindow | None:
    """Energy between the first and last tick strictly inside [busy_start, busy_end].

    Returns None when fewer than two ticks fall inside: the window was too short for the
    counter's update period, and no honest number can be given.
    """
    inside = [tick for tick in ticks if busy_start < tick.t < busy_end]
    if len(inside) < 2:
        return None
    first, last = inside[0], inside[-1]
    seconds = last.t - first.t
    if seconds <= 0:
        return None
    powers = [
        (b.energy_mj - a.energy_mj) / (b.t - a.t) / 1000.0
        for a, b in zip(inside, inside[1:], strict=False)
        if b.t > a.t
    ]
    return EnergyWindow(
        energy_mj=last.energy_mj - first.energy_mj,
        seconds=seconds,
        t_first=first.t,
        t_last=last.t,
        ticks=len(inside),
        interval_power_w=powers,
    )


def calls_between(
    busy_start: float, replay_ms: Sequence[float], calls_per_replay: int, t0: float, t1: float
) -> float:
    """How many calls ran between host times t0 and t1, from the replays' GPU durations.

    Replays run back to back from `busy_start` (the device was idle when the first was
    enqueued), so replay i ends `sum(replay_ms[:i + 1])` after it; a replay that straddles t0
    or t1 counts for the part of it inside, its calls taken as evenly spread."""
    calls = 0.0
    start = busy_start
    for ms in replay_ms:
        end = start + ms / 1000.0
        if end > start:
            overlap = min(end, t1) - max(start, t0)
            if overlap > 0:
                calls += calls_per_replay * overlap / (end - start)
        start = end
    return calls


def energy_per_call_mj(window: EnergyWindow, seconds_per_call: float) -> float:
    """Window energy over the calls that ran between its ticks, at the mean call time of
    the whole hot run (when the calls between the ticks were not counted)."""
    if seconds_per_call <= 0:
        raise ValueError("seconds_per_call must be positive")
    calls = window.seconds / seconds_per_call
    return window.energy_mj / calls


def readings_between(readings: Sequence[Reading], start: float, end: float) -> list[Reading]:
    return [r for r in readings if start <= r.t <= end]


def environment_summary(readings: Sequence[Reading]) -> dict[str, Any]:
    """SM clock, temperature, power and throttle reasons seen during a sample set."""
    clocks = sorted(r.sm_clock_mhz for r in readings if r.sm_clock_mhz is not None)
    temps = [r.temperature_c for r in readings if r.temperature_c is not None]
    powers = [r.power_w for r in readings if r.power_w is not None]
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
        summary["power_w_instant"] = {"min": min(powers), "max": max(powers)}
    summary["throttle_reasons"] = decode_throttle_reasons(mask)
    return summary


class NvmlSampler:
    """Polls the energy counter (every loop) and clocks/temperature (every `detail_s`).

    Runs in a daemon thread so that the measuring thread never waits on NVML; NVML calls
    release the GIL inside ctypes, and the measuring thread spends the window blocked in a
    device synchronize.
    """

    def __init__(self, device_handle: Any, detail_s: float = 0.02) -> None:
        import pynvml

        self._nvml = pynvml
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
                now = time.perf_counter()
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
        }


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

"""CPU package energy from Intel/AMD RAPL counters exposed by the powercap driver.

Each top-level zone /sys/class/powercap/intel-rapl:N is one CPU package; its energy_uj
counter wraps at max_energy_range_uj. Sub-zones (intel-rapl:N:M: core, uncore, dram) are
already included in the package and are not summed. On most distributions energy_uj is
readable by root only; a worker that cannot read it reports energy unavailable, never a guess.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

POWERCAP_ROOT = Path("/sys/class/powercap")
_PACKAGE_ZONE = re.compile(r"^intel-rapl:\d+$")


@dataclass(frozen=True)
class RaplZone:
    path: Path
    name: str
    max_range_uj: int

    def read_uj(self) -> int:
        return int((self.path / "energy_uj").read_text().strip())


def package_zones(root: Path = POWERCAP_ROOT) -> list[RaplZone]:
    """Readable package zones; empty when RAPL is absent or not readable by this user."""
    zones: list[RaplZone] = []
    if not root.is_dir():
        return zones
    for entry in sorted(root.iterdir()):
        if not _PACKAGE_ZONE.match(entry.name):
            continue
        try:
            max_range = int((entry / "max_energy_range_uj").read_text().strip())
            name = (entry / "name").read_text().strip() if (entry / "name").exists() else ""
            zone = RaplZone(entry, name or entry.name, max_range)
            zone.read_uj()
        except (OSError, ValueError):
            continue
        zones.append(zone)
    return zones


def available(root: Path = POWERCAP_ROOT) -> bool:
    return bool(package_zones(root))


class EnergyMeter:
    """Reads the summed package energy; `joules_between` handles counter wrap-around."""

    def __init__(self, root: Path = POWERCAP_ROOT) -> None:
        self.zones = package_zones(root)
        if not self.zones:
            raise RuntimeError(f"no readable RAPL package zone under {root}")

    def read(self) -> tuple[float, list[int]]:
        """(monotonic time in seconds, raw counter per zone)."""
        return time.perf_counter(), [zone.read_uj() for zone in self.zones]

    def joules_between(self, start: list[int], end: list[int]) -> float:
        total_uj = 0
        for zone, before, after in zip(self.zones, start, end, strict=True):
            delta = after - before
            if delta < 0:  # the counter wrapped once (windows here are far shorter than a wrap)
                delta += zone.max_range_uj
            total_uj += delta
        return total_uj / 1e6

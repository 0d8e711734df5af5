"""The interface every backend (cpu, python, triton, cuda) implements.

A backend's methods run inside the trial sandbox (a subprocess of the worker agent), never
in the agent itself, so a crash or a hang in user code cannot take the agent down.
`compile` runs on spare CPU cores (possibly while another trial measures on the device);
`check` and `measure` own the device exclusively.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wire.contract import KernelSpec, Metric


@dataclass
class CompiledKernel:
    """What `compile` leaves in its work directory for `check` and `measure` to load."""

    directory: Path
    files: dict[str, str] = field(default_factory=dict)  # role -> file name inside directory
    report: dict[str, Any] = field(default_factory=dict)  # registers, spills, smem, flags, ...
    log: str = ""


@dataclass
class CheckOutcome:
    passed: bool
    details: dict[str, Any] = field(default_factory=dict)  # max_abs_err, rel_err, tolerance


class Backend(ABC):
    name: str
    # Whether trials run in a warm runner (one sandbox process serving trial after trial)
    # unless the worker is told otherwise: worth it where a process start costs seconds.
    warm_by_default: bool = False

    def warm_up(self, phase: str) -> None:
        """Prepare, once per warm runner process, what every trial of `phase` (`compile` or
        `run`) would otherwise pay for (imports, a device context, library handles). Runs in
        the sandbox, never the agent."""
        return None

    @abstractmethod
    def probe(self) -> dict[str, Any]:
        """What this machine offers the backend: {'available': bool, 'reason': str,
        'compilers': {...}, 'energy': bool}. Cheap; called once at worker start."""

    @abstractmethod
    def cache_key(self, kernel: KernelSpec, config: dict[str, Any], compile_only: bool = False) -> str:
        """Identity of a compiled artifact: source hash, configuration, compiler version."""

    @abstractmethod
    def compile(self, kernel: KernelSpec, config: dict[str, Any], workdir: Path,
                compile_only: bool = False) -> CompiledKernel:
        """Build the kernel under `config` into `workdir`; raise TrialFailure(COMPILE_ERROR).
        `compile_only`: the trial's objectives are compile metrics (wire.contract
        COMPILE_METRICS): build for the kernel's target without a device and put them in
        the report's `metrics` (backends that cannot ignore it: the service sends such
        trials only to backends that can)."""

    @abstractmethod
    def check(self, kernel: KernelSpec, config: dict[str, Any], built: CompiledKernel) -> CheckOutcome:
        """Run on fresh random inputs and compare with a reference."""

    @abstractmethod
    def measure(
        self,
        kernel: KernelSpec,
        config: dict[str, Any],
        built: CompiledKernel,
        objectives: list[str],
        settings: Any,
    ) -> tuple[dict[str, Metric], dict[str, Any]]:
        """Return (metrics by objective name, environment such as clocks and temperature)."""

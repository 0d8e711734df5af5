"""Compiler versions and the features they gate (ptxas reports, Advanced Controls Files).

An NVIDIA Advanced Controls File (ACF) is applied by ptxas's `--apply-controls FILE`, which
ptxas has from CUDA 13.3. A configuration that names an ACF on a worker whose ptxas is older
fails with reason `unsupported` and says which version it found, so the study can route it
to workers that have one. The parsing below is pure and tested on the CPU.
"""

from __future__ import annotations

import re
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from wire.contract import FailureReason
from wire.failures import TrialFailure
from wire.options import NO_ACF

ACF_MIN_PTXAS = (13, 3)

_RELEASE = re.compile(r"release\s+(\d+)\.(\d+)")
_VERSION = re.compile(r"\bV(\d+)\.(\d+)")


def package_version(package: str) -> str:
    """An installed package's version, or "absent"."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "absent"


def parse_ptxas_version(text: str) -> tuple[int, int] | None:
    """(major, minor) from `ptxas --version` output ("... release 13.0, V13.0.88")."""
    match = _RELEASE.search(text) or _VERSION.search(text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def format_version(version: tuple[int, int] | None) -> str:
    return "unknown" if version is None else f"{version[0]}.{version[1]}"


def supports_acf(version: tuple[int, int] | None) -> bool:
    return version is not None and version >= ACF_MIN_PTXAS


def ptxas_version_of(path: str | Path) -> tuple[int, int] | None:
    try:
        done = subprocess.run(
            [str(path), "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_ptxas_version(done.stdout + done.stderr)


def acf_ptxas_flags(
    acf: Any, options: dict[str, Any], ptxas: tuple[int, int] | None, workdir: Path
) -> list[str]:
    """`--apply-controls PATH` for the configuration's ACF choice, or [] for none.

    The choice names an entry of `options.acf_files` (name -> file text, written into the
    work directory) or a file path on the worker.
    """
    if acf in NO_ACF:
        return []
    if not supports_acf(ptxas):
        raise TrialFailure(
            FailureReason.UNSUPPORTED,
            f"the configuration applies the Advanced Controls File {acf!r}, which needs "
            f"ptxas {format_version(ACF_MIN_PTXAS)} or newer (--apply-controls); this "
            f"worker's ptxas is {format_version(ptxas)}. Run the study on workers with "
            f"CUDA {format_version(ACF_MIN_PTXAS)}+ or drop the acf parameter.",
        )
    files = options.get("acf_files") or {}
    if acf in files:
        path = workdir / "acf" / f"{acf}.acf"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(files[acf])
    else:
        path = Path(str(acf))
        if not path.is_file():
            raise TrialFailure(
                FailureReason.ERROR, f"ACF {acf!r} is neither in options.acf_files nor a file here"
            )
    return ["--apply-controls", str(path)]


_REGS = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_BARRIERS = re.compile(r"used (\d+) barriers")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def parse_ptxas_report(text: str) -> dict[str, int]:
    """Registers, shared memory, stack frame and spills from `ptxas -v` output (the last
    function's, when there are several)."""
    report: dict[str, int] = {}
    for match in _REGS.finditer(text):
        report["registers"] = int(match.group(1))
    for match in _SMEM.finditer(text):
        report["smem_bytes"] = int(match.group(1))
    for match in _BARRIERS.finditer(text):
        report["barriers"] = int(match.group(1))
    for match in _FRAME.finditer(text):
        report["stack_frame_bytes"] = int(match.group(1))
        report["spill_store_bytes"] = int(match.group(2))
        report["spill_load_bytes"] = int(match.group(3))
    return report



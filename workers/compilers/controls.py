"""Compiler controls files (NVIDIA Advanced Controls Files) on a worker: the files a trial's
configuration names, written into its build directory by their sha256, and the compiler
flags that apply them.

A kernel names its controls parameters (KernelSpec.controls: parameter -> compiler and
release); a configuration sets each to the sha256 of a file the trial carries
(TrialSpec.acfs) or to "none". The older form, a configuration key `acf` naming an entry of
the kernel's `options.acf_files`, is applied the same way (workers.measure.gpu_toolchain).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wire.contract import NO_CONTROLS, ControlsFile, FailureReason, KernelSpec
from wire.failures import TrialFailure

DIRECTORY = "controls"  # inside a build: <sha256>.acf
# Where compilers read them: a path that is the same in every phase and job (the sandbox's /tmp
# at the namespaces level), so that a compiler cache keyed by its options (Triton's) finds at
# run time what the compile phase built. Content-addressed, checked before every use.
APPLIED_DIRECTORY = "paretune-controls"


@dataclass(frozen=True)
class Applied:
    """One controls file a configuration applies."""

    parameter: str
    compiler: str  # ptxas | nvcc
    version: str  # the compiler release it is for
    sha256: str
    path: Path

    def flags(self) -> list[str]:
        return ["--apply-controls", str(self.path)]


def write(files: list[ControlsFile], build: Path) -> None:
    """The trial's controls files into `build`/controls, each checked against its sha256."""
    if not files:
        return
    directory = build / DIRECTORY
    directory.mkdir(parents=True, exist_ok=True)
    for file in files:
        try:
            content = base64.b64decode(file.content_base64, validate=True)
        except (binascii.Error, ValueError):
            raise TrialFailure(FailureReason.ERROR, f"the controls file {file.sha256[:12]} is not base64") from None
        if hashlib.sha256(content).hexdigest() != file.sha256:
            raise TrialFailure(FailureReason.ERROR, f"the controls file {file.sha256[:12]} does not match its sha256")
        (directory / f"{file.sha256}.acf").write_bytes(content)


def applied(kernel: KernelSpec, config: dict[str, Any], build: Path) -> list[Applied]:
    """The controls files `config` applies, found in `build` (written there by `write`)."""
    found = []
    for name, parameter in kernel.controls.items():
        value = config.get(name, NO_CONTROLS)
        if value in (NO_CONTROLS, None, ""):
            continue
        path = build / DIRECTORY / f"{value}.acf"
        if not path.is_file():
            raise TrialFailure(
                FailureReason.ERROR,
                f"the configuration applies the controls file {str(value)[:12]} ({name}), "
                "which the trial did not carry",
            )
        found.append(Applied(name, parameter.compiler, parameter.version, str(value), _stable(path, str(value))))
    return found


def _stable(path: Path, sha256: str) -> Path:
    """The file at its phase-independent path, written there (atomically) unless it already
    holds exactly these bytes. The directory is shared by the phases' sandbox users (sticky,
    like /tmp); where another user's file stands in the way, a directory of this user's own."""
    content = path.read_bytes()
    if hashlib.sha256(content).hexdigest() != sha256:
        raise TrialFailure(FailureReason.ERROR, f"the controls file {sha256[:12]} does not match its sha256")
    shared = Path(tempfile.gettempdir()) / APPLIED_DIRECTORY
    try:
        return _place(shared, sha256, content, mode=0o1777)
    except OSError:
        return _place(shared.with_name(f"{APPLIED_DIRECTORY}-{os.getuid()}"), sha256, content, mode=0o700)


def _place(directory: Path, sha256: str, content: bytes, mode: int) -> Path:
    if not directory.is_dir():
        directory.mkdir(exist_ok=True)
        os.chmod(directory, mode)  # whatever the umask
    target = directory / f"{sha256}.acf"
    try:
        if hashlib.sha256(target.read_bytes()).hexdigest() == sha256:
            return target
    except OSError:
        pass
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".acf-")
    with os.fdopen(handle, "wb") as out:
        out.write(content)
    os.chmod(temporary, 0o644)
    os.replace(temporary, target)
    return target


def kernel_parameters(kernel: KernelSpec, config: dict[str, Any]) -> dict[str, Any]:
    """`config` without its controls parameters: what the kernel and its compiler options see."""
    return {k: v for k, v in config.items() if k not in kernel.controls}


def short(value: Any) -> str:
    """How a controls value is shown: the file's first 12 hex digits, or none."""
    text = str(value)
    return text[:12] if len(text) == 64 else text

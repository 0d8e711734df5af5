"""Pinned CUDA toolchains: the registry's `nvidia-cuda-nvcc` at an exact version.

A toolchain is a directory whose bin/ holds ptxas (and nvcc, nvdisasm): the one installed
beside the worker (the `acf` extra's nvidia-cuda-nvcc, site-packages/nvidia/cu13), or one of
those `paretune toolchain install nvidia-cuda-nvcc==X` put under the toolchains directory
(PARETUNE_TOOLCHAINS_DIR, by default ~/.local/share/paretune/toolchains), one per version.
`paretune worker --toolchain 13.3.73` selects one; the worker's trials then compile with its
ptxas (Triton through TRITON_PTXAS_PATH) and report its exact version.

The version that matters for an NVIDIA Advanced Controls File is the compiler's release
(13.3): ptxas applies only ACFs generated for its own release and refuses others ("Invalid
compiler controls file"). The exact version (13.3.73) is recorded with every trial.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from wire.targets import release_of

PACKAGE = "nvidia-cuda-nvcc"
TOOLCHAINS_ENV = "PARETUNE_TOOLCHAINS_DIR"
PTXAS_ENV = "PARETUNE_PTXAS"  # the selected toolchain's ptxas, in a sandbox's environment
_EXACT = re.compile(r"\bV(\d+\.\d+\.\d+)")
_RELEASE = re.compile(r"release\s+(\d+\.\d+)")
_VERSION = re.compile(r"^\d+\.\d+(\.\d+)?$")


class ToolchainError(Exception):
    """A toolchain asked for is not installed or not usable (the message says how to fix it)."""


@dataclass(frozen=True)
class Toolchain:
    root: Path  # holds bin/ptxas
    version: str  # exact, as ptxas reports it: "13.3.73"
    package: str = PACKAGE

    @property
    def ptxas(self) -> Path:
        return self.root / "bin" / "ptxas"

    @property
    def nvcc(self) -> Path | None:
        path = self.root / "bin" / "nvcc"
        return path if path.is_file() else None

    @property
    def release(self) -> str:
        """major.minor: the version an ACF is bound to."""
        return release_of(self.version)

    @property
    def spec(self) -> str:
        return f"{self.package}=={self.version}"

    def describe(self) -> dict[str, str]:
        """What a fingerprint and a trial record of it."""
        described = {"toolchain": self.spec, "ptxas": self.version, "ptxas_path": str(self.ptxas)}
        if self.nvcc is not None:
            described["nvcc"] = self.version
        return described

    def environment(self) -> dict[str, str]:
        """What a sandbox process needs to compile with it."""
        return {PTXAS_ENV: str(self.ptxas), "TRITON_PTXAS_PATH": str(self.ptxas)}


def parse_ptxas_version(text: str) -> str | None:
    """The exact version from `ptxas --version` ("Cuda compilation tools, release 13.3,
    V13.3.73"), or the release alone when no exact one is printed."""
    match = _EXACT.search(text) or _RELEASE.search(text)
    return match.group(1) if match else None


@functools.cache
def ptxas_version(path: str) -> str | None:
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_ptxas_version(done.stdout + done.stderr)


def triton_ptxas_path() -> str | None:
    """The ptxas Triton invokes here: TRITON_PTXAS_PATH, else the one bundled with Triton;
    None without either."""
    path = os.environ.get("TRITON_PTXAS_PATH")
    if path:
        return path
    try:
        import triton
    except ImportError:
        return None
    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    return str(bundled) if bundled.exists() else None


def toolchains_dir() -> Path:
    configured = os.environ.get(TOOLCHAINS_ENV)
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "paretune" / "toolchains"


def of_root(root: Path) -> Toolchain | None:
    """The toolchain in `root` (a directory with bin/ptxas), or None."""
    ptxas = root / "bin" / "ptxas"
    if not ptxas.is_file() or not os.access(ptxas, os.X_OK):
        return None
    version = ptxas_version(str(ptxas))
    return Toolchain(root.resolve(), version) if version else None


def _installed_package_root() -> Path | None:
    """Where this environment's nvidia-cuda-nvcc put its binaries (nvidia/cu13, nvidia/cuda_nvcc)."""
    try:
        files = metadata.files(PACKAGE) or []
    except metadata.PackageNotFoundError:
        return None
    for entry in files:
        if entry.name == "ptxas" and entry.parent.name == "bin":
            return Path(str(entry.locate())).parent.parent
    return None


def _target_root(directory: Path) -> Path | None:
    """The binaries' root inside a `pip install --target` directory of the package."""
    for candidate in sorted(directory.glob("nvidia/*/bin/ptxas")):
        return candidate.parent.parent
    return None


def installed() -> list[Toolchain]:
    """Every toolchain this machine has: the environment's own first, then the toolchains
    directory's, newest first."""
    found: list[Toolchain] = []
    roots = [_installed_package_root()]
    base = toolchains_dir()
    if base.is_dir():
        roots += [_target_root(d) for d in sorted(base.iterdir()) if d.is_dir()]
    for root in roots:
        toolchain = of_root(root) if root is not None else None
        if toolchain is not None and all(t.root != toolchain.root for t in found):
            found.append(toolchain)
    own, rest = found[:1], found[1:]
    return own + sorted(rest, key=lambda t: _key(t.version), reverse=True)


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".") if part.isdigit())


def requested_version(text: str) -> str:
    """The version in "13.3.73", "13.3" or "nvidia-cuda-nvcc==13.3.73"."""
    value = text.strip()
    if value.startswith(f"{PACKAGE}=="):
        value = value[len(PACKAGE) + 2:]
    if not _VERSION.match(value):
        raise ToolchainError(
            f"{text!r} is not a toolchain: give a version (13.3.73, or 13.3 for its newest installed patch), "
            f"{PACKAGE}==VERSION, or a directory holding bin/ptxas"
        )
    return value


def find(requested: str) -> Toolchain:
    """The installed toolchain `requested` names: an exact version, a release (its newest
    installed patch), `nvidia-cuda-nvcc==X`, or a directory holding bin/ptxas."""
    path = Path(requested).expanduser()
    if path.is_dir():
        inner = _target_root(path)
        toolchain = of_root(path) or (of_root(inner) if inner is not None else None)
        if toolchain is None:
            raise ToolchainError(f"{path} holds no runnable bin/ptxas")
        return toolchain
    version = requested_version(requested)
    exact = version.count(".") == 2
    toolchains = installed()
    for toolchain in toolchains:
        if toolchain.version == version or not exact and toolchain.release == version:
            return toolchain
    have = ", ".join(f"{t.version} ({t.root})" for t in toolchains) or "none"
    raise ToolchainError(
        f"no installed toolchain is {PACKAGE} {version} (installed: {have}); install it with "
        f"`paretune toolchain install {PACKAGE}=={version if exact else version + '.*'}`"
    )


def install(requested: str, directory: Path | None = None, python: str | None = None) -> Toolchain:
    """`pip install --target` the package at an exact version into its own directory of the
    toolchains directory (the binaries alone: ptxas needs nothing else)."""
    version = requested_version(requested)
    if version.count(".") != 2:
        raise ToolchainError(f"install an exact version (such as {version}.0), not the release {version}")
    target = (directory or toolchains_dir()) / f"{PACKAGE}-{version}"
    existing = _target_root(target) if target.is_dir() else None
    if existing is not None and (toolchain := of_root(existing)) is not None:
        return toolchain
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    command = [python or sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile",
               "--disable-pip-version-check", "--target", str(partial), f"{PACKAGE}=={version}"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ToolchainError(f"pip could not install {PACKAGE}=={version}: {done.stderr.strip()[-2000:]}")
    if target.exists():
        shutil.rmtree(target)
    partial.rename(target)
    root = _target_root(target)
    toolchain = of_root(root) if root is not None else None
    if toolchain is None:
        raise ToolchainError(f"{PACKAGE}=={version} installed into {target} but holds no runnable ptxas")
    return toolchain


def selected() -> Toolchain | None:
    """The toolchain this process compiles with: the one a worker selected for its sandboxes
    (PARETUNE_PTXAS), else this environment's own; None when neither exists."""
    configured = os.environ.get(PTXAS_ENV)
    if configured:
        path = Path(configured)
        version = ptxas_version(str(path))
        return Toolchain(path.parent.parent, version) if version else None
    toolchains = installed()
    return toolchains[0] if toolchains else None

"""Pinned toolchains: versions read from ptxas itself, found by exact version, release or
directory, and a clear error naming what is installed."""

from __future__ import annotations

from pathlib import Path

import pytest

from wire.targets import release_of
from workers.compilers import toolchains


def fake_toolchain(root: Path, version: str) -> Path:
    """A directory whose bin/ptxas prints `version` as ptxas does."""
    major, minor, patch = version.split(".")
    (root / "bin").mkdir(parents=True)
    ptxas = root / "bin" / "ptxas"
    ptxas.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {major}.{minor}, V{version}'\n")
    ptxas.chmod(0o755)
    return root


def test_versions_from_ptxas_output() -> None:
    assert toolchains.parse_ptxas_version("Cuda compilation tools, release 13.3, V13.3.73") == "13.3.73"
    assert toolchains.parse_ptxas_version("release 12.8") == "12.8"
    assert toolchains.parse_ptxas_version("nothing") is None
    assert release_of("13.3.73") == "13.3"


def test_found_by_version_release_or_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(toolchains.TOOLCHAINS_ENV, str(tmp_path))
    for version in ("13.9.1", "13.9.4", "14.0.2"):
        fake_toolchain(tmp_path / f"nvidia-cuda-nvcc-{version}" / "nvidia" / "cu13", version)
    assert toolchains.find("13.9.1").version == "13.9.1"
    assert toolchains.find("nvidia-cuda-nvcc==14.0.2").version == "14.0.2"
    assert toolchains.find("13.9").version == "13.9.4"  # a release: its newest patch
    assert toolchains.find(str(tmp_path / "nvidia-cuda-nvcc-13.9.1")).version == "13.9.1"
    chosen = toolchains.find("13.9.4")
    assert chosen.environment() == {"PARETUNE_PTXAS": str(chosen.ptxas), "TRITON_PTXAS_PATH": str(chosen.ptxas)}
    with pytest.raises(toolchains.ToolchainError) as missing:
        toolchains.find("12.1.0")
    message = str(missing.value)
    assert "13.9.4" in message and "paretune toolchain install nvidia-cuda-nvcc==12.1.0" in message
    with pytest.raises(toolchains.ToolchainError):
        toolchains.find("thirteen")


def test_the_selected_ptxas_is_the_sandboxes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_toolchain(tmp_path / "tc", "13.9.7")
    monkeypatch.setenv(toolchains.PTXAS_ENV, str(fake / "bin" / "ptxas"))
    selected = toolchains.selected()
    assert selected is not None and selected.version == "13.9.7" and selected.release == "13.9"

"""The cpu stand-in of a third-party kernel library (tests/minikern, shaped like Liger-Kernel),
installed with pip the way a worker's operator installs a library, into a directory of its own
that goes on the agent's PYTHONPATH (the sandbox mounts and imports such directories)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent / "minikern"


def install_minikern(directory: Path) -> Path:
    """pip install --target `directory`; returns it."""
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "--target", str(directory), str(PACKAGE)], check=True, capture_output=True)
    return directory


def use_site(monkeypatch: pytest.MonkeyPatch, site: Path) -> None:
    """`site` on this process's path and on the PYTHONPATH its workers and sandboxes inherit.
    minikern modules an earlier test imported from another site are forgotten first, so that the
    package resolves from this one."""
    for name in [name for name in sys.modules if name == "minikern" or name.startswith("minikern.")]:
        del sys.modules[name]
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p))

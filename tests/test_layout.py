"""The tree keeps its boundaries: the control plane loads no worker code, the wire package
imports neither side, the workers never import the service, and worker modules stay of
readable size."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# The command line is the one program of both sides: `paretune worker`, `paretune artifact
# flags` and `paretune toolchain` run worker code in the user's process, never in the service.
CLI_MODULES = {"service/cli.py", "service/artifacts/cli.py", "service/controls/cli.py"}
MAX_WORKER_MODULE_LINES = 420


def imports_of(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def top(name: str) -> str:
    return name.partition(".")[0]


def sources(package: str) -> list[Path]:
    return sorted((REPO / package).rglob("*.py"))


def test_the_control_plane_loads_no_worker_module() -> None:
    loaded = subprocess.run(
        [sys.executable, "-c",
         "import sys, service.app; print(sorted(m for m in sys.modules if m.split('.')[0] == 'workers'))"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.strip()
    assert loaded == "[]"


@pytest.mark.parametrize("package, forbidden", [("wire", {"service", "workers"}), ("workers", {"service"})])
def test_imports_stay_on_their_side(package: str, forbidden: set[str]) -> None:
    crossing = {f"{path.relative_to(REPO)}: {name}" for path in sources(package)
                for name in imports_of(path) if top(name) in forbidden}
    assert not crossing


def test_only_the_command_line_of_the_service_imports_worker_code() -> None:
    crossing = {f"{path.relative_to(REPO)}: {name}" for path in sources("service")
                if str(path.relative_to(REPO)) not in CLI_MODULES
                for name in imports_of(path) if top(name) == "workers"}
    assert not crossing


def test_no_worker_module_is_over_420_lines() -> None:
    lines = {str(path.relative_to(REPO)): len(path.read_text().splitlines()) for path in sources("workers")}
    long = {name: count for name, count in lines.items() if count > MAX_WORKER_MODULE_LINES}
    assert not long, f"split these along their seams: {long}"
    assert any(name.count("/") > 1 for name in lines)  # subpackages are scanned too

"""setuptools commands that ship the top-level migrations/ folder inside the package.

The repository keeps Alembic's scripts at the top level (development runs them from there);
an installed wheel has no repository, so the wheel carries a copy at
service/store/migrations/, where service.store.migrate looks first. pyproject.toml names
these classes under [tool.setuptools.cmdclass].
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

ROOT = Path(__file__).resolve().parents[1]
PACKAGED = Path("service", "store", "migrations")  # inside the built package tree
SHIPPED_SUFFIXES = (".py", ".mako")


def migration_files(root: Path = ROOT) -> list[Path]:
    """The migration scripts, relative to `root`; fails loudly rather than build a wheel
    whose control plane cannot create its schema."""
    source = root / "migrations"
    files = sorted(
        p.relative_to(root) for p in source.rglob("*")
        if p.is_file() and p.suffix in SHIPPED_SUFFIXES and "__pycache__" not in p.parts
    )
    if not any(p.name == "env.py" for p in files):
        raise RuntimeError(f"no Alembic environment at {source}: build from a complete source tree")
    return files


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install runs the repository's migrations/ in place
        target = Path(self.build_lib) / PACKAGED
        for relative in migration_files():
            destination = target / relative.relative_to("migrations")
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / relative, destination)


class Sdist(sdist):
    """The source distribution carries migrations/ and this file, so that a wheel built
    from it (what `python -m build` does) ships the migrations too."""

    def make_distribution(self) -> None:
        extra = [str(p) for p in migration_files()] + [str(Path(__file__).relative_to(ROOT))]
        self.filelist.extend(extra)
        super().make_distribution()

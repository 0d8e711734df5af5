"""The operator's CompileIQ search-space catalog: a directory in CompileIQ's air-gapped
mirror layout (manifest.json and the binaries it lists), set with PARETUNE_CONTROLS_CATALOG
(or CompileIQ's own CIQ_SEARCH_SPACES_DIR), a setting of service.config. The service reads it
and never downloads: an entry is usable when its file is there with the manifest's size and
sha256. The files are under NVIDIA's licence, the operator's to provide; nothing of them goes
into a study, an artifact or a response but their identity (compiler, version, variant, sha256).
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

MANIFEST = "manifest.json"
ENV = "PARETUNE_CONTROLS_CATALOG"


class _Entry(BaseModel):
    model_config = ConfigDict(extra="ignore")

    compiler: str
    compiler_version: str
    variant: str = "default"
    filename: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size_bytes: int = Field(gt=0)
    description: str | None = None


class _Manifest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    tag: str = ""
    entries: list[_Entry]


@dataclass(frozen=True)
class SearchSpace:
    """One search space of the catalog."""

    compiler: str
    version: str
    variant: str
    sha256: str
    size_bytes: int
    description: str
    path: Path
    problem: str | None  # why it cannot be used (file missing, wrong size or hash); None: usable

    def describe(self) -> dict[str, Any]:
        return {"compiler": self.compiler, "version": self.version, "variant": self.variant, "sha256": self.sha256,
                "size_bytes": self.size_bytes, "description": self.description, "usable": self.problem is None,
                "problem": self.problem}


class CatalogError(LookupError):
    """What the catalog lacks, and what it has."""


class ControlsCatalog:
    """The catalog directory's entries, read again when its manifest changes."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self._lock = threading.Lock()
        self._seen: tuple[float, int] | None = None
        self._entries: list[SearchSpace] = []
        self.problem: str | None = None  # why the catalog cannot be read at all

    def entries(self) -> list[SearchSpace]:
        if self.directory is None:
            self.problem = f"no catalog is configured: set {ENV} to a CompileIQ search-space mirror directory"
            return []
        manifest = self.directory / MANIFEST
        try:
            stat = manifest.stat()
        except OSError as exc:
            self.problem = f"{manifest} cannot be read: {exc.strerror}"
            return []
        with self._lock:
            if self._seen != (stat.st_mtime, stat.st_size):
                self._entries, self.problem = _read(self.directory, manifest)
                self._seen = (stat.st_mtime, stat.st_size)
            return list(self._entries)

    def find(self, compiler: str, version: str, variant: str = "default") -> SearchSpace:
        """The usable search space of (compiler, version, variant); CatalogError names what there is."""
        entries = self.entries()
        for entry in entries:
            if (entry.compiler, entry.version, entry.variant) == (compiler, version, variant):
                if entry.problem:
                    raise CatalogError(f"the catalog's {compiler} {version} ({variant}) cannot be used: "
                                       f"{entry.problem}")
                return entry
        have = ", ".join(f"{e.compiler} {e.version} ({e.variant})" for e in entries if e.problem is None)
        raise CatalogError(f"the search-space catalog has no {compiler} {version} ({variant}); it has: "
                           f"{have or 'nothing usable'}" + (f" ({self.problem})" if self.problem else ""))


def _read(directory: Path, manifest: Path) -> tuple[list[SearchSpace], str | None]:
    try:
        parsed = _Manifest.model_validate(json.loads(manifest.read_bytes()))
    except (OSError, ValueError, ValidationError) as exc:
        return [], f"{manifest} is not a CompileIQ search-space manifest: {exc}"
    return [_entry(directory, entry) for entry in parsed.entries], None


def _entry(directory: Path, entry: _Entry) -> SearchSpace:
    path = directory / entry.filename
    problem = None
    try:
        content = path.read_bytes()
    except OSError as exc:
        problem = f"{entry.filename} cannot be read ({exc.strerror})"
    else:
        if len(content) != entry.size_bytes:
            problem = f"{entry.filename} is {len(content)} bytes, the manifest says {entry.size_bytes}"
        elif hashlib.sha256(content).hexdigest() != entry.sha256:
            problem = f"{entry.filename} does not match the manifest's sha256"
    return SearchSpace(entry.compiler, entry.compiler_version, entry.variant, entry.sha256, entry.size_bytes,
                       entry.description or "", path, problem)

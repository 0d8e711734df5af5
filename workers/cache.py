"""On-disk cache of compiled artifacts, keyed by Backend.cache_key (source hash,
configuration, compiler version).

An entry is a directory <root>/<key[:2]>/<key>/ holding the backend's files and
`artifact.json` (files, report, log). It is built in a staging directory and renamed into
place, so a reader never sees half an artifact and two workers sharing the directory may
build the same key at once: the first rename wins, the other copy is dropped.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

from workers.backends.base import CompiledKernel

META = "artifact.json"
_SAFE_KEY = re.compile(r"^[A-Za-z0-9_.-]{8,128}$")


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "paretune"


class ArtifactCache:
    def __init__(self, root: Path) -> None:
        self.root = Path(root).absolute()  # sandboxes run in other working directories
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "staging").mkdir(exist_ok=True)

    def path_for(self, key: str) -> Path:
        if not _SAFE_KEY.match(key):
            raise ValueError(f"cache key {key!r} is not a safe file name (use a hex digest)")
        return self.root / key[:2] / key

    def lookup(self, key: str) -> CompiledKernel | None:
        directory = self.path_for(key)
        try:
            meta = json.loads((directory / META).read_text())
        except (OSError, ValueError):
            return None
        if not all((directory / name).exists() for name in meta.get("files", {}).values()):
            return None
        os.utime(directory)  # recently used: kept longest by prune()
        return CompiledKernel(
            directory, meta.get("files", {}), meta.get("report", {}), meta.get("log", "")
        )

    def staging(self) -> Path:
        """A fresh empty directory to build into; pass it to `commit` or `discard`."""
        return Path(tempfile.mkdtemp(prefix="build-", dir=self.root / "staging"))

    def commit(self, key: str, built: CompiledKernel) -> CompiledKernel:
        """Move a build from its staging directory into the cache; returns it at its new place."""
        meta = {
            "files": built.files,
            "report": built.report,
            "log": built.log,
            "created": time.time(),
        }
        (built.directory / META).write_text(json.dumps(meta, default=str))
        final = self.path_for(key)
        final.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(built.directory, final)
        except OSError:  # someone else committed the same key first
            self.discard(built.directory)
            existing = self.lookup(key)
            if existing is not None:
                return existing
            raise
        return CompiledKernel(final, built.files, built.report, built.log)

    def discard(self, staging: Path) -> None:
        shutil.rmtree(staging, ignore_errors=True)

    def entries(self) -> list[Path]:
        return [p for p in self.root.glob("??/*") if (p / META).exists()]

    def size_bytes(self) -> int:
        return sum(f.stat().st_size for e in self.entries() for f in e.iterdir() if f.is_file())

    def prune(self, max_bytes: int) -> int:
        """Remove least recently used entries until the cache fits; returns entries removed."""
        entries = sorted(self.entries(), key=lambda p: p.stat().st_mtime)
        sizes = {e: sum(f.stat().st_size for f in e.iterdir() if f.is_file()) for e in entries}
        total, removed = sum(sizes.values()), 0
        for entry in entries:
            if total <= max_bytes:
                break
            shutil.rmtree(entry, ignore_errors=True)
            total -= sizes[entry]
            removed += 1
        return removed

"""Advanced Controls Files by sha256: the bytes a lease carries for a configuration that names
them. Content-addressed, so every process may keep what it has read."""

from __future__ import annotations

import base64
import threading
from typing import Any

from cachetools import LRUCache
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.store.models import ControlsFile
from wire import contract as wire


def named(controls: dict[str, Any], configs: list[dict[str, Any]]) -> list[str]:
    """The sha256s of the files `configs` name through the kernel's controls parameters."""
    return sorted({str(config[name]) for config in configs for name in controls
                   if config.get(name, wire.NO_CONTROLS) not in (wire.NO_CONTROLS, None, "")})


def read(session: Session, shas: list[str]) -> list[wire.ControlsFile]:
    rows = session.execute(select(ControlsFile.sha256, ControlsFile.content)
                           .where(ControlsFile.sha256.in_(shas))).all()
    return [wire.ControlsFile(sha256=sha, content_base64=base64.b64encode(content).decode("ascii"))
            for sha, content in sorted(rows)]


class ControlsFiles:
    """A per-process cache of the wire form of controls files, least recently used out."""

    def __init__(self, capacity: int = 2048) -> None:
        self._files: LRUCache[str, wire.ControlsFile] = LRUCache(maxsize=capacity)
        self._lock = threading.Lock()  # cachetools' caches are not thread-safe

    def for_config(self, session: Session, controls: dict[str, Any], config: dict[str, Any]) -> list[wire.ControlsFile]:
        """The files `config` names through the kernel's controls parameters."""
        wanted = named(controls, [config])
        if not wanted:
            return []
        with self._lock:
            found = {sha: file for sha in wanted if (file := self._files.get(sha)) is not None}
        missing = [sha for sha in wanted if sha not in found]
        if missing:
            files = read(session, missing)
            with self._lock:
                for file in files:
                    found[file.sha256] = self._files[file.sha256] = file
        return [found[sha] for sha in wanted if sha in found]

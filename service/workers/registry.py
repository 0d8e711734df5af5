"""Registered workers as the lease queue sees them. A worker's identity (its token, pool,
backends, energy counter, fingerprint, kinds of work) never changes after registration, so each replica
keeps what it has read; only `last_seen_at` is written, at most every LAST_SEEN_EVERY_S."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from cachetools import LRUCache, TTLCache
from sqlalchemy import update
from sqlalchemy.orm import Session

from service.store.models import Worker, utcnow
from wire.contract import DEFAULT_KINDS

LAST_SEEN_EVERY_S = 10.0


@dataclass(frozen=True)
class WorkerInfo:
    id: int
    token_id: int
    pool: str
    backends: tuple[str, ...]
    energy: bool
    fingerprint: dict[str, Any] = field(hash=False, compare=False)
    kinds: tuple[str, ...] = DEFAULT_KINDS  # of leased work it runs

    @classmethod
    def of(cls, row: Worker) -> WorkerInfo:
        return cls(row.id, row.token_id, row.pool, tuple(row.backends or ()), row.energy, dict(row.fingerprint or {}),
                   tuple(row.kinds or DEFAULT_KINDS))

    @property
    def gpu(self) -> bool:
        """Whether its GPU backends measure on a GPU; a worker that says no runs only their
        compile-only trials (workers of contract 2 and older offered GPU backends only with one)."""
        return bool(self.fingerprint.get("gpu", True))


class WorkerDirectory:
    """This replica's copy of registered workers, the least recently used dropped first."""

    def __init__(self, capacity: int = 20_000) -> None:
        self._workers: LRUCache[int, WorkerInfo] = LRUCache(maxsize=capacity)
        self._seen: TTLCache[int, bool] = TTLCache(maxsize=capacity, ttl=LAST_SEEN_EVERY_S)  # recorded lately
        self._lock = threading.Lock()  # cachetools' caches are not thread-safe

    def get(self, session: Session, worker_id: int) -> WorkerInfo | None:
        with self._lock:
            info = self._workers.get(worker_id)
        if info is None:
            row = session.get(Worker, worker_id) if 0 < worker_id < 2**63 else None
            if row is None:
                return None
            info = self.remember(row)
        return info

    def remember(self, row: Worker) -> WorkerInfo:
        info = WorkerInfo.of(row)
        with self._lock:
            self._workers[info.id] = info
        return info

    def leasing(self, worker_id: int, token_id: int) -> WorkerInfo | None:
        """The worker, if it runs under API token `token_id` and leased through this replica
        lately (it passed the lease path's checks): known without the database."""
        with self._lock:
            info = self._workers.get(worker_id)
            if info is None or info.token_id != token_id or worker_id not in self._seen:
                return None
        return info

    def seen(self, session: Session, worker_id: int) -> None:
        """Record that the worker called, if it has not been recorded lately."""
        with self._lock:
            if worker_id in self._seen:
                return
            self._seen[worker_id] = True
        session.execute(update(Worker).where(Worker.id == worker_id).values(last_seen_at=utcnow()))

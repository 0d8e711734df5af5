"""A short-lived per-replica cache of authenticated principals, so that a request does not
read its token row every time. An entry lives `ttl_s` at most and never past the token's
expiry or the end of its grace period; revoking or rotating a token forgets it here at once
(other replicas notice within `ttl_s`)."""

from __future__ import annotations

import threading
import time
from datetime import datetime

from service.accounts.tokens import Principal


class PrincipalCache:
    def __init__(self, ttl_s: float = 5.0, capacity: int = 10_000) -> None:
        self.ttl_s = ttl_s
        self.capacity = capacity
        self._entries: dict[str, tuple[float, Principal]] = {}
        self._lock = threading.Lock()

    def get(self, key: str, now: datetime) -> Principal | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            deadline, principal = entry
            if deadline > time.monotonic() and principal.is_valid(now):
                return principal
            del self._entries[key]
            return None

    def put(self, key: str, principal: Principal) -> None:
        with self._lock:
            if len(self._entries) >= self.capacity:
                self._entries.clear()
            self._entries[key] = (time.monotonic() + self.ttl_s, principal)

    def forget(self, token_id: int) -> None:
        with self._lock:
            for key in [k for k, (_, p) in self._entries.items() if p.token_id == token_id]:
                del self._entries[key]

"""A short-lived per-replica cache of authenticated principals, so that a request does not
read its token row every time. An entry lives `ttl_s` at most and never past the token's
expiry or the end of its grace period; revoking or rotating a token forgets it here at once
(other replicas notice within `ttl_s`)."""

from __future__ import annotations

import threading
from datetime import datetime

from cachetools import TTLCache

from service.accounts.tokens import Principal


class PrincipalCache:
    def __init__(self, ttl_s: float = 5.0, capacity: int = 10_000) -> None:
        self.ttl_s = ttl_s
        self._entries: TTLCache[str, Principal] = TTLCache(maxsize=capacity, ttl=ttl_s)
        self._lock = threading.Lock()

    def get(self, key: str, now: datetime) -> Principal | None:
        with self._lock:
            principal = self._entries.get(key)
            if principal is None or principal.is_valid(now):
                return principal
            del self._entries[key]
            return None

    def put(self, key: str, principal: Principal) -> None:
        with self._lock:
            self._entries[key] = principal

    def forget(self, token_id: int) -> None:
        with self._lock:
            for key in [k for k, p in self._entries.items() if p.token_id == token_id]:
                del self._entries[key]

"""Failed authentications per client: after `limit` failures within `window_s`, a client is
refused (429) until the oldest of them leaves the window. Kept per replica, in memory."""

from __future__ import annotations

import threading
from collections import deque

from cachetools import LRUCache


class FailureLimiter:
    def __init__(self, limit: int, window_s: float = 60.0, max_clients: int = 100_000) -> None:
        self.limit = limit
        self.window_s = window_s
        # when too many clients are tracked, the one heard from least lately is forgotten first
        self._failures: LRUCache[str, deque[float]] = LRUCache(maxsize=max_clients)
        self._lock = threading.Lock()  # cachetools' caches are not thread-safe

    def retry_after(self, client: str, now: float) -> float | None:
        """Seconds until `client` may try again, or None when it may now."""
        with self._lock:
            times = self._failures.get(client)
            if times is None:
                return None
            while times and times[0] <= now - self.window_s:
                times.popleft()
            if not times:
                del self._failures[client]
                return None
            if len(times) < self.limit:
                return None
            return times[0] + self.window_s - now

    def record(self, client: str, now: float) -> None:
        with self._lock:
            times = self._failures.get(client)
            if times is None:
                times = self._failures[client] = deque(maxlen=self.limit)
            times.append(now)

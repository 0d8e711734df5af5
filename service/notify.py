"""Wake-ups for long-polls and event streams. Redis accelerates; it never holds truth.

Channels are `pool:<name>` (a trial was queued there) and `study:<id>` (a trial changed).
Without Redis, wake-ups reach waiters of this process only and waiters re-check the
database every poll interval, which is what other replicas rely on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

log = logging.getLogger("paretune.notify")
PREFIX = "paretune:"


class Notifier:
    def __init__(self, redis_url: str | None) -> None:
        self.redis_url = redis_url
        self._loop: asyncio.AbstractEventLoop | None = None
        self._events: dict[str, asyncio.Event] = {}
        self._sync_redis: Any = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        if self.redis_url:
            import redis

            self._sync_redis = redis.Redis.from_url(self.redis_url)
            self._task = asyncio.create_task(self._listen())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._sync_redis is not None:
            self._sync_redis.close()

    def ping(self) -> bool | None:
        """Redis reachability: None when Redis is not configured."""
        if self._sync_redis is None:
            return None
        try:
            return bool(self._sync_redis.ping())
        except Exception:
            return False

    def notify(self, *channels: str) -> None:
        """Wake waiters on these channels; callable from any thread."""
        if self._sync_redis is not None:
            for channel in channels:
                try:
                    self._sync_redis.publish(PREFIX + channel, "1")
                except Exception as exc:  # Redis down: the database poll still delivers
                    log.warning("redis publish failed: %s", exc)
        if self._loop is not None:
            for channel in channels:
                self._loop.call_soon_threadsafe(self._fire, channel)

    async def wait(self, channel: str, timeout: float) -> bool:
        event = self._events.setdefault(channel, asyncio.Event())
        try:
            await asyncio.wait_for(event.wait(), timeout)
            return True
        except TimeoutError:
            return False

    def _fire(self, channel: str) -> None:
        event = self._events.pop(channel, None)
        if event is not None:
            event.set()

    async def _listen(self) -> None:
        import redis.asyncio as aioredis

        while True:
            try:
                client = aioredis.Redis.from_url(self.redis_url)  # type: ignore[arg-type]
                pubsub = client.pubsub()
                await pubsub.psubscribe(PREFIX + "*")
                async for message in pubsub.listen():
                    if message.get("type") == "pmessage":
                        channel = message["channel"].decode()[len(PREFIX):]
                        self._fire(channel)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("redis subscription lost (%s); retrying in 1 s", exc)
                await asyncio.sleep(1)

"""Wake-ups for long-polls, event streams and scheduling steps. Redis (or, without it,
Postgres's LISTEN/NOTIFY) carries them between processes; it never holds truth, and it never
holds up a request.

Channels (built and read only through `Channel`) are `pool:<name>` (work was queued there),
`study:<id>` (a study or one of its trials changed), `studies`, and `step:<id>` (a study's
step has work: for a scheduler that runs in a process of its own). Each entity's transition
registers its wake-ups (service.store.effects), and the database layer hands them here once
their transaction has committed. `notify` wakes this replica's waiters at once and hands the
channels to a background publisher; the other processes are reached only from background
tasks with short timeouts, so a Redis or a notification connection that is down or hung
only delays other replicas' wake-ups: their waiters re-check the database every poll
interval anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")
log = logging.getLogger("paretune.notify")
PREFIX = "paretune:"
REDIS_TIMEOUT_S = 0.5
QUEUE_LIMIT = 10_000  # channels waiting to be published; past it the oldest are dropped
WARN_EVERY_S = 30.0
PG_CHANNEL = "paretune"  # the Postgres notification channel every process listens on


class Channel:
    """The names of the notifier's channels."""

    STUDIES = "studies"  # the list of studies changed
    SHARES = "shares"  # the operator changed a pool's settings: every replica reads its share view at once
    POOL, STUDY, STEP, QUEUED = "pool:", "study:", "step:", "queued:"

    @staticmethod
    def pool(name: str) -> str:
        """Work was queued in pool `name`: its long-polling workers look."""
        return f"{Channel.POOL}{name}"

    @staticmethod
    def study(study_id: int) -> str:
        """The study or one of its trials changed: its event streams send it."""
        return f"{Channel.STUDY}{study_id}"

    @staticmethod
    def step(study_id: int, urgent: bool = False) -> str:
        """The study's scheduling step has work (for a scheduler process); `urgent`: a
        worker waits for what it queues."""
        return f"{Channel.STEP}{'!' if urgent else ''}{study_id}"

    @staticmethod
    def queued(study_id: int) -> str:
        """Trials of the study were queued: every replica's lease order has it lease again
        (service.trials.shares), where a scheduler process or another replica queued them."""
        return f"{Channel.QUEUED}{study_id}"

    @staticmethod
    def queued_study(channel: str) -> int:
        """The study a `queued` channel names."""
        return int(channel.removeprefix(Channel.QUEUED))

    @staticmethod
    def step_study(channel: str) -> tuple[int, bool]:
        """The study a `step` channel names, and whether it is urgent."""
        named = channel.removeprefix(Channel.STEP)
        return int(named.removeprefix("!")), named.startswith("!")


def postgres_dsn(database_url: str) -> str | None:
    """A libpq connection string for a Postgres database URL (None for another database)."""
    for prefix in ("postgresql+psycopg://", "postgresql://", "postgres://"):
        if database_url.startswith(prefix):
            return "postgresql://" + database_url[len(prefix):]
    return None


class Notifier:
    def __init__(self, redis_url: str | None, postgres_dsn: str | None = None) -> None:
        self.redis_url = redis_url
        self.postgres_dsn = None if redis_url else postgres_dsn  # Redis, when there is one
        self._origin = secrets.token_hex(6)  # this process: its own Postgres notifications are skipped
        self._handlers: dict[str, Callable[[str], None]] = {}  # channel prefix -> called on the loop
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiters: dict[str, deque[asyncio.Future[None]]] = defaultdict(deque)
        self._outbox: asyncio.Queue[tuple[str, int | None]] | None = None
        self._redis: Any = None
        self._tasks: list[asyncio.Task[None]] = []
        self._last_warning = 0.0
        self.dropped = 0
        # `pool:` notifications (local or from Redis) that found fewer waiters than the
        # trials they announced: those trials wait for a long-poll to look for them
        self.unanswered_pool_wakeups = 0

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        if self.redis_url:
            import redis.asyncio as aioredis

            self._redis = aioredis.Redis.from_url(
                self.redis_url, socket_timeout=REDIS_TIMEOUT_S, socket_connect_timeout=REDIS_TIMEOUT_S
            )
            self._outbox = asyncio.Queue(QUEUE_LIMIT)
            self._tasks = [asyncio.create_task(self._publish()), asyncio.create_task(self._listen())]
        elif self.postgres_dsn:
            self._outbox = asyncio.Queue(QUEUE_LIMIT)
            self._tasks = [asyncio.create_task(self._publish_pg()), asyncio.create_task(self._listen_pg())]

    def on(self, prefix: str, handler: Callable[[str], None]) -> None:
        """Call `handler(channel)` for every notification of a channel starting with `prefix`,
        this process's own or another's."""
        self._handlers[prefix] = handler

    async def stop(self) -> None:
        await stop_tasks(*self._tasks)
        if self._redis is not None:
            with contextlib.suppress(Exception):
                await within(self._redis.aclose(), REDIS_TIMEOUT_S)

    async def ping(self) -> bool | None:
        """Redis reachability within its timeout: None when Redis is not configured."""
        if self._redis is None:
            return None
        try:
            return bool(await within(self._redis.ping(), REDIS_TIMEOUT_S))
        except Exception:
            return False

    def notify(self, *channels: str) -> None:
        """Wake every waiter on these channels; callable from any thread, never blocks."""
        if self._loop is not None and channels:
            messages: list[tuple[str, int | None]] = [(channel, None) for channel in channels]
            self._loop.call_soon_threadsafe(self._deliver, messages)

    def notify_some(self, channel: str, count: int) -> None:
        """Wake up to `count` waiters of `channel` (first come, first woken): `count` trials
        were queued, so more would only find nothing and wait again."""
        if self._loop is not None and count > 0:
            message: list[tuple[str, int | None]] = [(channel, count)]
            self._loop.call_soon_threadsafe(self._deliver, message)

    def _deliver(self, messages: list[tuple[str, int | None]]) -> None:
        for channel, count in messages:
            self._fire(channel, count)
            if self._outbox is not None:
                if self._outbox.full():
                    self._outbox.get_nowait()
                    self.dropped += 1
                self._outbox.put_nowait((channel, count))

    def waiting(self, channel: str) -> bool:
        """Whether a long-poll of this process waits on this channel now (callable from any
        thread: a glance, not a promise)."""
        return bool(self._waiters.get(channel))

    async def wait(self, channel: str, timeout: float) -> bool:
        """Until this channel is notified (True) or `timeout` passes (False)."""
        assert self._loop is not None
        waiter: asyncio.Future[None] = self._loop.create_future()
        queue = self._waiters[channel]
        queue.append(waiter)
        try:
            await within(asyncio.shield(waiter), timeout)
            return True
        except TimeoutError:
            return False
        finally:
            if not waiter.done():
                waiter.cancel()
                with contextlib.suppress(ValueError):
                    queue.remove(waiter)
            if not queue:
                self._waiters.pop(channel, None)

    def _fire(self, channel: str, count: int | None = None) -> None:
        for prefix, handler in self._handlers.items():
            if channel.startswith(prefix):
                handler(channel)
        queue = self._waiters.get(channel)
        woken = 0
        while queue and (count is None or woken < count):
            waiter = queue.popleft()
            if not waiter.done():
                waiter.set_result(None)
                woken += 1
        if channel.startswith(Channel.POOL) and (woken == 0 if count is None else woken < count):
            self.unanswered_pool_wakeups += 1

    async def _batch(self) -> list[tuple[str, int | None]]:
        """The channels waiting to be published: at least one, and every other one there,
        each once (with the sum of its counts; none where one of them wakes every waiter)."""
        assert self._outbox is not None
        messages = [await self._outbox.get()]
        while not self._outbox.empty():
            messages.append(self._outbox.get_nowait())
        merged: dict[str, int | None] = {}
        for channel, count in messages:
            known = merged.get(channel, 0)
            merged[channel] = None if known is None or count is None else known + count
        return list(merged.items())

    async def _publish(self) -> None:
        while True:
            messages = await self._batch()
            try:
                async with self._redis.pipeline(transaction=False) as pipe:
                    for channel, count in messages:
                        pipe.publish(PREFIX + channel, "" if count is None else str(count))
                    await within(pipe.execute(), REDIS_TIMEOUT_S)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # down or hung: other replicas fall back to polling
                self._warn(f"redis publish failed ({exc!r}); wake-ups go by polling meanwhile")

    async def _listen(self) -> None:
        while True:
            try:
                pubsub = self._redis.pubsub()
                await within(pubsub.psubscribe(PREFIX + "*"), REDIS_TIMEOUT_S)
                while True:
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=5.0)
                    if message and message.get("type") == "pmessage":
                        data = message["data"].decode() if isinstance(message["data"], bytes) else ""
                        self._fire(message["channel"].decode()[len(PREFIX):], _count(data))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._warn(f"redis subscription lost ({exc!r}); retrying in 1 s")
                await asyncio.sleep(1)

    async def _pg_connect(self) -> Any:
        """A Postgres connection of this notifier's own (autocommit: a notification is sent at once)."""
        import psycopg

        assert self.postgres_dsn is not None
        return await within(psycopg.AsyncConnection.connect(self.postgres_dsn, autocommit=True),
                           REDIS_TIMEOUT_S * 4)

    async def _publish_pg(self) -> None:
        """Other processes' wake-ups through Postgres: one statement per batch."""
        connection: Any = None
        try:
            while True:
                messages = await self._batch()
                payloads = [f"{self._origin}|{'' if count is None else count}|{channel}"
                            for channel, count in messages]
                try:
                    if connection is None or connection.closed:
                        connection = await self._pg_connect()
                    await within(connection.execute(
                        "SELECT pg_notify(%s, p) FROM unnest(%s::text[]) AS p", (PG_CHANNEL, payloads)),
                        REDIS_TIMEOUT_S)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # other replicas fall back to polling meanwhile
                    self._warn(f"postgres notify failed ({exc!r}); wake-ups go by polling meanwhile")
                    await _close_quietly(connection)
                    connection = None
        finally:
            await _close_quietly(connection)

    async def _listen_pg(self) -> None:
        while True:
            connection: Any = None
            try:
                connection = await self._pg_connect()
                await connection.execute(f"LISTEN {PG_CHANNEL}")
                async for note in connection.notifies():
                    origin, count, channel = note.payload.split("|", 2)
                    if origin != self._origin:
                        self._fire(channel, _count(count))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._warn(f"postgres notification connection lost ({exc!r}); retrying in 1 s")
            finally:
                await _close_quietly(connection)
            await asyncio.sleep(1)

    def _warn(self, message: str) -> None:
        now = time.monotonic()
        if now - self._last_warning > WARN_EVERY_S:
            self._last_warning = now
            log.warning(message)


async def within(awaitable: Awaitable[T], seconds: float) -> T:
    """`awaitable`, or TimeoutError after `seconds`. Not asyncio.wait_for: on Python 3.11 it
    can swallow a cancellation that arrives as the awaitable completes, and a background
    task would then run on after its stop."""
    async with asyncio.timeout(seconds):
        return await awaitable


async def stop_tasks(*tasks: asyncio.Task[Any]) -> None:
    """Cancel these tasks and wait until each has ended, cancelling again any that carried
    on (a cancellation swallowed by a library); their errors are not raised."""
    for task in tasks:
        while not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=1.0)
        if not task.cancelled():
            task.exception()  # retrieved: asyncio logs nothing about it


def _count(text: str) -> int | None:
    """A notification's count of trials: none (every waiter) when it names none."""
    return int(text) if text.isdigit() else None


async def _close_quietly(connection: Any) -> None:
    if connection is not None:
        with contextlib.suppress(Exception):
            await connection.close()

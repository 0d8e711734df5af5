"""Wake-ups between processes over Postgres's LISTEN/NOTIFY (no Redis): a notification in
one process wakes the waiters of another, counts are kept, a process does not hear its own
notifications twice, handlers see their channels, and stopping leaves no connection."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import psycopg
import pytest
from helpers import run_async, wait_for

from service.notify import Notifier, postgres_dsn

pytestmark = pytest.mark.postgres


def connections(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                           "AND pid <> pg_backend_pid()").fetchone()
        assert row is not None
        return int(row[0])


@contextlib.asynccontextmanager
async def two_processes(database: str, listen: str) -> AsyncIterator[tuple[Notifier, Notifier, list[str], list[str]]]:
    """Two processes' notifiers on one database, each hearing the channels under `listen`,
    listening when this yields and stopped after."""
    one = Notifier(None, postgres_dsn(database))
    other = Notifier(None, postgres_dsn(database))
    await one.start()
    await other.start()
    heard: tuple[list[str], list[str]] = ([], [])
    one.on(listen, heard[0].append)
    other.on(listen, heard[1].append)
    try:
        await asyncio.sleep(0.5)  # both listening
        yield one, other, *heard
    finally:
        await one.stop()
        await other.stop()


def test_notifications_reach_other_processes_through_postgres(postgres_database: str) -> None:
    async def scenario() -> dict[str, object]:
        async with two_processes(postgres_database, "step:") as (one, other, one_heard, other_heard):
            loop = asyncio.get_running_loop()
            woken_at: list[float] = []

            async def waiter() -> None:
                if await other.wait("pool:gpu", 5):
                    woken_at.append(loop.time())

            waiters = [asyncio.create_task(waiter()) for _ in range(3)]
            await asyncio.sleep(0.05)
            started = loop.time()
            one.notify_some("pool:gpu", 2)  # two trials queued: two of the other process's waiters
            done, pending = await asyncio.wait(waiters, timeout=2)
            woken_s = max(woken_at) - started
            one.notify("step:7", "step:9")
            await asyncio.sleep(0.5)
            for task in pending:
                task.cancel()
            return {"woken": len(done), "pending": len(pending), "woken_s": woken_s,
                    "unanswered": other.unanswered_pool_wakeups, "seen": {"one": one_heard, "other": other_heard},
                    "open": connections(postgres_database)}

    results = run_async(scenario())
    assert results["woken"] == 2 and results["pending"] == 1, results
    assert results["woken_s"] < 1.0, results
    assert results["unanswered"] == 0
    # the sender hears its own channels once (delivered at once, its Postgres echo skipped)
    assert results["seen"] == {"one": ["step:7", "step:9"], "other": ["step:7", "step:9"]}
    assert results["open"] == 3  # a listener each, and the publisher of the one that sent (made on first use)
    # stopping closed them (a closed connection's server process may take a moment to leave)
    wait_for(lambda: connections(postgres_database) == 0, 10, "the notifier's connections to close")


def test_redis_takes_precedence_and_other_databases_have_no_postgres_channel() -> None:
    assert Notifier("redis://127.0.0.1:6379/0", "postgresql://x/y").postgres_dsn is None
    assert postgres_dsn("sqlite:///tmp/p.db") is None
    assert postgres_dsn("postgresql+psycopg://u@h/db") == "postgresql://u@h/db"


def test_wake_ups_sent_together_are_sent_once_each_with_their_counts_added(postgres_database: str) -> None:
    """Two trials queued one at a time, published in one batch, wake two of another process's
    waiters (Postgres delivers identical payloads of one transaction once: sent as they came,
    the second would be lost), and the event channels of many changes go out once."""
    async def scenario() -> dict[str, object]:
        async with two_processes(postgres_database, "study:") as (one, other, _, heard):
            waiters = [asyncio.create_task(other.wait("pool:gpu", 3)) for _ in range(3)]
            await asyncio.sleep(0.05)
            for _ in range(2):  # in one turn of the loop: one batch
                one.notify_some("pool:gpu", 1)
                one.notify("study:4", "study:4")
            done, pending = await asyncio.wait(waiters, timeout=2)
            await asyncio.sleep(0.3)
            for task in pending:
                task.cancel()
            return {"woken": sum(t.result() for t in done), "pending": len(pending), "heard": heard}

    results = run_async(scenario())
    assert results["woken"] == 2 and results["pending"] == 1, results
    assert results["heard"] == ["study:4"], results

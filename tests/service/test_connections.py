"""Pooled Postgres connections: one used lately goes to work without a ping; one idle longer
than IDLE_PING_S is pinged first, and replaced if the server dropped it meanwhile; one that
died while in use is replaced with every other of its pool after its first failed statement."""

from __future__ import annotations

import psycopg
import pytest
import sqlalchemy
from sqlalchemy import text

from service.store import db as store
from service.store.db import Database


def backend_pid(database: Database) -> int:
    with database.read() as session:
        return int(session.execute(text("SELECT pg_backend_pid()")).scalar_one())


def terminate(url: str, pid: int) -> None:
    """End a backend from a connection outside the pool under test."""
    with psycopg.connect(url, autocommit=True) as other:
        assert other.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)


def counted_pings(database: Database) -> list[int]:
    pings: list[int] = []
    ping = database.engine.dialect.do_ping

    def counting(dbapi_connection: object) -> bool:
        pings.append(1)
        return ping(dbapi_connection)

    database.engine.dialect.do_ping = counting  # type: ignore[method-assign]
    return pings


def test_a_connection_used_lately_is_not_pinged(postgres_database: str) -> None:
    database = Database(postgres_database, pool_size=1)
    try:
        pings = counted_pings(database)
        pids = {backend_pid(database) for _ in range(5)}
        assert len(pids) == 1 and pings == []  # one connection, reused without a round trip
    finally:
        database.dispose()


def test_an_idle_connection_is_pinged_and_replaced_when_the_server_dropped_it(
        postgres_database: str, monkeypatch: pytest.MonkeyPatch) -> None:
    database = Database(postgres_database, pool_size=1)
    try:
        first = backend_pid(database)
        terminate(postgres_database, first)
        monkeypatch.setattr(store, "IDLE_PING_S", 0.0)  # every pooled connection has been idle long enough
        pings = counted_pings(database)
        second = backend_pid(database)  # works: the ping found it dead and the pool connected anew
        assert second != first and pings
    finally:
        database.dispose()


def test_a_connection_that_died_in_use_fails_once_then_the_pool_is_renewed(postgres_database: str) -> None:
    database = Database(postgres_database, pool_size=2)
    try:
        with database.read() as a, database.read() as b:  # two pooled connections
            pids = [int(s.execute(text("SELECT pg_backend_pid()")).scalar_one()) for s in (a, b)]
        for pid in pids:
            terminate(postgres_database, pid)
        with pytest.raises(sqlalchemy.exc.OperationalError), database.read() as session:
            session.execute(text("SELECT 1"))
        assert backend_pid(database) not in pids  # the other dead one was dropped too
        assert backend_pid(database) not in pids
    finally:
        database.dispose()

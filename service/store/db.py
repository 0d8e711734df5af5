"""Engine, sessions (which send their transaction's effects once it commits) and the few
database-specific primitives (row locks, sequences)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event, select, text, update
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool

from service.store.effects import Notifications, Shares, Steps, effects, take
from service.store.models import Counter, Study

T = TypeVar("T")
MAX_OVERFLOW = 10  # Postgres connections a process opens beyond its pool under load
STEP_THREADS = 2  # at most this many studies step at once in a replica (scheduling.loop)
IDLE_PING_S = 10.0  # a pooled Postgres connection idle this long is pinged before use


class Database:
    """One engine and session factory per process.

    SQLite has a single writer: the embedded service serialises its own write transactions
    with a process lock (and busy_timeout covers other processes such as the CLI), so that
    concurrent requests queue instead of failing with "database is locked".
    """

    def __init__(self, url: str, pool_size: int = 30) -> None:
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        self.engine = _make_engine(url, pool_size)
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._notifier: Notifications | None = None
        self._scheduler: Steps | None = None
        self._shares: Shares | None = None
        event.listen(self.sessions, "after_commit", self._send_effects)
        event.listen(self.sessions, "after_rollback", take)
        # a plain Lock: a request's session may be opened and closed on different threads
        self._write_lock = threading.Lock()
        self._locked_at = 0.0
        self.on_write_lock_held: Callable[[float], None] = lambda seconds: None
        # Threads that may wait for a connection (or for SQLite's write lock) are never the
        # threads that run endpoints: a request first gets its connection on a `jobs`
        # thread, then runs its endpoint on the framework's threads, then commits on a
        # `finish` thread. Otherwise requests holding connections can wait for endpoint
        # threads that all wait for connections: a deadlock under load.
        self._jobs = ThreadPoolExecutor(32, thread_name_prefix="db-job")
        self._finishers = ThreadPoolExecutor(16, thread_name_prefix="db-finish")
        self._lock_waiters = ThreadPoolExecutor(64, thread_name_prefix="db-lock") if self.is_sqlite else None
        # Scheduling steps have threads of their own: behind hundreds of long-polls in the
        # jobs queue they would starve, and the queue they refill would run dry.
        self._steps = ThreadPoolExecutor(STEP_THREADS, thread_name_prefix="db-step")

    def send_effects_to(self, notifier: Notifications, scheduler: Steps, shares: Shares | None = None) -> None:
        """Where the wake-ups of committed transactions go (service.store.effects): this
        process's notifier, scheduler and lease order (a replica's). Until then only their
        callbacks run."""
        self._notifier, self._scheduler, self._shares = notifier, scheduler, shares

    def _send_effects(self, session: Session) -> None:
        committed = take(session)
        if committed is not None:
            committed.send(self._notifier, self._scheduler, self._shares)

    async def run(self, work: Callable[..., T], *args: Any) -> T:
        """Self-contained database work (it opens and ends its own session) off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self._jobs, work, *args)

    async def run_step(self, work: Callable[..., T], *args: Any) -> T:
        """Like `run`, on the scheduling steps' own threads."""
        return await asyncio.get_running_loop().run_in_executor(self._steps, work, *args)

    @asynccontextmanager
    async def request_session(self, *, write: bool) -> AsyncIterator[Session]:
        """A request's session, bound to a connection it already holds; committed (when
        `write`) or rolled back when the request is done. On SQLite a write session holds
        the process's write lock."""
        loop = asyncio.get_running_loop()
        locked = write and self.is_sqlite
        if locked:
            assert self._lock_waiters is not None
            await loop.run_in_executor(self._lock_waiters, self._acquire)
        try:
            connection = await loop.run_in_executor(self._jobs, self.engine.connect)
        except BaseException:
            if locked:
                self._release()
            raise
        session = self.sessions(bind=connection)
        try:
            yield session
        except BaseException:
            await loop.run_in_executor(self._finishers, self._finish, session, connection, False, locked)
            raise
        await loop.run_in_executor(self._finishers, self._finish, session, connection, write, locked)

    def _finish(self, session: Session, connection: Connection, commit: bool, locked: bool) -> None:
        try:
            if commit:
                session.commit()
                connection.commit()
            else:
                session.rollback()
        finally:
            session.close()
            connection.close()
            if locked:
                self._release()

    def _acquire(self) -> None:
        self._write_lock.acquire()
        self._locked_at = time.perf_counter()

    def _release(self) -> None:
        held = time.perf_counter() - self._locked_at
        self._write_lock.release()
        self.on_write_lock_held(held)

    @contextmanager
    def _held(self) -> Iterator[None]:
        self._acquire()
        try:
            yield
        finally:
            self._release()

    @contextmanager
    def write(self) -> Iterator[Session]:
        """A session whose transaction commits at the end of the block (or rolls back)."""
        if self.is_sqlite:
            with self._held(), self.sessions() as session, session.begin():
                session.execute(text("SELECT 1"))  # open the transaction eagerly
                yield session
        else:
            with self.sessions() as session, session.begin():
                yield session

    @contextmanager
    def read(self) -> Iterator[Session]:
        with self.sessions() as session:
            yield session

    @contextmanager
    def snapshot(self) -> Iterator[Session]:
        """A read session whose statements all see the database as it was at the first of
        them, for reads that must agree with each other: a commit between two shows in
        neither (Postgres: REPEATABLE READ; SQLite: one read transaction of the WAL)."""
        with self.sessions() as session:
            if not self.is_sqlite:
                session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
            elif not isinstance(self.engine.pool, StaticPool):  # one connection every thread shares: none
                session.execute(text("BEGIN"))
            yield session

    def dispose(self) -> None:
        self._steps.shutdown(wait=True)
        self._jobs.shutdown(wait=True)
        self._finishers.shutdown(wait=True)
        if self._lock_waiters is not None:
            self._lock_waiters.shutdown(wait=False, cancel_futures=True)
        self.engine.dispose()


def after_commit(session: Session, callback: Callable[[], None]) -> None:
    """Run `callback` once the session's transaction has committed (not if it rolls back),
    with the transaction's other effects."""
    effects(session).after(callback)


def _make_engine(url: str, pool_size: int) -> Engine:
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        kwargs: dict = {"connect_args": {"check_same_thread": False, "timeout": 30}}
        if path in ("", ":memory:"):
            kwargs["poolclass"] = StaticPool
        engine = create_engine(url, **kwargs)

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record):  # type: ignore[no-untyped-def]
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        return engine
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://") :]
    # steady connections for the request, job and finish threads; few made and dropped under load
    engine = create_engine(url, pool_size=pool_size, max_overflow=MAX_OVERFLOW)
    _ping_when_idle(engine)
    return engine


def _ping_when_idle(engine: Engine) -> None:
    """Ping a pooled connection before use only when it has been idle for IDLE_PING_S (the
    server or a proxy may have dropped it meanwhile), not on every checkout: a ping is a
    round trip per transaction. A connection used lately that died (the database restarted)
    fails its first statement instead, and the engine then replaces every connection of
    its pool."""
    dialect = engine.dialect

    @event.listens_for(engine, "checkin")
    def _returned(dbapi_connection: Any, record: Any) -> None:
        record.info["returned_at"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _taken(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        returned = record.info.get("returned_at")
        if returned is None or time.monotonic() - returned < IDLE_PING_S:
            return
        try:
            dialect.do_ping(dbapi_connection)
        except dialect.loaded_dbapi.Error as exc:  # the pool connects anew and tries again
            raise DisconnectionError(str(exc)) from exc


def is_postgres(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


def lock_study(session: Session, study_id: int, *, skip_locked: bool = False) -> Study | None:
    """Lock a study row for the rest of the transaction: the study's scheduling lock (its
    step, pause, resume, cancel and lease expiry take it; leases and results do not).
    With skip_locked, None when another transaction holds it. SQLite has one writer at a
    time, which serialises the same work."""
    # populate_existing: a row this session already holds is re-read under the lock
    stmt = select(Study).where(Study.id == study_id).execution_options(populate_existing=True)
    if is_postgres(session):
        stmt = stmt.with_for_update(skip_locked=skip_locked)
    return session.execute(stmt).scalar_one_or_none()


def next_seq(session: Session) -> int:
    """A value of the change sequence (ordering for event streams and sampler sync)."""
    return next_seqs(session, 1)[0]


def next_seqs(session: Session, count: int) -> list[int]:
    """`count` fresh values of the change sequence."""
    if count <= 0:
        return []
    if is_postgres(session):
        rows = session.execute(text("SELECT nextval('trial_seq') FROM generate_series(1, :n)"), {"n": count})
        return [int(r[0]) for r in rows]
    last = session.execute(
        update(Counter).where(Counter.name == "trial_seq").values(value=Counter.value + count)
        .returning(Counter.value)
    ).scalar_one()
    return list(range(int(last) - count + 1, int(last) + 1))

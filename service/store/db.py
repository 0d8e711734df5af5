"""Engine, sessions and the few database-specific primitives (row locks, sequences)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine, create_engine, event, select, text, update
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool

from service.store.models import Counter, Study


class Database:
    """One engine and session factory per process.

    SQLite has a single writer: the embedded service serialises its own write transactions
    with a process lock (and busy_timeout covers other processes such as the CLI), so that
    concurrent requests queue instead of failing with "database is locked".
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        self.engine = _make_engine(url)
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._write_lock = threading.RLock()

    @contextmanager
    def write(self) -> Iterator[Session]:
        """A session whose transaction commits at the end of the block (or rolls back)."""
        if self.is_sqlite:
            with self._write_lock, self.sessions() as session, session.begin():
                session.execute(text("SELECT 1"))  # open the transaction eagerly
                yield session
        else:
            with self.sessions() as session, session.begin():
                yield session

    @contextmanager
    def read(self) -> Iterator[Session]:
        with self.sessions() as session:
            yield session

    def dispose(self) -> None:
        self.engine.dispose()


def _make_engine(url: str) -> Engine:
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
    return create_engine(url, pool_size=20, max_overflow=40, pool_pre_ping=True)


def lock_study(session: Session, study_id: int) -> Study | None:
    """Lock a study row for the rest of the transaction: serialises ask/tell per study."""
    # populate_existing: a row this session already holds is re-read under the lock
    stmt = select(Study).where(Study.id == study_id).execution_options(populate_existing=True)
    if session.get_bind().dialect.name == "postgresql":
        stmt = stmt.with_for_update()
    return session.execute(stmt).scalar_one_or_none()


def next_seq(session: Session) -> int:
    """A value of the trial change sequence (ordering for event streams and sampler sync)."""
    if session.get_bind().dialect.name == "postgresql":
        return int(session.execute(text("SELECT nextval('trial_seq')")).scalar_one())
    value = session.execute(
        update(Counter).where(Counter.name == "trial_seq").values(value=Counter.value + 1)
        .returning(Counter.value)
    ).scalar_one()
    return int(value)

"""Fixtures: a real Postgres database per run, SQLite files, the app in-process and as a
subprocess. No database or Redis mocks."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import (
    LiveService,
    create_postgres_database,
    drop_postgres_database,
    postgres_available,
    start_service,
)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    if not postgres_available():
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL at 127.0.0.1:5432 is required in CI")
        pytest.skip("PostgreSQL is not reachable")
    url = create_postgres_database()
    yield url
    drop_postgres_database(url)


def _fresh_postgres_database() -> Iterator[str]:
    """A Postgres database of its own, dropped afterwards (skipped without Postgres)."""
    if not postgres_available():
        pytest.skip("PostgreSQL is not reachable")
    url = create_postgres_database()
    yield url
    drop_postgres_database(url)


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Each test using it runs on SQLite and on its own fresh Postgres database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'paretune.db'}"
        return
    yield from _fresh_postgres_database()


@pytest.fixture
def postgres_database() -> Iterator[str]:
    """A fresh Postgres database of its own for one test."""
    yield from _fresh_postgres_database()


@pytest.fixture
def live_service(tmp_path: Path) -> Iterator[LiveService]:
    """`paretune serve` on a fresh Postgres database, on a free port."""
    if not postgres_available():
        pytest.skip("PostgreSQL is not reachable")
    url = create_postgres_database()
    service = start_service(url, tmp_path, {"PARETUNE_LEASE_S": "6", "PARETUNE_HEARTBEAT_S": "1",
                                            "PARETUNE_REAPER_INTERVAL_S": "0.5"})
    try:
        yield service
    finally:
        service.stop()
        drop_postgres_database(url)


@pytest.fixture
def live_sqlite_service(tmp_path: Path) -> Iterator[LiveService]:
    service = start_service(f"sqlite:///{tmp_path / 'paretune.db'}", tmp_path,
                            {"PARETUNE_LEASE_S": "6", "PARETUNE_HEARTBEAT_S": "1",
                             "PARETUNE_REAPER_INTERVAL_S": "0.5"})
    try:
        yield service
    finally:
        service.stop()

"""Queries that run for every result must not read a study's finished trials. SQLite plans
without statistics, so the plans are read from SQLite itself for the statements the
scheduler sends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Api, make_api
from fake_worker import result_for
from sqlalchemy import event

from service.scheduling.step import pending_studies


@pytest.fixture
def sqlite_api(tmp_path: Path) -> Iterator[Api]:
    yield from make_api(f"sqlite:///{tmp_path / 'paretune.db'}")


def test_finding_untold_trials_goes_through_the_told_index(sqlite_api: Api) -> None:
    api = sqlite_api
    study = api.create_study(budget={"max_trials": 60}, parallelism=8)
    api.run_worker(api.worker(), result_for)
    state = api.client.app.state.paretune  # type: ignore[attr-defined]
    sent: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "told" in statement:
            sent.append((statement, parameters))

    event.listen(state.db.engine, "before_cursor_execute", capture)
    try:
        with state.db.read() as session:
            pending_studies(session)
        state.scheduler.step_now(study["id"], wait=True)
    finally:
        event.remove(state.db.engine, "before_cursor_execute", capture)
    assert len(sent) >= 2  # the scan for studies with untold trials, and the step's own
    with state.db.engine.connect() as conn:
        for statement, parameters in sent:
            plan = " / ".join(row[3] for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters))
            assert "ix_trials_told" in plan, (statement, plan)

"""Queries that run for every result, or every time a study's page opens, must not read
all of a study's trials: a study may have 100,000. SQLite plans without statistics, so the
plans are read from SQLite itself for the statements the service sends."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from conftest import Api, sent_statements
from fake_worker import result_for

from service.scheduling.step import pending_studies


def plans(api: Api, call: Callable[[], Any]) -> list[tuple[str, str]]:
    """Each query of the trials table that `call` sends, with SQLite's plan for it."""
    engine = api.client.app.state.paretune.db.engine  # type: ignore[attr-defined]
    with sent_statements(engine) as all_sent:
        call()
    sent = [(statement, parameters) for statement, parameters in all_sent
            if statement.lstrip().upper().startswith("SELECT") and "FROM trials" in statement]
    with engine.connect() as conn:
        return [(statement, " / ".join(row[3] for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}",
                                                                               parameters)))
                for statement, parameters in sent]


def test_finding_untold_trials_goes_through_the_told_index(sqlite_api: Api) -> None:
    api = sqlite_api
    study = api.create_study(budget={"max_trials": 60}, parallelism=8)
    api.run_worker(api.worker(), result_for)
    state = api.client.app.state.paretune  # type: ignore[attr-defined]

    def scan_and_step() -> None:
        with state.db.read() as session:
            pending_studies(session)
        state.scheduler.step_now(study["id"], wait=True)

    untold = [(statement, plan) for statement, plan in plans(api, scan_and_step) if "told" in statement]
    assert len(untold) >= 2  # the scan for studies with untold trials, and the step's own
    for statement, plan in untold:
        assert "ix_trials_told" in plan, (statement, plan)


def test_opening_a_study_reads_no_trial_it_does_not_show(sqlite_api: Api) -> None:
    api = sqlite_api
    study = api.create_study(budget={"max_trials": 60}, parallelism=8)
    api.run_worker(api.worker(), result_for)

    def open_page() -> None:
        for path in ("front", "points", "trials?sort=-number&limit=25", "trials?on_front=true&limit=25",
                     "trials?state=failed,cancelled&limit=25", "trials?sort=-f1&limit=25",
                     "trials?state=completed&sort=f2&limit=25"):
            assert api.client.get(f"/v1/studies/{study['id']}/{path}", headers=api.admin).status_code == 200

    sent = plans(api, open_page)
    assert len(sent) >= 9
    for statement, plan in sent:
        # every search narrows the study's trials by more than the study, reads an index only,
        # or stops after a page in the index's order
        narrowed = "(study_id=?)" not in plan or "COVERING" in plan
        paged = "LIMIT" in statement and "TEMP B-TREE" not in plan
        assert "SCAN trials" not in plan and (narrowed or paged), (statement, plan)
    points = [plan for statement, plan in sent if "json_group_array" in statement]
    assert points and all("COVERING INDEX ix_trials_study_seq" in plan for plan in points)

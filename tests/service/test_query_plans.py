"""Queries that run for every result, or every time a study's page opens, must not read
all of a study's trials: a study may have 100,000. SQLite plans without statistics, so the
plans are read from SQLite itself for the statements the service sends."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import Api, sent_statements
from fake_worker import result_for
from psycopg import sql
from sqlalchemy import func, insert, select

from service.scheduling.step import pending_studies
from service.store.models import Trial, utcnow
from service.trials import shares
from service.trials.leases import By, _lease_statement


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


@pytest.mark.parametrize("by", list(By))
def test_the_lease_reads_the_queued_trials_alone_whatever_plan_its_prepared_statement_settles_on(
        postgres_api: Api, by: By) -> None:
    """A prepared statement runs on a generic plan once Postgres finds it no costlier than
    the custom ones, and which plan that is turns with the table's statistics. With the state
    a parameter, one such plan read a study's trials in number order up to its first queued
    one, at every lease. With it a constant, every plan reads the index of queued trials."""
    api = postgres_api
    study = api.create_study(parallelism=4)
    state = api.client.app.state.paretune  # type: ignore[attr-defined]
    _finished_trials(state, study["id"], 3000, queued=3)
    compiled = _lease_statement(state.queue.kinds["trial"], True, False, False, by).compile(
        dialect=state.db.engine.dialect)
    parameters = {**compiled.params, "w_pool": "default", "w_backends": ["python"], "w_study": study["id"],
                  "w_held": [0], "v_worker_id": None, "v_prefix": "trial.0.", "v_now": utcnow(),
                  "v_lease_expires_at": utcnow()}
    plan = _generic_plan(state.db.engine, str(compiled), parameters)
    with state.db.read() as session:
        queued = session.scalar(select(func.count()).where(Trial.state == "queued"))
    scans = _trial_scans(plan)
    candidate = next(node for node in scans if node.get("Index Name") != "trials_pkey")
    # the index, or its condition, holds queued trials alone: the scan reads no other
    assert candidate.get("Index Name") in ("ix_trials_study_queue", "ix_trials_queue") or (
        "'queued'" in candidate.get("Index Cond", "")), scans
    assert candidate["Actual Rows"] <= queued < 10 and candidate.get("Rows Removed by Filter", 0) == 0, candidate


def _trial_scans(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The plan's nodes that read rows of trials (not the update that writes them)."""
    return [node for node in _nodes(plan) if node.get("Relation Name") == "trials"
            and node["Node Type"] != "ModifyTable"]


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", ()):
        yield from _nodes(child)


def test_no_statement_of_a_lease_a_result_or_a_step_reads_the_finished_trials_on_a_generic_plan(
        postgres_api: Api) -> None:
    """Each statement that a worker's round (lease, result with its next lease), a step, and
    the upkeeps beside them (the share view, the scan for studies with work, lease expiry)
    send about trials, prepared and run on a generic plan as Postgres may settle on one,
    reads the few trials it is about, not a study's 3,000 finished ones."""
    api = postgres_api
    study = api.create_study(budget={"max_trials": 5000}, parallelism=4)
    state = api.client.app.state.paretune  # type: ignore[attr-defined]
    _finished_trials(state, study["id"], 3000)
    state.scheduler.step_now(study["id"], wait=True)  # its mirror has read them
    engine = state.db.engine
    with sent_statements(engine) as sent:
        assert api.run_worker(api.worker(), result_for, limit=6, next_lease=True) == 6
        state.scheduler.step_now(study["id"], wait=True)
        with state.db.write() as session:
            shares.load(session, utcnow())
            pending_studies(session)
            state.queue.expire(session)
    about_trials = [(statement, parameters[0] if isinstance(parameters, list) else parameters)
                    for statement, parameters in sent
                    if statement.lstrip().upper().startswith(("SELECT", "UPDATE")) and "trials" in statement]
    assert len(about_trials) >= 6
    read = {statement: _rows_read(engine, statement, parameters) for statement, parameters in about_trials}
    assert all(rows < 300 for rows in read.values()), {s[:160]: rows for s, rows in read.items() if rows >= 300}


def _finished_trials(state: Any, study_id: int, count: int, queued: int = 0) -> None:
    """`count` accounted trials of the study and `queued` trials after them, then ANALYZE."""
    with state.db.write() as session:
        session.execute(insert(Trial), [
            {"study_id": study_id, "number": 1000 + n, "stage": "full", "seq": 1000 + n, "pool": "default",
             "backend": "python", "requires_energy": False, "requires_gpu": False, "attempt": 1, "max_attempts": 3,
             "config": {"x": n / count, "y": 1 + n % 10},
             **({"state": "completed", "told": True, "values": {"f1": n / count, "f2": 1 - n / count}}
                if n < count else {"state": "queued"})}
            for n in range(count + queued)])
    with state.db.engine.connect() as conn:
        conn.exec_driver_sql("ANALYZE trials")
        conn.commit()


PROBES = itertools.count()


def _rows_read(engine: Any, statement: str, parameters: dict[str, Any]) -> int:
    """The trials rows a statement's generic plan reads (returned or filtered out)."""
    return sum(int(node["Actual Rows"] * node["Actual Loops"] + node.get("Rows Removed by Filter", 0))
               for node in _trial_scans(_generic_plan(engine, statement, parameters)))


def _generic_plan(engine: Any, statement: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """A statement as the service sends it (psycopg's `%(name)s` parameters), prepared, run
    on a generic plan and rolled back: its plan with what each node read."""
    names: list[str] = []

    def placeholder(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    prepared = re.sub(r"%\((\w+)\)s", placeholder, statement).replace("%%", "%")
    if "v_secret" in parameters:  # a lease run again takes a token of its own
        parameters = {**parameters, "v_secret": ".replayed"}
    with engine.connect() as conn:
        dbapi = conn.connection.driver_connection
        arguments = ", ".join(sql.Literal(parameters[name]).as_string(dbapi) for name in names)
        conn.exec_driver_sql("SET LOCAL plan_cache_mode = force_generic_plan")
        name = f"probe_{next(PROBES)}"  # a prepared statement outlives its transaction
        conn.exec_driver_sql(f"PREPARE {name} AS {prepared}")
        execute = f"EXECUTE {name}({arguments})" if names else f"EXECUTE {name}"
        plan = conn.exec_driver_sql(f"EXPLAIN (ANALYZE, FORMAT JSON) {execute}").scalar_one()
        conn.rollback()
    return plan[0]["Plan"]  # type: ignore[no-any-return]

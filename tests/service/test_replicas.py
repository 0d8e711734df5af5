"""Two control-plane replicas on one Postgres database serve one fleet; one of them is
killed mid-run. No trial is asked twice, none is lost, every result is told once, and both
replicas took part in the study's scheduling."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import httpx
import psycopg
import pytest
from conftest import study_doc
from helpers import create_postgres_database, drop_postgres_database, postgres_available, start_service, wait_for

TRIALS = 200
pytestmark = pytest.mark.postgres


def steps_run(url: str) -> int:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return int(float(re.search(r"^paretune_step_seconds_count (\S+)$", text, re.M).group(1)))  # type: ignore[union-attr]


def test_two_replicas_share_a_study_and_one_dies(tmp_path: Path) -> None:
    if not postgres_available():
        pytest.skip("PostgreSQL is not reachable")
    db_url = create_postgres_database()
    env = {"PARETUNE_LEASE_S": "3", "PARETUNE_HEARTBEAT_S": "1", "PARETUNE_REAPER_INTERVAL_S": "0.5"}
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    in_server = ("--no-scheduler-process",)  # each replica steps studies, as the test counts
    first = start_service(db_url, tmp_path / "a", env, in_server)
    second = start_service(db_url, tmp_path / "b", env, in_server)

    def worker(url: str, token: str) -> None:  # stopped with the survivor
        second.start_fake_worker(token, "--resilient", "--delay", "0.1", url=url)

    try:
        token = first.make_worker_token()
        doc = study_doc(budget={"max_trials": TRIALS}, parallelism=8,
                        sampler={"name": "nsga2", "seed": 9, "options": {"population_size": 12}},
                        limits={"max_attempts": 5, "compile_timeout_s": 10, "run_timeout_s": 10})
        study_id = first.client().post("/v1/studies", json=doc).json()["id"]
        for replica in (first, second, first, second, first, second):
            worker(replica.url, token)
        admin = second.client()
        wait_for(lambda: admin.get(f"/v1/studies/{study_id}").json()["progress"]["completed"] >= TRIALS // 3,
                 120, first.log_path)
        stepped_before = steps_run(first.url), steps_run(second.url)
        os.killpg(first.process.pid, signal.SIGKILL)  # mid-run, possibly mid-step
        first.process.wait()
        for _ in range(3):  # its workers' agents would fail over; here new ones join the survivor
            worker(second.url, token)
        final = wait_for(lambda: (s := admin.get(f"/v1/studies/{study_id}").json())["state"] == "completed"
                         and s["progress"]["in_flight"] == 0 and s, 180, second.log_path)
        log = second.log_path.read_text()
        with psycopg.connect(db_url) as conn:
            rows = conn.execute("SELECT number, state, told FROM trials WHERE study_id = %s ORDER BY number",
                                (study_id,)).fetchall()
            counted = conn.execute("SELECT n_created, n_completed, n_failed FROM studies WHERE id = %s",
                                   (study_id,)).fetchone()
    finally:
        second.stop()
        if first.process.poll() is None:
            first.stop()
        drop_postgres_database(db_url)

    assert all(n > 0 for n in stepped_before), stepped_before  # both replicas stepped the study
    assert [r[0] for r in rows] == list(range(TRIALS))  # asked once each (numbers are unique), none lost
    assert all(r[1] in ("completed", "failed") and r[2] for r in rows)  # finished and told
    completed = sum(r[1] == "completed" for r in rows)
    assert counted == (TRIALS, completed, TRIALS - completed)  # each result counted exactly once
    assert final["progress"]["completed"] == completed
    assert "Traceback" not in log, log[-3000:]

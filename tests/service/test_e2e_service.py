"""`paretune serve` on Postgres with workers as separate processes speaking real HTTP."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest
from conftest import study_doc
from fake_worker import register, run
from helpers import (
    LiveService,
    create_postgres_database,
    drop_postgres_database,
    postgres_available,
    start_service,
    wait_for,
)
from test_studies_api import brute_force_front


def test_sixty_trials_survive_a_killed_worker(live_service: LiveService) -> None:
    admin = live_service.client()
    doc = study_doc(budget={"max_trials": 60}, parallelism=4,
                    limits={"max_attempts": 3, "compile_timeout_s": 10, "run_timeout_s": 10})
    study = admin.post("/v1/studies", json=doc).json()
    sid = study["id"]

    doomed = live_service.start_fake_worker(live_service.make_worker_token(), "--stall-after", "5")
    stalled = wait_for(lambda: _running_trial(admin, sid), 30, "the worker to hold a lease")
    os.killpg(doomed.pid, signal.SIGKILL)  # dies between lease and result
    doomed.wait()
    live_service.start_fake_worker(live_service.make_worker_token())

    final = wait_for(lambda: _finished(admin, sid), 120, "the study to finish")
    assert final["state"] == "completed"
    assert final["progress"]["completed"] == 60 and final["progress"]["failed"] == 0

    trials = _all(admin, sid)
    assert sorted(t["number"] for t in trials) == list(range(60))  # no duplicates, none lost
    rerun = next(t for t in trials if t["number"] == stalled["number"])
    assert rerun["state"] == "completed" and rerun["attempt"] == 2
    assert trials[0]["is_baseline"] and trials[0]["config"] == {"x": 0.5, "y": 3}

    points = {t["number"]: (t["values"]["f1"], t["values"]["f2"]) for t in trials}
    front = admin.get(f"/v1/studies/{sid}/front").json()
    assert {t["number"] for t in front["trials"]} == brute_force_front(points)


def _running_trial(client: httpx.Client, sid: int) -> dict | None:
    items = client.get(f"/v1/studies/{sid}/trials", params={"state": "running"}).json()["items"]
    done = client.get(f"/v1/studies/{sid}").json()["progress"]["completed"]
    return items[0] if items and done >= 5 else None


def _finished(client: httpx.Client, sid: int) -> dict | None:
    study = client.get(f"/v1/studies/{sid}").json()
    return study if study["state"] != "running" and study["progress"]["in_flight"] == 0 else None


def _all(client: httpx.Client, sid: int) -> list[dict]:
    return client.get(f"/v1/studies/{sid}/trials", params={"limit": 1000}).json()["items"]


@pytest.fixture
def two_replicas_with_redis(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Two API replicas on one Postgres database, joined by Redis; database polling is
    slowed to 30 s so that only Redis can wake a waiting poll quickly."""
    if not postgres_available():
        pytest.skip("PostgreSQL is not reachable")
    url = create_postgres_database()
    env = {"PARETUNE_REDIS_URL": "redis://127.0.0.1:6379/0", "PARETUNE_POLL_INTERVAL_S": "30"}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = start_service(url, tmp_path / "a", env)
    b = start_service(url, tmp_path / "b", env)
    try:
        yield a, b
    finally:
        a.stop()
        b.stop()
        drop_postgres_database(url)


def test_redis_wakes_a_long_poll_on_another_replica(two_replicas_with_redis) -> None:  # type: ignore[no-untyped-def]
    a, b = two_replicas_with_redis
    assert httpx.get(f"{a.url}/healthz").json()["redis"] is True
    token = a.make_worker_token()
    with httpx.Client(base_url=a.url, timeout=60, headers={"Authorization": f"Bearer {token}"}) as worker:
        worker_id = register(worker)
        outcome: dict = {}

        def poll() -> None:
            started = time.monotonic()
            r = worker.post("/v1/leases", json={"worker_id": worker_id, "wait_s": 20})
            outcome.update(status=r.status_code, at=time.monotonic(), waited=time.monotonic() - started)

        thread = threading.Thread(target=poll)
        thread.start()
        time.sleep(1.0)  # the poll is waiting on replica A
        created_at = time.monotonic()
        with httpx.Client(base_url=b.url, headers={"Authorization": f"Bearer {a.admin_token}"}) as admin:
            assert admin.post("/v1/studies", json=study_doc()).status_code == 201
        thread.join(25)
    assert outcome["status"] == 200
    assert outcome["at"] - created_at < 3.0, outcome  # woken by Redis, not by the 30 s database poll


def test_a_restarted_service_resumes_the_study_from_the_database(tmp_path: Path) -> None:
    """The sampler's state is rebuilt from the trials table: a new process picks up a
    half-done NSGA-II study and finishes it with no trial lost or repeated."""
    db_url = f"sqlite:///{tmp_path / 'paretune.db'}"
    first = start_service(db_url, tmp_path)
    try:
        admin = first.client()
        sid = admin.post("/v1/studies", json=study_doc(budget={"max_trials": 40})).json()["id"]
        token = first.make_worker_token()
        with httpx.Client(base_url=first.url, headers={"Authorization": f"Bearer {token}"}) as client:
            assert run(client, register(client), max_results=17, wait_s=2.0) == 17
        admin_token = first.admin_token
    finally:
        first.stop()
    second = start_service(db_url, tmp_path)
    try:
        with httpx.Client(base_url=second.url, headers={"Authorization": f"Bearer {token}"}) as client:
            assert run(client, register(client), wait_s=2.0) == 23
        admin = httpx.Client(base_url=second.url, headers={"Authorization": f"Bearer {admin_token}"})
        study = admin.get(f"/v1/studies/{sid}").json()
        assert study["state"] == "completed" and study["progress"]["completed"] == 40
        numbers = sorted(t["number"] for t in _all(admin, sid))
        assert numbers == list(range(40))
    finally:
        second.stop()

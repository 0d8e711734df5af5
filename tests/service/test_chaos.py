"""Chaos: a 400-trial study on Postgres with six workers, while a third of the workers are
killed at random moments, the control plane is restarted twice, Redis is frozen for 20 s
and Postgres is restarted once. Afterwards every trial is completed or failed exactly once,
no lease is held by a dead worker, the stored front and counts are what the trials table
says, and while Redis was frozen no request that does not need Redis took over 1 s."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import psycopg
import pytest
from conftest import study_doc
from helpers import REPO, LiveService, start_service, wait_for
from private_servers import PrivatePostgres, PrivateRedis, available

from service.domain.pareto import non_dominated_mask

FAKE_WORKER = str(REPO / "tests" / "fake_worker.py")
TRIALS = 400
pytestmark = [pytest.mark.postgres, pytest.mark.skipif(not available(), reason="needs PostgreSQL binaries")]


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[PrivatePostgres, PrivateRedis]]:
    postgres = PrivatePostgres.start()
    redis = PrivateRedis.start(tmp_path)
    try:
        yield postgres, redis
    finally:
        redis.stop()
        postgres.stop()


class Fleet:
    def __init__(self, service: LiveService, token: str, log_dir: Path) -> None:
        self.service, self.token, self.log_dir = service, token, log_dir
        self.workers: list[subprocess.Popen[bytes]] = []
        self.killed = 0

    def start(self) -> None:
        log = open(self.log_dir / f"worker-{len(self.workers)}.log", "wb")  # noqa: SIM115
        self.workers.append(subprocess.Popen(
            [sys.executable, FAKE_WORKER, self.service.url, self.token, "--resilient", "--delay", "0.6"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

    def kill_one(self, rng: random.Random) -> None:
        alive = [w for w in self.workers if w.poll() is None]
        victim = rng.choice(alive)
        os.killpg(victim.pid, signal.SIGKILL)  # between lease and result, or wherever it is
        victim.wait()
        self.killed += 1
        self.start()  # the fleet keeps its size

    def stop(self) -> None:
        for worker in self.workers:
            if worker.poll() is None:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()


class Probe(threading.Thread):
    """Requests that need no Redis, timed while Redis is frozen."""

    def __init__(self, url: str, token: str, study_id: int) -> None:
        super().__init__(daemon=True)
        self.url, self.token, self.study_id = url, token, study_id
        self.latencies: list[tuple[str, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        paths = ["/v1/me", f"/v1/studies/{self.study_id}", f"/v1/studies/{self.study_id}/trials?limit=20",
                 f"/v1/studies/{self.study_id}/front", "/v1/studies"]
        with httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=30) as c:
            while not self.stop.is_set():
                for path in paths:
                    started = time.monotonic()
                    response = c.get(path)
                    self.latencies.append((f"{path} {response.status_code}", time.monotonic() - started))
                time.sleep(0.1)


def restart(service: LiveService) -> None:
    """SIGTERM the control plane and start it again on the same port and database."""
    os.killpg(service.process.pid, signal.SIGTERM)
    service.process.wait(30)
    log = open(service.log_path, "ab")  # noqa: SIM115
    service.process = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--port", service.url.rsplit(":", 1)[1],
         "--log-level", "warning"], stdout=log, stderr=subprocess.STDOUT, env=service.env, cwd=REPO,
        start_new_session=True)
    wait_for(lambda: _healthy(service.url), 60, service.log_path)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code in (200, 503)
    except httpx.HTTPError:
        return False


def test_a_study_survives_killed_workers_restarts_and_a_frozen_redis(
        servers: tuple[PrivatePostgres, PrivateRedis], tmp_path: Path) -> None:
    postgres, redis = servers
    with psycopg.connect(postgres.url, autocommit=True) as conn:
        conn.execute("CREATE DATABASE chaos")
    db_url = postgres.url.rsplit("/", 1)[0] + "/chaos"
    service = start_service(db_url, tmp_path, {
        "PARETUNE_REDIS_URL": redis.url, "PARETUNE_LEASE_S": "3", "PARETUNE_HEARTBEAT_S": "1",
        "PARETUNE_REAPER_INTERVAL_S": "0.5"})
    rng = random.Random(20261130)
    fleet = Fleet(service, service.make_worker_token(), tmp_path)
    admin = service.client()
    doc = study_doc(budget={"max_trials": TRIALS, "max_failed_trials": TRIALS}, parallelism=12,
                    sampler={"name": "nsga2", "seed": 3, "options": {"population_size": 16}},
                    limits={"max_attempts": 6, "compile_timeout_s": 10, "run_timeout_s": 10})
    study_id = admin.post("/v1/studies", json=doc).json()["id"]
    probe = Probe(service.url, service.admin_token, study_id)
    try:
        for _ in range(6):
            fleet.start()
        progress = lambda: admin.get(f"/v1/studies/{study_id}").json()["progress"]  # noqa: E731
        wait_for(lambda: progress()["completed"] >= 20, 60, "trials to complete")
        fleet.kill_one(rng)
        restart(service)                                        # control plane, first time
        wait_for(lambda: progress()["completed"] >= 60, 60, "trials after the first restart")

        redis.freeze()                                          # 20 s: its port open, nothing answers
        frozen_at = time.monotonic()
        probe.start()
        time.sleep(rng.uniform(3, 8))
        fleet.kill_one(rng)
        while time.monotonic() - frozen_at < 20:
            time.sleep(0.2)
        probe.stop.set()
        probe.join(30)
        redis.thaw()
        done_while_frozen = progress()["completed"]

        postgres.restart()                                      # the database, once
        time.sleep(rng.uniform(0.5, 2))
        restart(service)                                        # control plane, second time
        final = wait_for(lambda: _finished(admin, study_id), 240, service.log_path)
    finally:
        fleet.stop()
        service.stop()

    print(f"chaos: {fleet.killed} workers killed, {done_while_frozen} trials completed by the end of the "
          f"freeze, {len(probe.latencies)} probe requests (slowest {max(t for _, t in probe.latencies):.3f} s)")
    assert fleet.killed == 2 and done_while_frozen > 60  # work went on while Redis was frozen
    assert done_while_frozen < TRIALS - 50  # and was still going on when Postgres and the service restarted
    slow = [(what, round(took, 2)) for what, took in probe.latencies if took > 1.0]
    assert probe.latencies and not slow, slow
    assert all(what.split()[-1] == "200" for what, _ in probe.latencies)

    with psycopg.connect(db_url) as conn:
        rows = conn.execute(
            "SELECT number, state, told, on_front, feasible, values, lease_token, lease_expires_at "
            "FROM trials WHERE study_id = %s ORDER BY number", (study_id,)).fetchall()
        stored = conn.execute("SELECT n_created, n_completed, n_failed, n_cancelled, front_size, state "
                              "FROM studies WHERE id = %s", (study_id,)).fetchone()
    numbers = [r[0] for r in rows]
    assert numbers == list(range(TRIALS))  # each trial exactly once, none lost
    states = [r[1] for r in rows]
    assert set(states) <= {"completed", "failed"}  # finished, exactly once each
    assert all(r[2] for r in rows)  # every result told to the scheduling step
    assert not any(r[1] == "running" for r in rows)  # no lease held by a dead worker
    assert final["state"] == "completed" and stored[5] == "completed"
    assert stored[:4] == (TRIALS, states.count("completed"), states.count("failed"), 0)

    completed = [r for r in rows if r[1] == "completed" and r[4]]
    points = np.array([[r[5]["f1"], r[5]["f2"]] for r in completed])
    expected_front = {r[0] for r, keep in zip(completed, non_dominated_mask(points), strict=True) if keep}
    stored_front = {r[0] for r in rows if r[3]}
    assert stored_front == expected_front and stored[4] == len(expected_front)


def _finished(admin: httpx.Client, study_id: int) -> dict | None:
    try:
        study = admin.get(f"/v1/studies/{study_id}").json()
    except httpx.HTTPError:
        return None
    done = study["state"] in ("completed", "failed", "cancelled") and study["progress"]["in_flight"] == 0
    return study if done else None

"""Readiness follows what serving needs. Two replicas on one Postgres database serve a study
to two workers while their Redis is killed, brought back, then frozen (its port open, nothing
answering): every readiness and liveness probe of both replicas answers 200 throughout, the
outage shows in the body and in `paretune_redis_up`, no worker request fails, and the study
completes with every trial."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
from conftest import study_doc
from fake_worker import lease, register, result_for
from helpers import LiveService, start_service
from private_servers import PrivateRedis

TRIALS = 200
THINK_S = 0.2  # per trial: two workers take 20 s or more, longer than the outages


class Prober(threading.Thread):
    """/healthz and /livez of every replica, ten times a second."""

    def __init__(self, replicas: list[LiveService]) -> None:
        super().__init__(daemon=True)
        self.replicas = replicas
        self.statuses: Counter[tuple[str, int]] = Counter()
        self.redis_seen: dict[str, set[object]] = {r.url: set() for r in replicas}
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.is_set():
            for replica in self.replicas:
                for path in ("/healthz", "/livez"):
                    r = httpx.get(replica.url + path, timeout=5)
                    self.statuses[(path, r.status_code)] += 1
                    if path == "/healthz":
                        self.redis_seen[replica.url].add(r.json()["redis"])
            time.sleep(0.1)


def work(replica: LiveService, token: str, failures: list[str], stop: threading.Event) -> None:
    """A worker that leases and reports, with a short think time; any non-2xx is a failure."""
    with httpx.Client(base_url=replica.url, timeout=30, headers={"Authorization": f"Bearer {token}"}) as client:
        worker_id = register(client)
        while not stop.is_set():
            try:
                held = lease(client, worker_id, wait_s=1.0)
            except httpx.HTTPStatusError as exc:
                failures.append(f"lease: {exc.response.status_code} {exc.response.text[:200]}")
                continue
            if held is None:
                continue
            time.sleep(THINK_S)
            r = client.post(f"/v1/leases/{held['token']}/result", json=result_for(held["trial"]))
            if r.status_code != 200:
                failures.append(f"result: {r.status_code} {r.text[:200]}")


def redis_up(replica: LiveService) -> float | None:
    for line in httpx.get(replica.url + "/metrics", timeout=5).text.splitlines():
        if line.startswith("paretune_redis_up "):
            return float(line.split()[1])
    return None


def completed(replica: LiveService, study_id: int) -> int:
    with replica.client() as client:
        return int(client.get(f"/v1/studies/{study_id}").json()["progress"]["completed"])


@pytest.mark.slow
@pytest.mark.postgres
def test_replicas_stay_ready_while_redis_is_killed_and_frozen(postgres_database: str, tmp_path: Path) -> None:
    redis = PrivateRedis.start(tmp_path)
    env = {"PARETUNE_REDIS_URL": redis.url}
    replicas: list[LiveService] = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        replicas.append(start_service(postgres_database, tmp_path / name, env))
    a, b = replicas
    prober = Prober(replicas)
    stop = threading.Event()
    failures: list[str] = []
    workers: list[threading.Thread] = []
    try:
        assert all(redis_up(r) == 1.0 for r in replicas)
        with a.client() as client:
            r = client.post("/v1/studies", json=study_doc(budget={"max_trials": TRIALS}, parallelism=4))
            assert r.status_code == 201, r.text
            study_id = r.json()["id"]
        token = a.make_worker_token()
        workers = [threading.Thread(target=work, args=(replica, token, failures, stop), daemon=True)
                   for replica in replicas]
        prober.start()
        for w in workers:
            w.start()

        time.sleep(2)
        redis.kill()  # gone, its port closed
        time.sleep(4)
        down = [redis_up(r) for r in replicas]
        during_kill = completed(a, study_id)
        redis = PrivateRedis.start(tmp_path, redis.port)
        time.sleep(3)
        redis.freeze()  # hung: its port open, nothing answers
        time.sleep(4)
        hung = [redis_up(r) for r in replicas]
        before_thaw = completed(a, study_id)
        redis.thaw()

        deadline = time.monotonic() + 180
        while completed(a, study_id) < TRIALS:
            assert time.monotonic() < deadline, f"{completed(a, study_id)} of {TRIALS} trials completed"
            time.sleep(0.5)
        with a.client() as client:
            study = client.get(f"/v1/studies/{study_id}").json()
    finally:
        stop.set()
        prober.stop_event.set()
        for thread in (prober, *workers):  # done with the replicas before they stop
            if thread.is_alive():
                thread.join(timeout=30)
        for r in replicas:
            r.stop()
        redis.stop()

    assert not failures, failures[:5]
    assert set(prober.statuses) == {("/healthz", 200), ("/livez", 200)}, prober.statuses
    assert all({True, False} <= seen for seen in prober.redis_seen.values()), prober.redis_seen
    assert down == [0.0, 0.0] and hung == [0.0, 0.0]
    assert 0 < during_kill < before_thaw < TRIALS  # the study ran through both outages
    assert study["state"] == "completed" and study["progress"]["completed"] == TRIALS

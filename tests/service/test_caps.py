"""Documents at the service's caps (a grid of a million points, parallelism 1000) cost the
control plane under 100 MB, and fill their queues in steps that each hold the study's lock
briefly (nearly all under 100 ms; none near a step that asked the whole parallelism at
once); past the caps they are refused."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import pytest
from conftest import study_doc
from helpers import create_postgres_database, drop_postgres_database, postgres_available, start_service, wait_for

from service.studies.document import MAX_PARALLELISM
from service.studies.space import MAX_GRID_POINTS

CHOICES = 1000  # two parameters of 1000 values: a grid of exactly MAX_GRID_POINTS
GRID = [{"name": "a", "type": "categorical", "choices": list(range(CHOICES)), "default": 0},
        {"name": "b", "type": "categorical", "choices": [f"v{i}" for i in range(CHOICES)], "default": "v0"}]


def rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024  # type: ignore[union-attr]


def histogram_over(metrics: str, name: str, limit: str) -> tuple[int, int]:
    """(observations, observations over `limit` seconds) of a Prometheus histogram."""
    count = float(re.search(rf"^{name}_count (\S+)$", metrics, re.M).group(1))  # type: ignore[union-attr]
    under = float(re.search(rf'^{name}_bucket{{le="{limit}"}} (\S+)$', metrics, re.M).group(1))  # type: ignore[union-attr]
    return int(count), int(count - under)


@pytest.mark.parametrize("database", ["sqlite", "postgres"])
def test_documents_at_the_caps_cost_little_and_hold_no_lock_long(database: str, tmp_path: Path) -> None:
    assert CHOICES * CHOICES == MAX_GRID_POINTS
    if database == "postgres" and not postgres_available():
        pytest.skip("PostgreSQL is not reachable")
    db_url = create_postgres_database() if database == "postgres" else f"sqlite:///{tmp_path / 'caps.db'}"
    service = start_service(db_url, tmp_path, serve_args=("--no-scheduler-process",))  # its steps on /metrics
    try:
        admin = service.client()
        admin.get("/v1/studies").raise_for_status()
        before = rss_mb(service.process.pid)
        grid = admin.post("/v1/studies", json=study_doc(
            name="grid at the cap", space=GRID, sampler={"name": "grid", "seed": 4},
            budget={"max_trials": 1_000_000}, parallelism=MAX_PARALLELISM))
        assert grid.status_code == 201, grid.text
        wide = admin.post("/v1/studies", json=study_doc(
            name="parallelism at the cap", sampler={"name": "random", "seed": 4},
            budget={"max_trials": 1_000_000}, parallelism=MAX_PARALLELISM))
        assert wide.status_code == 201, wide.text
        started = time.monotonic()
        for study in (grid.json(), wide.json()):  # queued lazily, a batch per step
            wait_for(lambda s=study: admin.get(f"/v1/studies/{s['id']}").json()["progress"]["created"]
                     >= MAX_PARALLELISM, 120, service.log_path)
        filled_s = time.monotonic() - started
        grown = rss_mb(service.process.pid) - before
        metrics = httpx.get(f"{service.url}/metrics").text
        configs = {(t["config"]["a"], t["config"]["b"]) for t in
                   admin.get(f"/v1/studies/{grid.json()['id']}/trials", params={"limit": 1000}).json()["items"]}
    finally:
        service.stop()
        if database == "postgres":
            drop_postgres_database(db_url)
    assert grown < 100, f"the server grew by {grown:.0f} MB"
    # a busy machine (the suite runs two test processes on two CPUs) holds up a thread now and
    # then: a step over 100 ms now and then is noise; one over 500 ms, or one in ten over
    # 100 ms, is a step doing too much under the lock
    steps, slow_steps = histogram_over(metrics, "paretune_step_seconds", "0.1")
    _, stuck_steps = histogram_over(metrics, "paretune_step_seconds", "0.5")
    assert steps >= 2 * MAX_PARALLELISM // 64 and slow_steps <= steps // 10 and stuck_steps == 0, \
        (steps, slow_steps, stuck_steps)
    if database == "sqlite":
        locks, slow_locks = histogram_over(metrics, "paretune_write_lock_seconds", "0.1")
        _, stuck_locks = histogram_over(metrics, "paretune_write_lock_seconds", "0.5")
        assert locks > 0 and slow_locks <= locks // 10 and stuck_locks == 0, (locks, slow_locks, stuck_locks)
    assert len(configs) == 1000  # the grid's points, each once (the baseline's among them at most twice)
    print(f"{database}: filled 2 x {MAX_PARALLELISM} in {filled_s:.1f} s, grew {grown:.1f} MB, {steps} steps")


def test_documents_past_the_caps_are_refused(tmp_path: Path) -> None:
    service = start_service(f"sqlite:///{tmp_path / 'caps.db'}", tmp_path)
    try:
        admin = service.client()
        bools = [{"name": f"p{i}", "type": "bool", "default": False} for i in range(23)]  # 8.4 million points
        r = admin.post("/v1/studies", json=study_doc(space=bools, sampler={"name": "grid"}))
        assert r.status_code == 422 and r.json()["error"]["field"] == "sampler.name", r.text
        assert "over the limit" in r.json()["error"]["message"]
        r = admin.post("/v1/studies", json=study_doc(parallelism=MAX_PARALLELISM + 1))
        assert r.status_code == 422 and r.json()["error"]["field"] == "parallelism", r.text
        r = admin.post("/v1/studies", json=study_doc(space=bools, sampler={"name": "tpe"}))
        assert r.status_code == 201  # a large space is fine for samplers that never enumerate it
    finally:
        service.stop()

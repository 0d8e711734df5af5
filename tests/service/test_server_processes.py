"""`paretune serve --processes N --no-scheduler-process`: N server processes on one port, each
a replica with its own scheduler, finish a study together with every trial told once; by
default on Postgres the steps run in a process of their own, started again if it dies and
gone with a server killed outright; SQLite is refused; a database that takes no connection
answers 503 in the error shape, and serving resumes; a scheduler run on its own (as the
Kubernetes manifests run it) serves its step metrics."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from conftest import study_doc
from helpers import REPO, LiveService, cpu_seconds, free_port, run_cli, start_service, wait_for

TRIALS = 80
pytestmark = pytest.mark.postgres


def server_processes(pid: int) -> list[int]:
    """The processes uvicorn started to serve (not multiprocessing's resource tracker)."""
    found = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return [c for c in found if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()]


def start_study(service: LiveService) -> tuple[Any, int]:
    """An NSGA-II study of TRIALS trials with four fake workers on it: (admin client, its id)."""
    doc = study_doc(budget={"max_trials": TRIALS}, parallelism=8,
                    sampler={"name": "nsga2", "seed": 4, "options": {"population_size": 10}})
    admin = service.client()
    study_id = admin.post("/v1/studies", json=doc).json()["id"]
    token = service.make_worker_token()
    for _ in range(4):
        service.start_fake_worker(token, "--delay", "0.02")
    return admin, int(study_id)


def test_two_processes_on_one_port_finish_a_study(postgres_database: str, tmp_path: Path) -> None:
    service = start_service(postgres_database, tmp_path, {"PARETUNE_POLL_INTERVAL_S": "0.2"},
                            ("--processes", "2", "--no-scheduler-process"))
    try:
        processes = wait_for(lambda: len(found := server_processes(service.process.pid)) == 2 and found, 30,
                             "two server processes")
        assert scheduler_process(service.process.pid) is None
        # each process has its own pool, together within the default one's 30 steady connections
        environ = [Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") for pid in processes]
        assert all(b"PARETUNE_DB_POOL_SIZE=15" in e and b"PARETUNE_MIGRATE_ON_START=false" in e for e in environ)
        admin, study_id = start_study(service)
        wait_for(lambda: (s := admin.get(f"/v1/studies/{study_id}").json())["state"] == "completed"
                 and s["progress"]["in_flight"] == 0, 120, service.log_path)
        # both processes take connections: requests on fresh connections, each accepted by
        # whichever process is first, cost each process CPU (an idle one only scans once a second)
        busy_before = [cpu_seconds(pid) for pid in processes]
        for _ in range(150):
            httpx.get(f"{service.url}/v1/studies/{study_id}/trials", headers=admin.headers, timeout=30)
        busy_after = [cpu_seconds(pid) for pid in processes]
        with psycopg.connect(postgres_database) as conn:
            rows = conn.execute("SELECT state, told FROM trials WHERE study_id = %s", (study_id,)).fetchall()
    finally:
        service.stop()
    assert len(rows) == TRIALS and all(state == "completed" and told for state, told in rows)
    assert all(after - before >= 0.05 for before, after in zip(busy_before, busy_after, strict=True)), (
        busy_before, busy_after)  # both processes served
    assert not [pid for pid in processes if Path(f"/proc/{pid}").exists()]


def test_several_processes_need_postgres(tmp_path: Path) -> None:
    env = {**os.environ, "PARETUNE_DATABASE_URL": f"sqlite:///{tmp_path / 'p.db'}", "PARETUNE_DATA_DIR": str(tmp_path)}
    result = run_cli("serve", "--port", "9", "--processes", "2", env=env)
    assert result.returncode != 0
    assert "--processes above 1 needs Postgres (PARETUNE_DATABASE_URL)" in result.stderr + result.stdout


def test_a_database_that_takes_no_connection_answers_503(postgres_database: str, tmp_path: Path) -> None:
    service = start_service(postgres_database, tmp_path)
    name = postgres_database.rsplit("/", 1)[1]
    admin_url = postgres_database.rsplit("/", 1)[0] + "/postgres"
    try:
        client = service.client()
        assert client.get("/v1/studies").status_code == 200
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS false')
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))
        refused = client.get("/v1/studies")
        assert refused.status_code == 503, refused.text
        assert refused.headers["Retry-After"] == "1"
        assert refused.json() == {"error": {"code": "unavailable", "field": None,
                                            "message": "the database is unavailable for the moment; retry shortly"}}
        assert httpx.get(f"{service.url}/healthz", timeout=5).status_code == 503
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS true')
        assert client.get("/v1/studies").status_code == 200
    finally:
        service.stop()


def scheduler_process(pid: int) -> int | None:
    """The live `paretune scheduler` child of `pid` (started from a thread of its own)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and fields[0] != "Z" and b"scheduler" in (stat.parent / "cmdline").read_bytes():
                return int(stat.parent.name)
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
    return None


def test_a_scheduler_process_steps_the_studies_and_is_started_again_when_killed(postgres_database: str,
                                                                                  tmp_path: Path) -> None:
    """`serve --processes 2` on Postgres: the server processes step nothing (their wake-ups go
    to the scheduler process over Postgres's LISTEN/NOTIFY); killed mid-study, the scheduler
    process is started again and the study finishes with every trial once."""
    service = start_service(postgres_database, tmp_path, {"PARETUNE_POLL_INTERVAL_S": "0.2"},
                            ("--processes", "2"))
    try:
        first = wait_for(lambda: scheduler_process(service.process.pid), 30, "a scheduler process")
        admin, study_id = start_study(service)
        wait_for(lambda: admin.get(f"/v1/studies/{study_id}").json()["progress"]["completed"] >= TRIALS // 4, 60,
                 service.log_path)
        os.kill(first, signal.SIGKILL)
        second = wait_for(lambda: (pid := scheduler_process(service.process.pid)) not in (None, first) and pid, 30,
                          "the scheduler process started again")
        wait_for(lambda: (s := admin.get(f"/v1/studies/{study_id}").json())["state"] == "completed"
                 and s["progress"]["in_flight"] == 0, 120, service.log_path)
        steps = [httpx.get(f"{service.url}/metrics", timeout=30).text for _ in range(20)]
        with psycopg.connect(postgres_database) as conn:
            rows = conn.execute("SELECT number, state, told FROM trials WHERE study_id = %s", (study_id,)).fetchall()
    finally:
        service.stop()
    assert sorted(number for number, _, _ in rows) == list(range(TRIALS))  # none asked twice, none lost
    assert all(state == "completed" and told for _, state, told in rows)
    assert all("paretune_step_seconds_count 0.0" in text for text in steps)  # no server process stepped
    assert not Path(f"/proc/{second}").exists()  # stopped with the server


def test_a_scheduler_process_ends_with_a_server_killed_outright(postgres_database: str, tmp_path: Path) -> None:
    """SIGKILL gives the server no time to stop its scheduler process: that process sees its
    standard input close and stops on its own, as it does with SIGTERM."""
    service = start_service(postgres_database, tmp_path)
    try:
        child = wait_for(lambda: scheduler_process(service.process.pid), 30, "a scheduler process")
        os.kill(service.process.pid, signal.SIGKILL)  # the server alone, not its process group
        service.process.wait()
        wait_for(lambda: not alive(child), 20, "the scheduler process to stop")
    finally:
        service.stop()
    assert "the process that started this scheduler is gone; stopping" in service.log_path.read_text()


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_scheduler_run_on_its_own_steps_the_studies_and_serves_its_metrics(postgres_database: str,
                                                                              tmp_path: Path) -> None:
    """The Kubernetes layout: server replicas with PARETUNE_SCHEDULER_PROCESS=true and a
    `paretune scheduler --metrics-port` of their own; the study finishes, the steps are
    counted on the scheduler's port, and SIGTERM stops it cleanly."""
    service = start_service(postgres_database, tmp_path, {"PARETUNE_POLL_INTERVAL_S": "0.2",
                                                          "PARETUNE_SCHEDULER_PROCESS": "true"})
    port = free_port()
    scheduler = subprocess.Popen([sys.executable, "-m", "service.cli", "scheduler", "--metrics-port", str(port)],
                                 env=service.env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        admin, study_id = start_study(service)
        wait_for(lambda: (s := admin.get(f"/v1/studies/{study_id}").json())["state"] == "completed"
                 and s["progress"]["in_flight"] == 0, 120, service.log_path)
        served = httpx.get(f"{service.url}/metrics", timeout=30).text
        exported = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text
    finally:
        scheduler.send_signal(signal.SIGTERM)
        stopped = scheduler.wait(30)
        service.stop()
    assert "paretune_step_seconds_count 0.0" in served  # the server process stepped nothing
    steps = next(float(line.split()[1]) for line in exported.splitlines()
                 if line.startswith("paretune_step_seconds_count"))
    assert steps >= TRIALS / 8  # each step queues at most the study's parallelism
    assert stopped == 0, scheduler.stderr.read() if scheduler.stderr else ""

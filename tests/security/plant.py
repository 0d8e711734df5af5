"""A real embedded service (SQLite in a data directory, as `paretune up` runs it), real
worker agents (`python -m workers`) at a chosen isolation level, and what the tests of
tests/security ask of them."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from helpers import REPO, LiveService, start_service, wait_for

FAST_MEASURE = {"warmup_s": 0.005, "min_repeats": 5, "max_repeats": 50, "target_s": 0.03}


@dataclass
class Worker:
    process: subprocess.Popen[bytes]
    log_path: Path
    token: str
    token_file: Path
    cache_dir: Path
    work_dir: Path
    name: str

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@dataclass
class Plant:
    """The embedded service, its data directory and the workers started against it."""

    service: LiveService
    data_dir: Path
    tmp: Path
    workers: list[Worker] = field(default_factory=list)

    @property
    def db_path(self) -> Path:
        return self.data_dir / "paretune.db"

    def client(self) -> httpx.Client:
        return self.service.client()

    def start_worker(self, isolation: str, *extra: str, name: str | None = None) -> Worker:
        """A worker agent in its own process. Its token is in a token file (0600) and, as a
        careless operator might leave it, also in PARETUNE_WORKER_TOKEN."""
        name = name or f"{isolation}-{uuid.uuid4().hex[:6]}"
        token = self.service.make_worker_token()
        home = self.tmp / name
        home.mkdir()
        token_file = home / "worker.token"
        token_file.write_text(token)
        token_file.chmod(0o600)
        log_path = home / "worker.log"
        cache_dir, work_dir = home / "cache", home / "work"
        env = {**self.service.env, "PARETUNE_WORKER_TOKEN": token}
        command = [sys.executable, "-m", "workers", "--server", self.service.url, "--token-file", str(token_file),
                   "--name", name, "--cache-dir", str(cache_dir), "--work-dir", str(work_dir),
                   "--isolation", isolation, "--no-prefetch", "--backends", "cpu,python", *extra]
        process = subprocess.Popen(command, stdout=log_path.open("wb"), stderr=subprocess.STDOUT, env=env,
                                   cwd=REPO, start_new_session=True)
        worker = Worker(process, log_path, token, token_file, cache_dir, work_dir, name)
        self.workers.append(worker)
        wait_for(lambda: "registered as worker" in worker.log() or process.poll() is not None, 60, log_path)
        assert process.poll() is None, worker.log()
        return worker

    def stop(self) -> None:
        for worker in self.workers:
            if worker.process.poll() is None:
                os.killpg(worker.process.pid, signal.SIGTERM)
        for worker in self.workers:
            try:
                worker.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(worker.process.pid, signal.SIGKILL)
                worker.process.wait()


def start_plant(tmp_path: Path) -> Plant:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    service = start_service(f"sqlite:///{data_dir / 'paretune.db'}", data_dir,
                            {"PARETUNE_LEASE_S": "30", "PARETUNE_HEARTBEAT_S": "1"})
    return Plant(service, data_dir, tmp_path)


def python_study(name: str, source: str, entry: str, *, sandbox: dict[str, int] | None = None,
                 run_timeout_s: float = 60, team_token: str | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "kernel": {"backend": "python", "source": source, "entry": entry},
        "space": [{"name": "x", "type": "categorical", "choices": [1], "default": 1}],
        "objectives": ["f1"],
        "sampler": {"name": "random", "seed": 1},
        "budget": {"max_trials": 1},
        "parallelism": 1,
        "limits": {"compile_timeout_s": 60, "run_timeout_s": run_timeout_s, "max_attempts": 1,
                   **({"sandbox": sandbox} if sandbox else {})},
    }


def cpu_study(name: str, source: str, *, sandbox: dict[str, int] | None = None, n: int = 32,
              config: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "kernel": {"backend": "cpu", "source": source, "entry": "matmul", "workload": [{"dims": {"n": n}}],
                   "options": {"problem": "matmul"}},
        "space": [{"name": "opt", "type": "categorical", "choices": ["-O1", "-O2"],
                   "default": (config or {}).get("opt", "-O1")}],
        "objectives": ["runtime_ms"],
        "sampler": {"name": "random", "seed": 1},
        "budget": {"max_trials": 1},
        "parallelism": 1,
        "measure": FAST_MEASURE,
        "limits": {"compile_timeout_s": 60, "run_timeout_s": 60, "max_attempts": 1,
                   **({"sandbox": sandbox} if sandbox else {})},
    }


def create(client: httpx.Client, document: dict[str, Any]) -> int:
    response = client.post("/v1/studies", json=document)
    assert response.status_code == 201, response.text
    return int(response.json()["id"])


def finished_trial(client: httpx.Client, study_id: int, timeout: float = 120) -> dict[str, Any]:
    """The study's one trial once the study is done."""

    def done() -> dict[str, Any] | None:
        study = client.get(f"/v1/studies/{study_id}").json()
        if study["state"] in ("completed", "failed", "cancelled") and not study["progress"]["in_flight"]:
            return study
        return None

    wait_for(done, timeout, f"study {study_id}")
    (trial,) = client.get(f"/v1/studies/{study_id}/trials").json()["items"]
    return client.get(f"/v1/studies/{study_id}/trials/{trial['number']}").json()  # type: ignore[no-any-return]


def processes(predicate: Any) -> list[tuple[int, str]]:
    """(pid, cmdline) of live processes for which predicate(status dict, cmdline) holds."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            status = dict(line.split(":\t", 1) for line in (entry / "status").read_text().splitlines()
                          if ":\t" in line)
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if status.get("State", "").startswith(("Z", "X")):
            continue
        if predicate(status, cmdline):
            found.append((int(entry.name), cmdline))
    return found


def of_uids(uids: list[int]) -> list[tuple[int, str]]:
    return processes(lambda status, _: int(status["Uid"].split()[0]) in uids)


def with_marker(marker: str) -> list[tuple[int, str]]:
    return processes(lambda _, cmdline: marker in cmdline)


def sandbox_uids(client: httpx.Client, name: str) -> list[int]:
    (worker,) = [w for w in client.get("/v1/workers").json() if w["name"] == name]
    return list(worker["fingerprint"]["isolation_detail"]["sandbox_uids"])


def superusers(db_path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db_path) as connection:
        return connection.execute("SELECT id, name, superuser, revoked_at FROM api_tokens ORDER BY id").fetchall()

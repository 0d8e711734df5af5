"""Shared test helpers: free ports, a real service in a subprocess, API calls."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
POSTGRES_ADMIN_URL = os.environ.get("PARETUNE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")


def wait_for(predicate: Any, timeout: float, what: str | Path) -> Any:
    """Poll `predicate` until it returns something truthy; on time-out, fail naming `what`
    (a log file's tail when given a path)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    detail = f"log:\n{what.read_text()[-4000:]}" if isinstance(what, Path) else what
    raise AssertionError(f"timed out waiting: {detail}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def postgres_available() -> bool:
    try:
        import psycopg

        with psycopg.connect(POSTGRES_ADMIN_URL, connect_timeout=3):
            return True
    except Exception:
        return False


def create_postgres_database() -> str:
    """A fresh database for this test run; returns its URL."""
    import psycopg

    name = f"paretune_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return POSTGRES_ADMIN_URL.rsplit("/", 1)[0] + "/" + name


def drop_postgres_database(url: str) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1]
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run_async(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """asyncio.run in a thread of its own: a test process that has run the browser tests
    (Playwright's sync API) keeps an event loop running in its main thread."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "service.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout, cwd=REPO)


@dataclass
class LiveService:
    """`paretune serve` running in a subprocess against a real database."""

    url: str
    admin_token: str
    db_url: str
    env: dict[str, str]
    process: subprocess.Popen[bytes]
    log_path: Path
    children: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def client(self, token: str | None = None) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=60,
                            headers={"Authorization": f"Bearer {token or self.admin_token}"})

    def make_worker_token(self, pool: str = "default") -> str:
        with self.client() as c:
            r = c.post("/v1/tokens", json={"name": f"worker-{uuid.uuid4().hex[:6]}", "kind": "worker", "pool": pool})
            r.raise_for_status()
            return str(r.json()["token"])

    def make_user_token(self, role: str = "member", team: str | None = None) -> str:
        with self.client() as c:
            if team is not None:
                c.post("/v1/teams", json={"name": team})
            body: dict[str, Any] = {"name": f"user-{uuid.uuid4().hex[:6]}", "role": role, "team": team}
            r = c.post("/v1/tokens", json=body)
            r.raise_for_status()
            return str(r.json()["token"])

    def start_worker(self, token: str, *extra: str, name: str = "w") -> subprocess.Popen[bytes]:
        log = open(self.log_path.with_name(f"worker-{name}-{len(self.children)}.log"), "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "worker", "--server", self.url, "--token", token,
             "--name", name, *extra],
            stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=REPO, start_new_session=True,
        )
        self.children.append(proc)
        return proc

    def start_fake_worker(self, token: str, *extra: str, url: str | None = None) -> subprocess.Popen[bytes]:
        """tests/fake_worker.py against this service (or `url`), stopped with it."""
        log = open(self.log_path.with_name(f"fake-{len(self.children)}.log"), "wb")  # noqa: SIM115
        proc = subprocess.Popen([sys.executable, str(REPO / "tests" / "fake_worker.py"), url or self.url, token,
                                 *extra], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.children.append(proc)
        return proc

    def stop(self) -> None:
        for proc in [*self.children, self.process]:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in [*self.children, self.process]:
            end_process_group(proc, timeout=15)


def end_process_group(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 15) -> None:
    """Signal a process started with start_new_session=True and its children; SIGKILL
    what is still there after `timeout`."""
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    with contextlib.suppress(ProcessLookupError):  # children that outlived their parent
        os.killpg(proc.pid, signal.SIGKILL)


def cpu_seconds(pid: int) -> float:
    """User and system CPU time a live process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_service(db_url: str, workdir: Path, extra_env: dict[str, str] | None = None,
                  serve_args: tuple[str, ...] = ()) -> LiveService:
    port = free_port()
    env = {**os.environ, "PARETUNE_DATABASE_URL": db_url, "PARETUNE_DATA_DIR": str(workdir),
           "PYTHONUNBUFFERED": "1", **(extra_env or {})}
    token = run_cli("token", "create", "--name", "test-admin", "--superuser", env=env)
    assert token.returncode == 0, token.stderr
    log_path = workdir / "service.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--port", str(port), "--log-level", "warning", *serve_args],
        stdout=open(log_path, "wb"), stderr=subprocess.STDOUT, env=env, cwd=REPO,  # noqa: SIM115
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"service exited: {log_path.read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return LiveService(url, token.stdout.strip(), db_url, env, proc, log_path)
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"service did not start: {log_path.read_text()[-3000:]}")

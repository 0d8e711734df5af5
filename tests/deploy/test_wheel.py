"""The wheel as an operator installs it: built from a copy of the source tree, installed
(not editable) into a fresh virtual environment outside the repository, then the steps of
docs/operations.md ("From nothing to a control plane and a worker"), run line by line: the
worker-only install refuses to serve and names the extra, the full install migrates a fresh
Postgres database, serves, and a worker of the same install completes a small study."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import httpx
import pytest
from helpers import (
    REPO,
    create_postgres_database,
    drop_postgres_database,
    end_process_group,
    free_port,
    postgres_available,
    wait_for,
)

DOC = REPO / "docs" / "operations.md"
SERVICE_DISTRIBUTIONS = {"fastapi", "uvicorn", "sqlalchemy", "alembic", "psycopg", "optuna", "redis",
                         "prometheus-client", "starlette"}
DOC_DATABASE_URL = "postgresql://paretune:PASSWORD@127.0.0.1:5432/paretune"
DOC_SERVER = "http://127.0.0.1:8000"

# The doc's lines, in order. `&` marks a long-running step, started in the background.
WORKER_ONLY = [
    "python3 -m venv /opt/paretune",
    "/opt/paretune/bin/pip install ./paretune-VERSION-py3-none-any.whl",
]
SERVICE = [
    "/opt/paretune/bin/pip install './paretune-VERSION-py3-none-any.whl[service]'",
    f"export PARETUNE_DATABASE_URL={DOC_DATABASE_URL}",
    "/opt/paretune/bin/paretune db upgrade",
    "/opt/paretune/bin/paretune db current",
    "/opt/paretune/bin/paretune token create --superuser --name operator > admin-token",
    "/opt/paretune/bin/paretune token create --worker --pool default --name cpu-1 > worker-token",
    "PARETUNE_MIGRATE_ON_START=false /opt/paretune/bin/paretune serve --host 0.0.0.0 --port 8000 &",
    f"/opt/paretune/bin/paretune worker --server {DOC_SERVER} --pool default --token-file worker-token &",
    f"export PARETUNE_SERVER={DOC_SERVER} PARETUNE_TOKEN=$(cat admin-token)",
    "/opt/paretune/bin/paretune study create -f study.yaml --watch",
]
STUDY_YAML = """\
name: first study
kernel: {backend: cpu, builtin: matmul, workload: [{dims: {n: 64}}]}
objectives: [runtime_ms, p99_ms]
budget: {max_trials: 4}
parallelism: 2
measure: {warmup_s: 0.01, min_repeats: 10, max_repeats: 200, target_s: 0.05}
"""


def test_the_documented_steps_name_every_command_this_test_runs() -> None:
    text = DOC.read_text()
    missing = [line for line in WORKER_ONLY + SERVICE if line not in text]
    assert not missing, f"docs/operations.md lacks these install steps: {missing}"
    assert STUDY_YAML in text, "docs/operations.md shows a different study.yaml than the one the wheel test runs"


def _version() -> str:
    return str(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"])


def _copy_source(target: Path) -> None:
    """The files a clean clone has (tracked, or new and not ignored): the build sees no
    .venv, build/ or egg-info of this checkout."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


class Operator:
    """Runs the doc's lines in one shell-like state (cwd, exported variables)."""

    def __init__(self, home: Path, venv: Path, db_url: str, port: int) -> None:
        self.home, self.port = home, port
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("PARETUNE_", "PYTHON", "VIRTUAL_ENV"))}
        self.env["PATH"] = os.pathsep.join(p for p in self.env["PATH"].split(os.pathsep) if ".venv" not in p)
        self.env["COLUMNS"] = "200"
        self.substitutions = {
            "python3 -m venv": f"{sys.executable} -m venv",
            "/opt/paretune": str(venv),
            "VERSION": _version(),
            DOC_DATABASE_URL: db_url,
            DOC_SERVER: f"http://127.0.0.1:{port}",
            "--port 8000": f"--port {port}",
            "--host 0.0.0.0": "--host 127.0.0.1",
        }
        self.background: list[subprocess.Popen[bytes]] = []

    def shell_line(self, line: str) -> str:
        for doc_text, here in self.substitutions.items():
            line = line.replace(doc_text, here)
        return line

    def run(self, line: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        script = self.shell_line(line)
        if script.startswith("export "):
            out = subprocess.run(["bash", "-c", f"{script}; env -0"], cwd=self.home, env=self.env,
                                 capture_output=True, text=True, timeout=60, check=True)
            self.env = dict(item.split("=", 1) for item in out.stdout.split("\0") if "=" in item)
            return out
        return subprocess.run(["bash", "-c", script], cwd=self.home, env=self.env, capture_output=True, text=True,
                              timeout=timeout)

    def start(self, line: str, log: Path) -> subprocess.Popen[bytes]:
        script = self.shell_line(line).removesuffix("&").strip()
        proc = subprocess.Popen(["bash", "-c", script], cwd=self.home, env=self.env,
                                stdout=open(log, "wb"), stderr=subprocess.STDOUT,  # noqa: SIM115
                                start_new_session=True)
        self.background.append(proc)
        return proc

    def stop(self) -> None:
        for proc in reversed(self.background):  # the worker drains first, then the service stops
            end_process_group(proc, timeout=45)


def _ok(result: subprocess.CompletedProcess[str], what: str) -> str:
    output = f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert result.returncode == 0, f"{what} failed ({result.returncode}):\n{output}"
    return result.stdout


@pytest.mark.slow
@pytest.mark.postgres
def test_installed_wheel_migrates_serves_and_completes_a_study(tmp_path: Path) -> None:
    if not postgres_available():
        pytest.skip("PostgreSQL is not reachable")
    source, home = tmp_path / "source", tmp_path / "operator"
    source.mkdir()
    home.mkdir()
    _copy_source(source)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(home), str(source)],
                           capture_output=True, text=True, timeout=300)
    _ok(built, "pip wheel")
    wheel = home / f"paretune-{_version()}-py3-none-any.whl"
    assert wheel.is_file(), list(home.iterdir())
    (home / "study.yaml").write_text(STUDY_YAML)

    db_url = create_postgres_database()
    operator = Operator(home, tmp_path / "venv", db_url, free_port())
    try:
        for line in WORKER_ONLY:
            _ok(operator.run(line), line)
        venv_python = str(tmp_path / "venv" / "bin" / "python")
        installed = _ok(operator.run(f"{venv_python} -m pip list --format freeze"), "pip list").lower()
        names = {row.split("==")[0].replace("_", "-") for row in installed.split()}
        assert not names & SERVICE_DISTRIBUTIONS, f"the worker-only install pulled {names & SERVICE_DISTRIBUTIONS}"
        where = _ok(operator.run(f"{venv_python} -c 'import service, workers; print(service.__file__)'"), "import")
        assert where.startswith(str(tmp_path / "venv")), f"imported from {where}, not the installed wheel"
        refused = operator.run("/opt/paretune/bin/paretune serve")
        assert refused.returncode == 1 and "pip install 'paretune[service]'" in refused.stderr, refused
        assert "Traceback" not in refused.stderr + refused.stdout
        _ok(operator.run("/opt/paretune/bin/paretune worker --help"), "worker --help on the worker-only install")

        service_steps = iter(SERVICE)
        for line in service_steps:
            if line.endswith("&"):
                break
            out = _ok(operator.run(line), line)
            if line.endswith("db current"):
                assert ": current" in out, out
        packaged = tmp_path / "venv" / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
        assert (packaged / "site-packages" / "service" / "store" / "migrations" / "env.py").is_file()
        admin = (home / "admin-token").read_text().strip()
        assert admin.startswith("ptu_") and (home / "worker-token").read_text().startswith("ptw_")

        operator.start(line, tmp_path / "serve.log")
        url = f"http://127.0.0.1:{operator.port}"
        wait_for(lambda: _healthy(url), 60, tmp_path / "serve.log")
        worker_line = next(service_steps)
        if "--token-file" not in operator.run("/opt/paretune/bin/paretune worker --help").stdout:
            # releases whose worker command predates --token-file take the token itself
            worker_line = worker_line.replace("--token-file worker-token", "--token \"$(cat worker-token)\"")
        operator.start(worker_line, tmp_path / "worker.log")
        for line in service_steps:
            out = _ok(operator.run(line, timeout=240), line)
        assert "study 1 completed: budget spent" in out, out

        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {admin}"}, timeout=30) as client:
            trials = client.get("/v1/studies/1/trials").json()["items"]
            workers = client.get("/v1/workers").json()
            front = client.get("/v1/studies/1/front").json()
        assert sorted(t["number"] for t in trials) == [0, 1, 2, 3]
        assert all(t["state"] == "completed" and t["values"]["runtime_ms"] > 0 for t in trials), trials
        assert [w["pool"] for w in workers] == ["default"]
        assert front["trials"] and {t["number"] for t in front["trials"]} <= {0, 1, 2, 3}
    finally:
        operator.stop()
        drop_postgres_database(db_url)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        time.sleep(0.2)
        return False

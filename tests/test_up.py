"""`paretune up` on a fresh data directory: the whole product on one machine."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
from helpers import REPO, free_port, wait_for


def test_up_tunes_the_builtin_matmul_beyond_the_noise(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "PARETUNE_DATA_DIR": str(tmp_path), "COLUMNS": "200", "PYTHONUNBUFFERED": "1"}
    env.pop("PARETUNE_DATABASE_URL", None)
    log = tmp_path / "up.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "up", "--port", str(port), "--demo-trials", "20"],
        stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env, cwd=REPO, start_new_session=True,  # noqa: SIM115
    )
    try:
        token = wait_for(lambda: re.search(r"admin token \(shown once\): (\S+)", log.read_text()), 90, log)
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30,
                              headers={"Authorization": f"Bearer {token.group(1)}"})
        assert f"http://127.0.0.1:{port}/ui/" in log.read_text()
        # the printed study link is the study page's own route (the dashboard's router: /ui/studies/:id)
        link = wait_for(lambda: re.search(r"demo study 1 queued: (\S+)", log.read_text()), 60, log).group(1)
        assert link == f"http://127.0.0.1:{port}/ui/studies/1"
        page = httpx.get(link, timeout=10)
        assert page.status_code == 200 and "<script" in page.text

        def finished() -> dict | None:
            r = client.get("/v1/studies/1")
            return r.json() if r.status_code == 200 and r.json()["state"] == "completed" else None

        study = wait_for(finished, 300, log)
        assert study["progress"]["completed"] >= 12, study
        assert (tmp_path / "paretune.db").exists()  # the embedded default: SQLite in the data dir

        front = client.get("/v1/studies/1/front").json()
        baseline = client.get("/v1/studies/1/trials/0").json()
        assert baseline["is_baseline"] and baseline["state"] == "completed"
        base = baseline["metrics"]["runtime_ms"]
        faster = []
        for trial in front["trials"]:
            detail = client.get(f"/v1/studies/1/trials/{trial['number']}").json()
            runtime = detail["metrics"]["runtime_ms"]
            # separated by more than the noise: the intervals of the medians do not overlap
            if runtime["ci_high"] < base["ci_low"]:
                faster.append((trial["number"], runtime["value"] / base["value"]))
        assert faster, (base, [t["values"] for t in front["trials"]])
        wait_for(lambda: "study 1 completed: budget spent" in log.read_text(), 30, log)
        terminal = log.read_text()
        assert "Pareto front" in terminal  # the watch view printed the front
        # the terminal keeps to the progress and the front; the logs go to the file it names
        logs = Path(re.search(r"logs: (\S+)", terminal).group(1))
        assert logs == tmp_path / "logs" / "up.log"
        worker_lines = [line for line in logs.read_text().splitlines() if "paretune.worker" in line]
        assert len(worker_lines) >= 20, logs.read_text()[-2000:]
        assert not [line for line in terminal.splitlines() if " INFO " in line or "paretune.worker" in line]
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


"""bench/gpu/transfer_wall.py in its --local mode (the cpu matmul's recorded sweep): the
team's earlier shapes are answered from the recording by a worker of another pool, and the
measured studies run on a real worker; the transfer study starts from the shared history
alone and the cold one from nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, free_port

pytestmark = pytest.mark.slow


def test_local_mode_times_transfer_and_cold_studies(tmp_path: Path) -> None:
    env = {**os.environ, "PARETUNE_BENCH_PORT": str(free_port())}
    done = subprocess.run(
        [sys.executable, "bench/gpu/transfer_wall.py", str(tmp_path), "--local", "--seeds", "1",
         "--modes", "transfer,cold", "--trials", "8", "--study-s", "40", "--deadline-s", "150"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=280,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "transfer_wall.json").read_text())
    history = {h["id"] for h in result["history"]}
    assert len(history) == 3 and result["new_shape"] == [{"dims": {"n": 160}, "weight": 1.0}]
    runs = {r["mode"]: r for r in result["results"]}
    assert set(runs) == {"transfer", "cold"}
    transfer, cold = runs["transfer"], runs["cold"]
    assert transfer["started_from"] and {s["study"] for s in transfer["started_from"]} <= history
    assert all(not s["team"] for s in transfer["started_from"])  # another team's, shared
    assert cold["started_from"] == []
    for run in (transfer, cold):
        assert 1 <= run["trials_finished"] <= 8
        if run["reached"]:
            assert 0 < run["wall_s"] <= run["span_s"] and run["trial"] is not None
    assert "| transfer | " in done.stdout and "| cold | " in done.stdout

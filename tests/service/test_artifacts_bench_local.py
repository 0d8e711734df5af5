"""bench/gpu/artifacts_e2e.py in its --local mode (the cpu backend's matmul): the whole stack
tunes, promotes, validates, approves, pulls, and a plain process applies the artifact with
the runtime module and times it against the validation's interval."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO

pytestmark = pytest.mark.slow


def test_local_mode_runs_the_whole_path(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "bench/gpu/artifacts_e2e.py", str(tmp_path), "--local", "--trials", "6", "--rounds", "4",
         "--apply-rounds", "3"],
        cwd=REPO, capture_output=True, text=True, timeout=280,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((tmp_path / "artifacts_e2e.json").read_text())
    outside = summary["outside"]
    assert outside["correct"] and outside["imports_service"] is False
    assert outside["match"] is not None and "exact match" in outside["match"]
    assert len(outside["rounds"]["approved"]) == 3 and outside["approved_ms"] > 0
    metric = summary["validated_runtime_ms"]
    assert metric["rounds"] == 4 and metric["ci_low"] < metric["ratio"] < metric["ci_high"]
    assert summary["within_interval"] == (metric["ci_low"] <= outside["ratio"] <= metric["ci_high"])
    assert "WITHIN the validation's interval" in done.stdout
    assert summary["config"] == summary["best_trial"]["config"]
    assert (tmp_path / "artifacts" / "matmul.json").read_text().startswith('{"document":')

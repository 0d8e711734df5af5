"""The screening stage on the cpu backend: measured with the screen's settings, its compiled
artifact reused by the full stage through the artifact cache; and a whole screening study
with real `paretune worker` processes against the real control plane (Postgres), where one
worker screens the baseline and leaves, and another takes its full stage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import GOOD_MATMUL, cpu_source_kernel, make_spec
from helpers import wait_for

from wire.contract import MeasureSettings
from workers.cache import ArtifactCache
from workers.sandbox.context import Context
from workers.sandbox.stages import execute_trial

FAST_MEASURE = {"warmup_s": 0.01, "min_repeats": 10, "max_repeats": 200, "target_s": 0.05}


def test_the_screen_measures_with_its_settings_and_the_full_stage_reuses_its_artifact(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path / "cache")
    kernel = cpu_source_kernel(GOOD_MATMUL)
    full_settings = MeasureSettings(**FAST_MEASURE)
    screen_settings = full_settings.model_copy(update={"target_s": 0.01, "cold_samples": 7})
    screen = execute_trial(make_spec(kernel, {"opt": "-O2"}, objectives=["runtime_ms", "latency_ms"],
                                     measure=screen_settings), Context(cache))
    assert screen is not None and screen.status == "completed", screen and screen.message
    assert screen.metrics["latency_ms"].n == 7  # capped at the screen's cold samples (min_repeats is 10)
    assert screen.compile_report["cached"] is False
    full = execute_trial(make_spec(kernel, {"opt": "-O2"}, objectives=["runtime_ms", "latency_ms"],
                                   measure=full_settings), Context(cache))
    assert full is not None and full.status == "completed"
    assert full.compile_report["cached"] is True  # the screen's build, not a second compile
    assert full.compile_report["cache_key"] == screen.compile_report["cache_key"]
    assert full.metrics["runtime_ms"].n > screen.metrics["runtime_ms"].n  # target_s 0.05 s against 0.01 s


def _all_trials(client: Any, study_id: int) -> list[dict[str, Any]]:
    listed = client.get(f"/v1/studies/{study_id}/trials", params={"limit": 1000}).json()["items"]
    return [client.get(f"/v1/studies/{study_id}/trials/{t['number']}").json() for t in listed]


@pytest.mark.postgres
def test_a_screening_study_with_real_workers(live_service, tmp_path: Path) -> None:
    token = live_service.make_worker_token()
    document = {
        "name": "e2e: screening",
        "kernel": {"backend": "cpu", "builtin": "matmul", "workload": [{"dims": {"n": 128}}]},
        # -O0 runs several times slower than -O2: such trials cannot reach the front
        "space": [
            {"name": "opt", "type": "categorical", "choices": ["-O0", "-O2", "-O3"]},
            {"name": "unroll", "type": "bool"},
            {"name": "TILE_M", "type": "categorical", "choices": [8, 16, 32, 64]},
            {"name": "TILE_N", "type": "categorical", "choices": [32, 64]},
        ],
        "baseline": {"opt": "-O2", "unroll": False, "TILE_M": 16, "TILE_N": 64},
        "objectives": ["runtime_ms", "latency_ms"],
        "sampler": {"name": "random", "seed": 11},
        "budget": {"max_trials": 16},
        "parallelism": 2,
        "measure": {**FAST_MEASURE, "screen": {"target_s": 0.02, "cold_samples": 8}},
        "limits": {"compile_timeout_s": 60, "run_timeout_s": 60},
    }
    cache = str(tmp_path / "artifacts")  # shared by the workers, as on one node
    with live_service.client() as client:
        created = client.post("/v1/studies", json=document)
        assert created.status_code == 201, created.text
        study_id = created.json()["id"]
        # the first worker screens the first two trials (the baseline among them) and leaves
        first = live_service.start_worker(token, "--cache-dir", cache, "--max-trials", "2", name="first")
        first.wait(timeout=120)
        baseline = wait_for(lambda: (t := client.get(f"/v1/studies/{study_id}/trials/0").json())["state"] != "screened"
                         and t, 30, "the baseline's promotion")
        assert baseline["stage"] == "full" and baseline["state"] == "queued", baseline
        for name in ("second", "third"):
            live_service.start_worker(token, "--cache-dir", cache, name=name)
        study = wait_for(lambda: (s := client.get(f"/v1/studies/{study_id}").json())["state"] != "running"
                      and not s["progress"]["in_flight"] and s, 240, "the study to finish")
        trials = _all_trials(client, study_id)
        front = client.get(f"/v1/studies/{study_id}/front").json()
        workers = {w["id"]: w["name"] for w in client.get("/v1/workers").json()}

    assert study["state"] == "completed", study
    by_number = {t["number"]: t for t in trials}
    completed = [t for t in trials if t["state"] == "completed"]
    screened_out = [t for t in trials if t["state"] == "screened_out"]
    assert {t["state"] for t in trials} <= {"completed", "screened_out"}, [(t["state"], t["message"]) for t in trials]
    assert len(completed) >= 2 and screened_out, [(t["number"], t["config"]["opt"], t["state"]) for t in trials]
    assert study["progress"]["screened_out"] == len(screened_out)

    # the baseline: screened by the worker that left, measured fully by another, without a compile
    assert workers[by_number[0]["screening"]["worker_id"]] == "first"
    assert workers[by_number[0]["worker_id"]] in ("second", "third")
    for t in completed:
        assert t["stage"] == "full" and t["screening"]["promoted"] is True and t["values"]
        assert t["compile_report"]["cached"] is True, t["compile_report"]
    for t in screened_out:
        assert t["stage"] == "screen" and t["values"] is None and not t["on_front"]
        assert t["metrics"]["latency_ms"]["n"] == 8  # the screen's cold samples (below min_repeats: its cap)
        assert by_number[t["screening"]["dominated_by"]]["state"] == "completed"

    # the front holds fully measured trials only: the non-dominated of their full values
    points = [(t["number"], (t["values"]["runtime_ms"], t["values"]["latency_ms"])) for t in completed]
    expected = {n for n, p in points if not any(q != p and all(a <= b for a, b in zip(q, p, strict=True))
                                                for _, q in points)}
    assert {t["number"] for t in front["trials"]} == expected
    assert all(t["state"] == "completed" for t in front["trials"])


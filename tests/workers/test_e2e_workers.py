"""The real control plane (`paretune serve` on Postgres) with real worker processes
(`paretune worker`): a CPU study survives a worker killed with SIGKILL mid-trial, and planted
failures fail only their own trials while one worker keeps serving."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.postgres

FAST_MEASURE = {"warmup_s": 0.01, "min_repeats": 10, "max_repeats": 200, "target_s": 0.05}


def _all_trials(client, study_id: int) -> list[dict[str, Any]]:
    trials, cursor = [], None
    while True:
        params = {"cursor": cursor} if cursor else {}
        page = client.get(f"/v1/studies/{study_id}/trials", params=params)
        page.raise_for_status()
        body = page.json()
        trials += body["items"]
        cursor = body.get("next_cursor")
        if not cursor:
            return trials


def _wait_until_done(client, study_id: int, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        study = client.get(f"/v1/studies/{study_id}").json()
        if study["state"] in ("completed", "failed", "cancelled") and not study["progress"]["in_flight"]:
            return study
        time.sleep(0.5)
    raise AssertionError(f"study {study_id} did not finish: {study}")


def _holds_a_lease(log_path: Path) -> bool:
    """The worker's log shows a leased trial it has not reported yet."""
    try:
        text = log_path.read_text()
    except OSError:
        return False
    leased = set(re.findall(r"trial (\d+) \(.*\) leased", text))
    done = set(re.findall(r"trial (\d+) \(.*\) (?:completed|failed|abandoned)", text))
    return bool(leased - done) and len(done) >= 3


def test_sigkilled_worker_loses_no_trial(live_service, tmp_path):
    token = live_service.make_worker_token()
    document = {
        "name": "e2e: two workers, one killed",
        "kernel": {"backend": "cpu", "builtin": "matmul", "workload": [{"dims": {"n": 96}}]},
        "objectives": [{"name": "runtime_ms", "direction": "minimize"}, {"name": "p99_ms", "direction": "minimize"}],
        "sampler": {"name": "nsga2", "seed": 7, "options": {"population_size": 8}},
        "budget": {"max_trials": 30},
        "parallelism": 4,
        "pool": "default",
        "measure": FAST_MEASURE,
        "limits": {"compile_timeout_s": 60, "run_timeout_s": 60},
    }
    with live_service.client() as client:
        created = client.post("/v1/studies", json=document)
        assert created.status_code == 201, created.text
        study_id = created.json()["id"]
        cache = str(tmp_path / "artifacts")  # shared by both workers, as on one node
        survivor = live_service.start_worker(token, "--cache-dir", cache, name="survivor")
        victim = live_service.start_worker(token, "--cache-dir", cache, name="victim")
        victim_log = live_service.log_path.with_name("worker-victim-1.log")
        deadline = time.monotonic() + 90
        while not _holds_a_lease(victim_log):
            assert time.monotonic() < deadline, victim_log.read_text()[-3000:]
            assert victim.poll() is None
            time.sleep(0.05)
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=10)

        study = _wait_until_done(client, study_id, timeout=180)
        trials = _all_trials(client, study_id)
        workers = {w["name"]: w["id"] for w in client.get("/v1/workers").json()}

    assert survivor.poll() is None  # still serving
    assert study["state"] == "completed", study
    assert len(trials) == 30
    assert sorted(t["number"] for t in trials) == list(range(30))
    assert len({t["id"] for t in trials}) == 30
    assert {t["state"] for t in trials} <= {"completed", "failed"}
    progress = study["progress"]
    assert progress["completed"] + progress["failed"] == 30
    assert progress["completed"] == sum(t["state"] == "completed" for t in trials)
    indexes = [t["completed_index"] for t in trials if t["state"] == "completed"]
    assert len(indexes) == len(set(indexes))  # each result recorded once
    rerun = [t for t in trials if t["attempt"] >= 2]
    assert rerun, "the victim's leased trial should have expired and been re-run"
    assert all(t["state"] == "completed" and t["worker_id"] == workers["survivor"] for t in rerun)

    # the front holds a configuration faster than the baseline by more than the noise
    baseline = next(t for t in trials if t["is_baseline"])
    with live_service.client() as client:
        detail = client.get(f"/v1/studies/{study_id}/trials/{baseline['number']}").json()
    base_runtime = detail["metrics"]["runtime_ms"]
    best = min(t["values"]["runtime_ms"] for t in trials if t["state"] == "completed")
    assert best < base_runtime["ci_low"] - (base_runtime["ci_high"] - base_runtime["ci_low"])


PLANTED_BY_MODE = r"""
void matmul(int M, int N, int K, const float *A, const float *B, float *C) {
#if MODE == 1
    volatile float *far = C + ((long)1 << 40);
    *far = 1.0f;                                   /* segfault */
#elif MODE == 2
    volatile unsigned long spins = 0;
    for (;;) spins++;                              /* hang */
#elif MODE == 3
    for (int i = 0; i < M * N; i++) C[i] = 1.0f;   /* wrong result */
    return;
#elif MODE == 4
    this does not compile;
#endif
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++) acc += A[i * K + k] * B[k * N + j];
            C[i * N + j] = acc;
        }
}
"""


def test_planted_failures_fail_only_their_trials(live_service, tmp_path):
    """One study per planted behaviour (its baseline picks the behaviour), all served by one
    worker, which must survive them all."""
    token = live_service.make_worker_token()
    studies: dict[int, int] = {}
    with live_service.client() as client:
        for mode in range(5):
            document = {
                "name": f"e2e: planted mode {mode}",
                "kernel": {
                    "backend": "cpu",
                    "source": PLANTED_BY_MODE,
                    "entry": "matmul",
                    "workload": [{"dims": {"n": 48}}],
                    "options": {"problem": "matmul"},
                },
                "space": [{"name": "MODE", "type": "categorical", "choices": [0, 1, 2, 3, 4], "default": 0}],
                "baseline": {"MODE": mode},
                "objectives": ["runtime_ms"],
                "sampler": {"name": "random", "seed": 1},
                "budget": {"max_trials": 1},
                "parallelism": 1,
                "measure": FAST_MEASURE,
                "limits": {"compile_timeout_s": 60, "run_timeout_s": 3, "max_attempts": 1},
            }
            created = client.post("/v1/studies", json=document)
            assert created.status_code == 201, created.text
            studies[mode] = created.json()["id"]
        worker = live_service.start_worker(token, "--cache-dir", str(tmp_path / "c"), name="one")
        trials = {}
        for mode, study_id in studies.items():
            _wait_until_done(client, study_id, timeout=120)
            (trial,) = _all_trials(client, study_id)
            trials[mode] = client.get(f"/v1/studies/{study_id}/trials/{trial['number']}").json()
    assert worker.poll() is None  # the one worker survived every failure
    assert trials[0]["state"] == "completed" and trials[0]["failure_reason"] is None
    expected = {1: "crash", 2: "timeout", 3: "wrong_result", 4: "compile_error"}
    for mode, reason in expected.items():
        trial = trials[mode]
        assert (trial["state"], trial["failure_reason"]) == ("failed", reason), trial["message"]
        assert trial["message"]
        assert trial["log"] or reason == "timeout"
    assert "SIGSEGV" in trials[1]["message"]
    assert "run_timeout_s=3" in trials[2]["message"]
    assert "error" in trials[4]["log"]

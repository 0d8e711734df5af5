"""A validation job on the real cpu backend: every configuration compiled through the trial
compile path, checked on the extended shapes and measured in interleaved rounds in one
sandbox process; a candidate that is right on the workload but wrong beyond it is caught."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FAST, make_spec
from worker_plane import Plane, PlaneServer

from service.artifacts.comparison import compare_reports
from wire.contract import (
    FailureReason,
    KernelSpec,
    ValidationCandidate,
    ValidationSpec,
    WorkloadShape,
)
from workers.agent.launch import run_agent
from workers.agent.settings import AgentSettings
from workers.cache import ArtifactCache
from workers.sandbox.context import Context
from workers.sandbox.stages import execute_trial
from workers.validation.stages import compile_validation, execute_validation, run_validation

# A row-blocked matmul. ROW_SHORTCUT=1 is a deliberate bug: rows past the first 64 are never
# computed. Every trial check passes it (the workload is 64 rows, the backend's ragged edge
# shape 37), but the validation's doubled shape has 128 rows.
MATMUL = r"""
#ifndef ROW_SHORTCUT
#define ROW_SHORTCUT 0
#endif
#ifndef CRASH_PAST_64
#define CRASH_PAST_64 0
#endif
void matmul(int M, int N, int K, const float *A, const float *B, float *C) {
    int rows = M;
#if ROW_SHORTCUT
    if (rows > 64) rows = 64;
#endif
#if CRASH_PAST_64
    if (M > 64) *(volatile float *)0 = 1.0f;
#endif
    for (int i = 0; i < M * N; i++) C[i] = 0.0f;
    for (int i = 0; i < rows; i++)
        for (int k = 0; k < K; k++) {
            const float a = A[i * K + k];
            for (int j = 0; j < N; j++) C[i * N + j] += a * B[k * N + j];
        }
}
"""
KERNEL = KernelSpec(
    backend="cpu",
    source=MATMUL,
    entry="matmul",
    workload=[WorkloadShape(dims={"n": 64})],
    options={"problem": "matmul"},
)


def validation_spec(*candidates: dict, rounds: int = 6, objectives: list[str] | None = None) -> ValidationSpec:
    return ValidationSpec(
        validation_id=5,
        job_id=9,
        study_id=3,
        kernel=KERNEL,
        baseline={"opt": "-O1"},
        candidates=[ValidationCandidate(candidate_id=10 + i, config=c) for i, c in enumerate(candidates)],
        objectives=objectives or ["runtime_ms", "latency_ms"],
        rounds=rounds,
        measure=FAST,
        compile_timeout_s=60,
        run_timeout_s=120,
    )


def test_baseline_and_two_candidates_one_wrong_beyond_the_workload(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path / "cache")
    wrong = {"opt": "-O2", "ROW_SHORTCUT": 1}
    # the bug passes an ordinary trial: workload shape and the backend's edge shape
    trial = execute_trial(make_spec(KERNEL, wrong), Context(cache))
    assert trial is not None and trial.status == "completed", trial.message

    spec = validation_spec({"opt": "-O3"}, wrong)
    report = execute_validation(spec, Context(cache))
    assert report is not None and report.status == "completed", report.message
    shapes = [s.dims for s in report.shapes]
    assert shapes == [
        {"m": 64, "n": 64, "k": 64},
        {"m": 32, "n": 32, "k": 32},
        {"m": 63, "n": 61, "k": 59},
        {"m": 128, "n": 64, "k": 64},
    ]
    baseline, good, bad = report.baseline, *report.candidates
    for outcome in (baseline, good):
        assert outcome.status == "ok" and outcome.correct is True
        assert all(s.passed for s in outcome.correctness)
        assert {s["m"] for s in shapes} <= {s.dims["m"] for s in outcome.correctness}
        assert all(len(outcome.values[o]) == spec.rounds for o in spec.objectives)
        assert all(v > 0 for o in spec.objectives for v in outcome.values[o])
        assert outcome.units == {"runtime_ms": "ms", "latency_ms": "ms"}
        assert len(outcome.environments) == spec.rounds
    assert bad.status == "failed" and bad.correct is False
    assert bad.failure_reason == FailureReason.WRONG_RESULT
    by_shape = {tuple(s.dims.values()): s.passed for s in bad.correctness}
    assert by_shape[(128, 64, 64)] is False
    assert all(passed for dims, passed in by_shape.items() if dims[0] <= 64)  # right everywhere else
    assert "m128_n64_k64" in bad.message
    assert bad.values == {}  # a wrong candidate is not measured

    # rounds interleave the measured configurations, rotating who goes first
    assert report.rounds == spec.rounds
    assert report.order == [[None, 10], [10, None]] * 3
    assert report.target is not None and report.target.cc and report.target.cpu
    assert good.compile_report["cached"] is False and baseline.compile_report["cache_key"]

    # the statistics of phase 2 read the report as it is
    (runtime, latency) = compare_reports([report], 10, [("runtime_ms", "minimize"), ("latency_ms", "minimize")])
    assert runtime.rounds == spec.rounds and runtime.ci_low < runtime.ratio < runtime.ci_high


def test_builds_come_from_the_artifact_cache(tmp_path: Path) -> None:
    spec = validation_spec({"opt": "-O3"}, rounds=2, objectives=["runtime_ms"])
    context = Context(ArtifactCache(tmp_path / "cache"))
    first = compile_validation(spec, context)
    again = compile_validation(spec, context)
    assert [s.cached for _, _, s in first.stages] == [False, False]
    assert [s.cached for _, _, s in again.stages] == [True, True]
    report = run_validation(again, context)
    assert report is not None and report.status == "completed"
    assert report.baseline.compile_report["cached"] is True


def test_a_crash_on_an_extended_shape_names_the_candidate(tmp_path: Path) -> None:
    spec = validation_spec({"opt": "-O2"}, {"opt": "-O2", "CRASH_PAST_64": 1}, rounds=2)
    report = execute_validation(spec, Context(ArtifactCache(tmp_path / "cache")))
    assert report is not None and report.status == "failed"
    assert report.failure_reason == FailureReason.CRASH
    assert "SIGSEGV" in report.message and "candidate 11" in report.message
    crashed = report.candidates[1]
    assert crashed.failure_reason == FailureReason.CRASH and crashed.status == "failed"
    assert report.baseline.correct is True  # checked before the crash, and kept
    assert report.baseline.message == "the run ended after 0 of 2 rounds"
    assert report.rounds == 0


def test_compile_failures_are_per_configuration(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path / "cache")
    report = execute_validation(validation_spec({"opt": "-O3"}, {"opt": "-O9"}, rounds=2), Context(cache))
    assert report is not None and report.status == "completed"
    assert report.candidates[0].status == "ok"
    assert report.candidates[1].status == "failed" and report.candidates[1].failure_reason == FailureReason.ERROR
    assert "-O9" in report.candidates[1].message
    broken = validation_spec({"opt": "-O3"}, rounds=2).model_copy(update={"baseline": {"opt": "-O9"}})
    failed = execute_validation(broken, Context(cache))
    assert failed is not None and failed.status == "failed" and "baseline did not compile" in failed.message


def test_a_run_past_its_timeout_fails_the_job(tmp_path: Path) -> None:
    spec = validation_spec({"opt": "-O3"}, rounds=1000, objectives=["runtime_ms"]).model_copy(
        update={"run_timeout_s": 4}
    )
    report = execute_validation(spec, Context(ArtifactCache(tmp_path / "cache")))
    assert report is not None and report.status == "failed"
    assert report.failure_reason == FailureReason.TIMEOUT and "run_timeout_s=4" in report.message
    # the configuration that was running carries the timeout, the others how far they got
    outcomes = [report.baseline, *report.candidates]
    assert all(o.status == "failed" for o in outcomes)
    assert sum(o.failure_reason == FailureReason.TIMEOUT for o in outcomes) == 1
    assert any("of 1000 rounds" in o.message for o in outcomes)
    assert len(report.baseline.values.get("runtime_ms", [])) == report.rounds  # the rounds done are kept


def test_a_bad_shape_rule_is_reported(tmp_path: Path) -> None:
    kernel = KERNEL.model_copy(update={"options": {"problem": "matmul", "shape_rules": {"n": "prime"}}})
    spec = validation_spec({"opt": "-O3"}).model_copy(update={"kernel": kernel})
    report = execute_validation(spec, Context(ArtifactCache(tmp_path / "cache")))
    assert report is not None and report.status == "failed" and "unknown shape rule 'prime'" in report.message


@pytest.mark.parametrize("warm", [False, True], ids=["fresh", "warm"])
def test_the_agent_leases_runs_and_reports_a_validation(tmp_path: Path, warm: bool) -> None:
    spec = validation_spec({"opt": "-O3"}, {"opt": "-O2", "ROW_SHORTCUT": 1}, rounds=3)
    # rounds long enough (0.15 s of samples each) that heartbeats every 0.1 s see one
    spec = spec.model_copy(update={"measure": FAST.model_copy(update={"target_s": 0.15, "max_repeats": 100_000})})
    trial = make_spec(KERNEL, {"opt": "-O2"})
    plane = Plane(heartbeat_s=0.1, lease_s=5)
    plane.add(spec, trial)
    with PlaneServer(plane) as server:
        summary = run_agent(
            AgentSettings(
                server=server.url,
                token=plane.token,
                cache_dir=tmp_path / "cache",
                wait_s=0.2,
                max_trials=2,
                warm_runner=warm,
            )
        )
    assert summary.completed == 2 and summary.failed == 0
    report = plane.validation_reports[spec.job_id]
    assert report.status == "completed" and report.rounds == 3
    assert report.candidates[0].status == "ok"
    assert report.candidates[1].failure_reason == FailureReason.WRONG_RESULT
    assert report.fingerprint is not None and "cpu" in report.fingerprint.backends
    assert plane.results[trial.trial_id].status == "completed"  # trials still run alongside
    phases = {phase for _, job, phase in plane.heartbeats if job == spec.job_id}
    assert any(p and p.startswith("round ") for p in phases), phases
    # heartbeats carry each round's seconds as the rounds end: a growing list, each beat's the start of the next
    beats = [round_s for job, round_s in plane.round_beats if job == spec.job_id]
    assert beats and 1 <= len(beats[-1]) <= 3, beats
    for earlier, later in zip(beats, beats[1:], strict=False):
        assert later[:len(earlier)] == earlier
    assert all(s > 0 for s in beats[-1]) and sum(beats[-1]) <= report.timings["measure_s"]
    assert not [job for job, _ in plane.round_beats if job != spec.job_id]  # a trial has no rounds

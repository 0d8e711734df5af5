"""The worker side of a validation job (the agent's half; workers.validation.run is the
sandbox's).

compile_validation builds every configuration (baseline first, then each candidate) through
the trials' compile path and artifact cache, each in its own compile sandbox, for the
extended correctness shapes. run_validation then runs ONE run-phase sandbox process for all
of them (workers.validation.run): correctness on the extended shapes, then the interleaved
rounds, under the job's run_timeout_s. The two halves map onto the agent's leaser (compile,
off the device) and measuring thread (run, holding the device).

The report says per configuration whether it compiled, its correctness per shape and each
round's value of each objective; the job fails as a whole only when there is nothing to
compare with (the baseline did not compile, failed to measure, or the process died), and
then says which configuration was running.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wire.contract import (
    ConfigOutcome,
    FailureReason,
    Fingerprint,
    KernelSpec,
    ShapeCorrectness,
    Target,
    TrialSpec,
    ValidationReport,
    ValidationSpec,
    WorkloadShape,
)
from workers.cache import ArtifactCache
from workers.sandbox.files import UnsafeFile, read_untrusted
from workers.sandbox.jobs import Sandbox, default_sandbox
from workers.sandbox.runner import RunnerPool
from workers.sandbox.stages import CompileStage, compile_trial, phase_job, place_build, run_phase, tail
from workers.validation.run import BASELINE, label, read_progress
from workers.validation.shapes import extended_shapes


@dataclass
class ValidationBuild:
    """The compiled configurations of a validation job, ready for its run phase."""

    spec: ValidationSpec
    shapes: list[WorkloadShape]
    stages: list[tuple[int | None, dict[str, Any], CompileStage]] = field(default_factory=list)
    abandoned: bool = False
    error: str = ""  # why the job cannot run at all (e.g. a bad shape rule)


def configurations(spec: ValidationSpec) -> list[tuple[int | None, dict[str, Any]]]:
    """(candidate id, configuration), the baseline (id None) first."""
    return [(None, spec.baseline), *((c.candidate_id, c.config) for c in spec.candidates)]


def _trial_spec(
    spec: ValidationSpec, kernel: KernelSpec, candidate_id: int | None, config: dict[str, Any]
) -> TrialSpec:
    """The trial spec a configuration is compiled under (the trials' compile path)."""
    return TrialSpec(
        trial_id=spec.job_id,
        study_id=spec.study_id,
        number=0 if candidate_id is None else candidate_id,
        attempt=spec.attempt,
        is_baseline=candidate_id is None,
        kernel=kernel,
        config=config,
        objectives=spec.objectives,
        compile_timeout_s=spec.compile_timeout_s,
        run_timeout_s=spec.run_timeout_s,
        measure=spec.measure,
        compile_only=spec.compile_only,
        acfs=spec.acfs,
    )


def compile_validation(
    spec: ValidationSpec,
    cache: ArtifactCache,
    *,
    cpus: list[int] | None = None,
    cancel: threading.Event | None = None,
    sandbox: Sandbox | None = None,
    runners: RunnerPool | None = None,
) -> ValidationBuild:
    """Build every configuration for the extended shapes (cached builds are reused)."""
    try:
        shapes = list(spec.shapes) or extended_shapes(spec.kernel)
    except ValueError as exc:
        return ValidationBuild(spec, [], error=f"no correctness shapes: {exc}")
    build = ValidationBuild(spec, shapes)
    check_kernel = spec.kernel.model_copy(update={"workload": shapes})
    for candidate_id, config in configurations(spec):
        trial = _trial_spec(spec, check_kernel, candidate_id, config)
        stage = compile_trial(trial, cache, cpus=cpus, cancel=cancel, sandbox=sandbox, runners=runners)
        if stage.abandoned or (cancel is not None and cancel.is_set()):
            build.abandoned = True
            return build
        build.stages.append((candidate_id, config, stage))
    return build


def run_validation(
    build: ValidationBuild,
    *,
    cpus: list[int] | None = None,
    cancel: threading.Event | None = None,
    on_phase: Callable[[str], None] | None = None,
    sandbox: Sandbox | None = None,
    runners: RunnerPool | None = None,
    fingerprint: Fingerprint | None = None,
) -> ValidationReport | None:
    """Check and measure the built configurations in one sandbox process; None if abandoned."""
    try:
        return _run_validation(build, cpus, cancel, on_phase, sandbox or default_sandbox(), runners, fingerprint)
    finally:
        for _, _, stage in build.stages:
            stage.discard()


def _run_validation(
    build: ValidationBuild,
    cpus: list[int] | None,
    cancel: threading.Event | None,
    on_phase: Callable[[str], None] | None,
    sandbox: Sandbox,
    runners: RunnerPool | None,
    fingerprint: Fingerprint | None,
) -> ValidationReport | None:
    if build.abandoned:
        return None
    spec = build.spec
    if build.error:
        return failed_report(spec, FailureReason.ERROR, build.error)
    outcomes = {label(cid): _compile_outcome(cid, stage) for cid, _, stage in build.stages}
    common: dict[str, Any] = {"shapes": build.shapes, "fingerprint": fingerprint}
    if outcomes[BASELINE].status == "failed":
        return _failed(spec, outcomes, f"the baseline did not compile: {outcomes[BASELINE].message}", **common)
    runnable = [(cid, config, stage) for cid, config, stage in build.stages if stage.failure is None]
    with phase_job(sandbox, runners, "run", spec) as (job, runner):
        configs = []
        for index, (cid, config, stage) in enumerate(runnable):
            assert stage.built is not None  # each configuration's verified build in the job directory
            inside = place_build(sandbox, job, stage.built, f"build-{index}")
            built = {"directory": inside, "files": stage.built.files, "report": stage.built.report}
            configs.append({"candidate_id": cid, "config": config, "built": built})
        extra = {"validation": {"shapes": [s.model_dump(mode="json") for s in build.shapes], "configs": configs}}
        outcome = run_phase("run", spec, job, spec.run_timeout_s, sandbox=sandbox, runner=runner, runners=runners,
                            cpus=cpus, cancel=cancel, on_phase=on_phase, extra=extra)
        where = _read(job.outside / "phase")
        payload = outcome.payload if "configs" in outcome.payload else {**outcome.payload,
                                                                        **read_progress(job.outside)}
    if outcome.abandoned:
        return None
    _merge_run(outcomes, payload, spec)
    common.update(
        rounds=int(payload.get("rounds", 0)),
        order=payload.get("order", []),
        target=Target.model_validate(payload["target"]) if payload.get("target") else None,
        environment={"sandbox": outcome.sandbox},
        timings={**payload.get("timings", {}), "run_wall_s": outcome.wall_s},
        log=tail(outcome.log, 16_000),
    )
    if not outcome.ok:
        assert outcome.reason is not None
        _blame(outcomes, where, outcome.reason, outcome.message)
        while_ = f" while running {where}" if where else ""
        return _failed(spec, outcomes, f"{outcome.message}{while_}", reason=outcome.reason, **common)
    baseline = outcomes[BASELINE]
    if baseline.status == "failed" or common["rounds"] == 0:
        reason = baseline.failure_reason or FailureReason.ERROR
        return _failed(
            spec, outcomes, f"the baseline failed: {baseline.message or 'no round completed'}", reason=reason, **common
        )
    return ValidationReport(
        status="completed",
        baseline=baseline,
        candidates=[outcomes[label(c.candidate_id)] for c in spec.candidates],
        **common,
    )


def execute_validation(
    spec: ValidationSpec,
    cache: ArtifactCache,
    *,
    compile_cpus: list[int] | None = None,
    run_cpus: list[int] | None = None,
    cancel: threading.Event | None = None,
    sandbox: Sandbox | None = None,
    runners: RunnerPool | None = None,
    fingerprint: Fingerprint | None = None,
) -> ValidationReport | None:
    """Compile then run a validation job (no pipelining with other work)."""
    build = compile_validation(spec, cache, cpus=compile_cpus, cancel=cancel, sandbox=sandbox, runners=runners)
    return run_validation(build, cpus=run_cpus, cancel=cancel, sandbox=sandbox, runners=runners,
                          fingerprint=fingerprint)


def _compile_outcome(candidate_id: int | None, stage: CompileStage) -> ConfigOutcome:
    if stage.failure is not None:
        return ConfigOutcome(
            candidate_id=candidate_id,
            status="failed",
            failure_reason=stage.failure.failure_reason,
            message=f"compile: {stage.failure.message}",
            compile_report=stage.failure.compile_report,
        )
    report = dict(stage.built.report) if stage.built is not None else {}
    report.update(cached=stage.cached, cache_key=stage.key)
    return ConfigOutcome(candidate_id=candidate_id, status="ok", compile_report=report)


def _merge_run(outcomes: dict[str, ConfigOutcome], payload: dict[str, Any], spec: ValidationSpec) -> None:
    """Fill each compiled configuration's outcome with what its run recorded."""
    records = payload.get("configs") or {}
    for name, outcome in outcomes.items():
        if outcome.status == "failed":
            continue  # did not compile
        record = records.get(name, {})
        outcome.correct = record.get("correct")
        outcome.correctness = [ShapeCorrectness.model_validate(s) for s in record.get("correctness", [])]
        outcome.values = {k: list(v) for k, v in record.get("values", {}).items()}
        outcome.units = dict(record.get("units", {}))
        outcome.environments = list(record.get("environments", []))
        failure = record.get("failure")
        complete = all(len(outcome.values.get(o, [])) >= spec.rounds for o in spec.objectives)
        if failure:
            outcome.status, outcome.failure_reason = "failed", FailureReason(failure["reason"])
            outcome.message = failure["message"]
        elif outcome.correct is None or not complete:
            outcome.status, outcome.failure_reason = "failed", FailureReason.ERROR
            done = len(outcome.values.get(spec.objectives[0], []))
            outcome.message = (
                "the run ended before it was checked"
                if outcome.correct is None
                else f"the run ended after {done} of {spec.rounds} rounds"
            )


def _blame(outcomes: dict[str, ConfigOutcome], where: str, reason: FailureReason, message: str) -> None:
    """The configuration that was running when the process died or timed out carries why."""
    name = where.split(": ", 1)[1] if ": " in where else where.removeprefix("check ")
    if name in outcomes:
        outcomes[name].status, outcomes[name].failure_reason = "failed", reason
        outcomes[name].message = f"{message} (while running {where})"


def _failed(
    spec: ValidationSpec,
    outcomes: dict[str, ConfigOutcome],
    message: str,
    *,
    reason: FailureReason | None = None,
    **common: Any,
) -> ValidationReport:
    baseline = outcomes[BASELINE]
    return ValidationReport(
        status="failed",
        failure_reason=reason or baseline.failure_reason or FailureReason.ERROR,
        message=message[:2000],
        baseline=baseline,
        candidates=[outcomes[label(c.candidate_id)] for c in spec.candidates],
        **common,
    )


def _read(path: Path) -> str:
    try:
        return read_untrusted(path, 4096).decode("utf-8", "replace").strip()
    except UnsafeFile:
        return ""


def failed_report(spec: ValidationSpec, reason: FailureReason, message: str) -> ValidationReport:
    """A report for a job the worker could not run at all (a worker error)."""
    outcomes = {label(cid): ConfigOutcome(candidate_id=cid, status="failed") for cid, _ in configurations(spec)}
    return _failed(spec, outcomes, message, reason=reason)


def describe_lease(spec: ValidationSpec) -> str:
    return f"validation {spec.validation_id} job {spec.job_id} (study {spec.study_id}, attempt {spec.attempt})"


def describe_report(report: ValidationReport) -> str:
    """One log line: the verdict of each configuration."""
    if report.status == "failed":
        reason = report.failure_reason.value if report.failure_reason else "?"
        return f"failed ({reason}): {report.message}"
    parts = [
        f"{label(o.candidate_id)} {'ok' if o.status == 'ok' else o.failure_reason or 'failed'}"
        for o in [report.baseline, *report.candidates]
    ]
    return f"completed {report.rounds} rounds: " + ", ".join(parts)

"""The stages of a validation job as the agent runs them (workers.validation.rounds is the
inside of its run sandbox).

compile_validation builds every configuration (baseline first, then each candidate) through
the trials' compile path and artifact cache, each in its own compile sandbox, for the
extended correctness shapes. run_validation then runs ONE run-phase sandbox process for all
of them: correctness on the extended shapes, then the interleaved rounds, under the job's
run_timeout_s. The two halves map onto the agent's leaser (compile, off the device) and
measuring thread (run, holding the device). What the report says is workers.validation.report's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wire.contract import (
    FailureReason,
    Fingerprint,
    KernelSpec,
    Target,
    TrialSpec,
    ValidationReport,
    ValidationSpec,
    WorkloadShape,
)
from workers.sandbox.context import Context
from workers.sandbox.phases import PhaseOutcome, phase_job, run_phase, tail
from workers.sandbox.stages import CompileStage, compile_trial, place_build
from workers.sandbox.watch import read_phase
from workers.validation import report
from workers.validation.rounds import BASELINE, label, read_progress
from workers.validation.shapes import extended_shapes


@dataclass
class ValidationBuild:
    """The compiled configurations of a validation job, ready for its run phase."""

    spec: ValidationSpec
    shapes: list[WorkloadShape]
    stages: list[tuple[int | None, dict[str, Any], CompileStage]] = field(default_factory=list)
    abandoned: bool = False
    error: str = ""  # why the job cannot run at all (e.g. a bad shape rule)


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


def compile_validation(spec: ValidationSpec, context: Context) -> ValidationBuild:
    """Build every configuration for the extended shapes (cached builds are reused)."""
    try:
        shapes = list(spec.shapes) or extended_shapes(spec.kernel)
    except ValueError as exc:
        return ValidationBuild(spec, [], error=f"no correctness shapes: {exc}")
    build = ValidationBuild(spec, shapes)
    check_kernel = spec.kernel.model_copy(update={"workload": shapes})
    for candidate_id, config in report.configurations(spec):
        stage = compile_trial(_trial_spec(spec, check_kernel, candidate_id, config), context)
        if stage.abandoned or context.cancel.is_set():
            build.abandoned = True
            return build
        build.stages.append((candidate_id, config, stage))
    return build


def run_validation(
    build: ValidationBuild, context: Context, fingerprint: Fingerprint | None = None
) -> ValidationReport | None:
    """Check and measure the built configurations in one sandbox process; None if abandoned.
    `fingerprint` (the worker's) goes into the report."""
    try:
        return _run_validation(build, context, fingerprint)
    finally:
        for _, _, stage in build.stages:
            stage.discard()


def _run_validation(
    build: ValidationBuild, context: Context, fingerprint: Fingerprint | None
) -> ValidationReport | None:
    if build.abandoned:
        return None
    spec = build.spec
    if build.error:
        return report.failed_report(spec, FailureReason.ERROR, build.error)
    outcomes = {label(cid): report.compile_outcome(cid, stage) for cid, _, stage in build.stages}
    common: dict[str, Any] = {"shapes": build.shapes, "fingerprint": fingerprint}
    if outcomes[BASELINE].status == "failed":
        why = f"the baseline did not compile: {outcomes[BASELINE].message}"
        return report.failed(spec, outcomes, why, **common)
    outcome, where, payload = _run_sandbox(build, context)
    if outcome.abandoned:
        return None
    report.merge_run(outcomes, payload, spec)
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
        report.blame(outcomes, where, outcome.reason, outcome.message)
        while_ = f" while running {where}" if where else ""
        return report.failed(spec, outcomes, f"{outcome.message}{while_}", reason=outcome.reason, **common)
    baseline = outcomes[BASELINE]
    if baseline.status == "failed" or common["rounds"] == 0:
        reason = baseline.failure_reason or FailureReason.ERROR
        why = f"the baseline failed: {baseline.message or 'no round completed'}"
        return report.failed(spec, outcomes, why, reason=reason, **common)
    return report.completed(spec, outcomes, **common)


def _run_sandbox(build: ValidationBuild, context: Context) -> tuple[PhaseOutcome, str, dict[str, Any]]:
    """One run sandbox for every configuration that compiled: how it ended, what it was
    running last, and what it recorded (its result, else the progress it saved)."""
    runnable = [(cid, config, stage) for cid, config, stage in build.stages if stage.failure is None]
    with phase_job("run", build.spec, context) as (job, runner):
        configs = []
        for index, (cid, config, stage) in enumerate(runnable):
            assert stage.built is not None  # each configuration's verified build in the job directory
            inside = place_build(context.sandbox, job, stage.built, f"build-{index}")
            built = {"directory": inside, "files": stage.built.files, "report": stage.built.report}
            configs.append({"candidate_id": cid, "config": config, "built": built})
        extra = {"validation": {"shapes": [s.model_dump(mode="json") for s in build.shapes], "configs": configs}}
        outcome = run_phase("run", build.spec, job, runner, context, extra)
        payload = outcome.payload if "configs" in outcome.payload else {**outcome.payload,
                                                                        **read_progress(job.outside)}
        return outcome, read_phase(job.outside), payload


def execute_validation(
    spec: ValidationSpec, context: Context, fingerprint: Fingerprint | None = None
) -> ValidationReport | None:
    """Compile then run a validation job (no pipelining with other work)."""
    return run_validation(compile_validation(spec, context), context, fingerprint)

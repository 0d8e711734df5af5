"""A validation job's report, from what its compile stages and its run sandbox recorded:
per configuration whether it compiled, its correctness per shape and each round's value of
each objective. The job fails as a whole only when there is nothing to compare with (the
baseline did not compile, failed to measure, or the process died), and then says which
configuration was running.
"""

from __future__ import annotations

from typing import Any

from wire.contract import ConfigOutcome, FailureReason, ShapeCorrectness, ValidationReport, ValidationSpec
from workers.sandbox.stages import CompileStage
from workers.validation.rounds import BASELINE, label


def configurations(spec: ValidationSpec) -> list[tuple[int | None, dict[str, Any]]]:
    """(candidate id, configuration), the baseline (id None) first."""
    return [(None, spec.baseline), *((c.candidate_id, c.config) for c in spec.candidates)]


def compile_outcome(candidate_id: int | None, stage: CompileStage) -> ConfigOutcome:
    """A configuration's outcome as far as its compile stage goes."""
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


def merge_run(outcomes: dict[str, ConfigOutcome], payload: dict[str, Any], spec: ValidationSpec) -> None:
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


def blame(outcomes: dict[str, ConfigOutcome], where: str, reason: FailureReason, message: str) -> None:
    """The configuration that was running when the process died or timed out carries why."""
    name = where.split(": ", 1)[1] if ": " in where else where.removeprefix("check ")
    if name in outcomes:
        outcomes[name].status, outcomes[name].failure_reason = "failed", reason
        outcomes[name].message = f"{message} (while running {where})"


def failed(
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


def completed(spec: ValidationSpec, outcomes: dict[str, ConfigOutcome], **common: Any) -> ValidationReport:
    return ValidationReport(
        status="completed",
        baseline=outcomes[BASELINE],
        candidates=[outcomes[label(c.candidate_id)] for c in spec.candidates],
        **common,
    )


def failed_report(spec: ValidationSpec, reason: FailureReason, message: str) -> ValidationReport:
    """A report for a job the worker could not run at all (a worker error)."""
    outcomes = {label(cid): ConfigOutcome(candidate_id=cid, status="failed") for cid, _ in configurations(spec)}
    return failed(spec, outcomes, message, reason=reason)


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

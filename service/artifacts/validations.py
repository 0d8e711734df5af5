"""Validations: candidates and the baseline re-measured interleaved on the study's pool.

A validation is one or more jobs (wire.ValidationSpec, each a block of the rounds), queued
in the validation_jobs table and leased through the same long-poll as trials: a worker of
the pool that runs the study's backend takes the oldest queued job. With several live
workers in the pool, the rounds are split into as many jobs (at most MAX_JOBS, each of at
least MIN_ROUNDS_PER_JOB rounds), so that several GPUs of the model measure at once; the
statistics remove each job's mean (service.artifacts.comparison), so a faster GPU cannot widen
the intervals. Jobs are a kind of leased work (ValidationWork, over service.trials.leases):
leased, heartbeated, reported and expired as trials are.

When the last job has reported, each candidate is judged in the same transaction: correct
on every extended shape in every job and measured in every round -> validated, with each
objective's ratio to the baseline, its interval and significance; otherwise failed (it
cannot be approved). The reports, with every round's raw values, stay on the job rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import timedelta
from typing import Any, ClassVar

from sqlalchemy import ColumnElement, Row, func, null, select, update
from sqlalchemy.orm import Session, defer

from service.artifacts import audit
from service.artifacts.comparison import compare_reports
from service.artifacts.states import (
    JOB,
    JOB_FINISHED,
    VALIDATION,
    VALIDATION_FINISHED,
    CandidateState,
    JobState,
    ValidationState,
)
from service.artifacts.transitions import transition_candidate, transition_validation
from service.controls import files as controls_files
from service.errors import Invalid
from service.store.db import after_commit, is_postgres
from service.store.effects import effects
from service.store.models import VALIDATION_JOBS, Candidate, Study, Trial, Validation, ValidationJob, Worker, utcnow
from service.store.storable import storable, storable_text
from service.studies import document as sd
from service.trials.empty import QueuedHint
from service.trials.kinds import Held, Outcome, WorkKind
from wire import contract as wire

DEFAULT_ROUNDS = 20
MAX_JOBS = 8
MIN_ROUNDS_PER_JOB = 2
LIVE_WORKER_S = 600.0  # a worker seen this recently counts as available for a job
MAX_RUN_TIMEOUT_S = 86_400.0


def split_rounds(rounds: int, workers: int) -> list[int]:
    """The rounds of each job: as many jobs as workers (at most MAX_JOBS), none below
    MIN_ROUNDS_PER_JOB rounds; the first jobs take the remainder."""
    jobs = max(1, min(workers, MAX_JOBS, rounds // MIN_ROUNDS_PER_JOB))
    base, extra = divmod(rounds, jobs)
    return [base + (1 if i < extra else 0) for i in range(jobs)]


def live_workers(session: Session, pool: str, backend: str) -> int:
    """Distinct workers of `pool` that run `backend` and called lately."""
    since = utcnow() - timedelta(seconds=LIVE_WORKER_S)
    rows = session.execute(
        select(Worker.name, Worker.backends).where(Worker.pool == pool, Worker.last_seen_at >= since)
    ).all()
    return len({name for name, backends in rows if backend in (backends or [])})


def baseline_config(session: Session, study: Study) -> dict[str, Any]:
    row = session.execute(
        select(Trial.config).where(Trial.study_id == study.id, Trial.is_baseline.is_(True)).limit(1)
    ).scalar_one_or_none()
    return dict(row) if row is not None else dict(sd.document_of(study).baseline)


def start(session: Session, study: Study, candidates: list[Candidate], *, rounds: int, requested_by: str) -> Validation:
    """A validation of `candidates` (flushed, with ids) against the study's baseline: its jobs queued."""
    doc = sd.document_of(study)
    kernel = doc.kernel
    measure = wire.MeasureSettings.model_validate(doc.measure.model_dump(exclude={"screen", "promote"}))
    blocks = split_rounds(rounds, live_workers(session, study.pool, study.backend))
    validation = Validation(
        study_id=study.id, team_id=study.team_id, pool=study.pool, state=VALIDATION.initial.value,
        candidate_ids=[c.id for c in candidates], baseline=baseline_config(session, study), rounds=rounds,
        jobs=len(blocks), requested_by_name=requested_by,
    )
    session.add(validation)
    session.flush()
    configs = 1 + len(candidates)
    acfs = controls_files.read(session, controls_files.named(kernel.controls,
                                                             [validation.baseline, *(c.config for c in candidates)]))
    for block in blocks:
        spec = wire.ValidationSpec(
            validation_id=validation.id, job_id=0, study_id=study.id, kernel=kernel, baseline=validation.baseline,
            candidates=[wire.ValidationCandidate(candidate_id=c.id, config=c.config) for c in candidates],
            objectives=doc.objective_names, rounds=block, measure=measure,
            compile_timeout_s=doc.limits.compile_timeout_s,
            run_timeout_s=min(MAX_RUN_TIMEOUT_S, doc.limits.run_timeout_s * configs * (block + 1)),
            compile_only=doc.compile_only, acfs=acfs,
        )
        session.add(ValidationJob(
            validation_id=validation.id, study_id=study.id, pool=study.pool, backend=study.backend,
            requires_energy=study.requires_energy, requires_gpu=doc.requires_gpu,
            state=JOB.initial.value,
            spec=spec.model_dump(mode="json", exclude={"job_id", "attempt"}), rounds=block,
            max_attempts=doc.limits.max_attempts,
        ))
    for candidate in candidates:
        candidate.validation_id = validation.id
    session.flush()
    after_commit(session, QUEUED_HINT.queued)
    effects(session).queued(study.pool, None)  # rare beside trials: every idle worker of the pool looks
    return validation


# -- validation jobs as leased work ------------------------------------------------------------

# Validation jobs are rare beside trials: a lease looks for one only when one was queued since
# (here) or every period (another replica's)
QUEUED_HINT = QueuedHint()


class ValidationWork(WorkKind):
    """Validation jobs as a kind of leased work (service.trials.leases)."""

    name: ClassVar[str] = "validation"
    noun: ClassVar[str] = "validation job"
    table = VALIDATION_JOBS
    report = wire.ValidationReport
    machine = JOB
    hint: ClassVar[QueuedHint | None] = QUEUED_HINT

    def lease_values(self) -> dict[str, Any]:
        """A new attempt measures every round again."""
        return {"rounds_done": 0, "round_s": null(), "progress_at": null()}

    def lease_columns(self) -> Sequence[ColumnElement[Any]]:
        c = VALIDATION_JOBS.c
        return (c.id, c.validation_id, c.spec, c.attempt)

    def leased(self, session: Session, row: Row[Any]) -> wire.ValidationSpec:
        validation = session.get(Validation, row.validation_id)
        if validation is not None and validation.state == ValidationState.QUEUED:  # its first job leased
            transition_validation(session, validation, ValidationState.RUNNING)
        return wire.ValidationSpec.model_validate({**row.spec, "job_id": row.id, "attempt": row.attempt})

    def outcome(self, session: Session, lease: Held, report: wire.ValidationReport) -> Outcome:
        spec = session.execute(select(ValidationJob.spec).where(ValidationJob.lease_token == lease.token)).scalar()
        if spec is not None:
            _check_report(spec, report)
        if report.status == "completed":
            return Outcome(JobState.COMPLETED.value, {**self._reported(report), "rounds_done": report.rounds})
        return Outcome(JobState.FAILED.value, self._reported(report))  # its rounds as its heartbeats said

    @staticmethod
    def _reported(report: wire.ValidationReport) -> dict[str, Any]:
        return {"report": storable(report.model_dump(mode="json")), "message": storable_text(report.message[:10_000])}

    def progressed(self, session: Session, lease: Held, progress: wire.RoundProgress) -> None:
        """The rounds measured so far, stamped when their count grows."""
        c = VALIDATION_JOBS.c
        rounds = session.execute(select(c.rounds).where(c.lease_token == lease.token)).scalar_one()
        done = len(progress.round_s)
        if done > rounds:
            raise Invalid(f"the job has {rounds} rounds; progress names {done} (one duration per round measured)",
                          field="progress.round_s")
        session.execute(update(VALIDATION_JOBS).where(c.lease_token == lease.token, c.rounds_done < done)
                        .values(rounds_done=done, round_s=progress.round_s, progress_at=utcnow()))

    def ack_columns(self) -> Sequence[ColumnElement[Any]]:
        return (VALIDATION_JOBS.c.id, VALIDATION_JOBS.c.validation_id)

    def recorded(self, session: Session, row: Row[Any], state: str) -> wire.ValidationAck:
        """(The last job's report judges the validation, in the same transaction.)"""
        finish_if_done(session, row.validation_id)
        return self.ack(row, state, duplicate=False)

    def ack(self, row: Row[Any], state: str, *, duplicate: bool) -> wire.ValidationAck:
        return wire.ValidationAck(validation_id=row.validation_id, job_id=row.id, state=state, duplicate=duplicate)

    def expiry_columns(self) -> Sequence[ColumnElement[Any]]:
        return (VALIDATION_JOBS.c.validation_id,)

    def expire_to(self, session: Session, rows: Sequence[Row[Any]]) -> list[Outcome]:
        return [Outcome(JobState.QUEUED.value, {"message": None}) if row.attempt < row.max_attempts else
                Outcome(JobState.FAILED.value,
                        {"message": f"lease expired {row.attempt} times; no worker finished this validation job"})
                for row in rows]

    def expired(self, session: Session, rows: Sequence[Row[Any]], outcomes: Sequence[Outcome]) -> None:
        for row, outcome in zip(rows, outcomes, strict=True):
            if outcome.state == JobState.QUEUED:  # as transition_job registers it
                effects(session).queued(row.pool, None)
                after_commit(session, QUEUED_HINT.queued)
            else:
                finish_if_done(session, row.validation_id)


def _check_report(spec: dict[str, Any], report: wire.ValidationReport) -> None:
    if report.rounds > spec["rounds"]:
        raise Invalid(f"the job has {spec['rounds']} rounds; the report names {report.rounds}", field="rounds")
    expected = sorted(c["candidate_id"] for c in spec["candidates"])
    got = sorted(c.candidate_id for c in report.candidates if c.candidate_id is not None)
    if report.status == "completed" and got != expected:
        raise Invalid(f"the report must carry an outcome for each candidate of the job {expected}, got {got}",
                      field="candidates")
    if report.baseline.candidate_id is not None:
        raise Invalid("the baseline's outcome has candidate_id null", field="baseline.candidate_id")
    if report.status == "completed":
        for outcome in [report.baseline, *report.candidates]:
            if outcome.status != "ok":
                continue
            for name in spec["objectives"]:
                if len(outcome.values.get(name, [])) != report.rounds:
                    who = "baseline" if outcome.candidate_id is None else f"candidate {outcome.candidate_id}"
                    raise Invalid(f"{who}: {name} needs one value per round ({report.rounds})",
                                  field=f"values.{name}")


# -- judging ---------------------------------------------------------------------------------


def finish_if_done(session: Session, validation_id: int) -> Validation | None:
    stmt = select(Validation).where(Validation.id == validation_id).execution_options(populate_existing=True)
    if is_postgres(session):
        stmt = stmt.with_for_update()
    validation = session.execute(stmt).scalar_one()
    if validation.state in VALIDATION_FINISHED:
        return None
    jobs = list(session.execute(select(ValidationJob).where(ValidationJob.validation_id == validation_id)
                                .order_by(ValidationJob.id)).scalars())
    if not all(JobState(j.state) in JOB_FINISHED for j in jobs):
        return None
    judge(session, validation, jobs)
    return validation


def judge(session: Session, validation: Validation, jobs: list[ValidationJob]) -> None:
    """Every candidate's verdict from the completed jobs' reports."""
    reports = [wire.ValidationReport.model_validate(j.report) for j in jobs
               if j.state == JobState.COMPLETED and j.report is not None]
    study = session.get(Study, validation.study_id)
    assert study is not None
    document = sd.document_of(study)
    objectives = [(o.name, o.direction) for o in document.objectives]
    confidence = document.measure.confidence
    results: dict[str, Any] = {}
    candidates = {c.id: c for c in session.execute(
        select(Candidate).where(Candidate.id.in_(validation.candidate_ids))).scalars()}
    for candidate_id in validation.candidate_ids:
        result = _verdict(reports, candidate_id, objectives, confidence)
        results[str(candidate_id)] = result
        candidate = candidates.get(candidate_id)
        if candidate is None or candidate.state != CandidateState.VALIDATING:
            continue  # rejected meanwhile
        verdict = CandidateState.VALIDATED if result["passed"] else CandidateState.FAILED
        transition_candidate(session, candidate, verdict, audit.Actor(audit.SERVICE_ACTOR, None), result["message"],
                             {"validation_id": validation.id})
    failed_jobs = [j for j in jobs if j.state == JobState.FAILED]
    first = next((r for r in reports if r.target is not None), None)
    prints = [r.fingerprint.model_dump(mode="json") for r in reports if r.fingerprint is not None]
    transition_validation(
        session, validation, ValidationState.COMPLETED if reports else ValidationState.FAILED,
        results=storable(results),
        message="; ".join(f"job {j.id}: {j.message}" for j in failed_jobs)[:10_000] or None,
        target=first.target.model_dump(mode="json") if first and first.target else None,
        fingerprints=storable(prints),
    )


def _verdict(reports: list[wire.ValidationReport], candidate_id: int, objectives: list[tuple[str, Any]],
             confidence: float) -> dict[str, Any]:
    outcomes = [o for r in reports for o in r.candidates if o.candidate_id == candidate_id]
    shapes: list[dict[str, Any]] = []
    for outcome in outcomes:
        shapes += [s.model_dump(mode="json") for s in outcome.correctness if s.model_dump(mode="json") not in shapes]
    result: dict[str, Any] = {"passed": False, "correct": None, "message": "", "correctness": shapes,
                              "metrics": [], "jobs": len(outcomes)}
    if not outcomes:
        result["message"] = "no validation job completed: nothing was measured"
        return result
    wrong = [o for o in outcomes if o.correct is False]
    result["correct"] = not wrong and all(o.correct for o in outcomes)
    if wrong:
        result["message"] = f"wrong result: {wrong[0].message}"[:2000]
        return result
    failed = [o for o in outcomes if o.status != "ok"]
    if failed:
        reason = failed[0].failure_reason.value if failed[0].failure_reason else "failed"
        result["message"] = f"{reason}: {failed[0].message}"[:2000]
        return result
    metrics = compare_reports(reports, candidate_id, objectives, confidence)
    result["metrics"] = [m.model_dump(mode="json") for m in metrics]
    if any(m.rounds == 0 for m in metrics):
        result["message"] = "no usable round of " + ", ".join(m.objective for m in metrics if m.rounds == 0)
        return result
    result["passed"] = True
    result["message"] = "; ".join(
        f"{m.objective} x{_short(m.ratio)} [{_short(m.ci_low)}, {_short(m.ci_high)}] {m.verdict}" if m.ratio is not None
        else f"{m.objective} {_short(m.baseline)} -> {_short(m.candidate)} {m.verdict}" for m in metrics)
    return result


def _short(value: float | None) -> str:
    return "?" if value is None or not math.isfinite(value) else f"{value:.4g}"


def jobs_of(session: Session, validation_ids: Sequence[int]) -> dict[int, list[ValidationJob]]:
    """The jobs of each validation, in order."""
    found: dict[int, list[ValidationJob]] = {v: [] for v in validation_ids}
    for job in session.execute(select(ValidationJob).where(ValidationJob.validation_id.in_(validation_ids))
                               .options(defer(ValidationJob.report), defer(ValidationJob.spec))
                               .order_by(ValidationJob.id)).scalars():
        found[job.validation_id].append(job)
    return found


def job_counts(session: Session, validation_id: int) -> dict[str, int]:
    rows = session.execute(select(ValidationJob.state, func.count()).where(
        ValidationJob.validation_id == validation_id).group_by(ValidationJob.state)).all()
    return {state: int(count) for state, count in rows}

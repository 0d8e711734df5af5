"""Trials as a kind of leased work (service.trials.leases): what a trial's lease hands out,
what its result writes, where it goes when its lease expires.

A result is one short write of its trial row and takes no study-wide lock: the study's
scheduling step accounts for it later (woken after the commit: transitions.announce). A trial's lease token
carries its study and stage, so the result is judged against the study's objectives (a
per-process cache) before the database is touched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from sqlalchemy import ColumnElement, Row, String, bindparam, cast, func, select
from sqlalchemy.orm import Session

from service.controls.files import ControlsFiles
from service.domain import results
from service.domain.states import TRIAL, StudyState, TrialState, after_expired_lease
from service.scheduling import screening
from service.store.db import lock_study
from service.store.models import TRIALS, Study
from service.store.storable import storable
from service.studies.specs import Screen, StudySpecs
from service.trials.kinds import Held, Outcome, WorkKind
from service.trials.transitions import announce
from wire import contract as wire

STAGES = {"s": "screen", "f": "full"}  # a stage by the letter a lease token carries


class TrialWork(WorkKind):
    name: ClassVar[str] = "trial"
    noun: ClassVar[str] = "trial"
    table = TRIALS
    report = wire.TrialResult
    machine = TRIAL
    sequenced: ClassVar[bool] = True
    shared: ClassVar[bool] = True

    def __init__(self, specs: StudySpecs, controls_files: ControlsFiles) -> None:
        self.specs = specs
        self.controls_files = controls_files

    # -- lease -------------------------------------------------------------------------------

    def route(self) -> ColumnElement[str]:
        c = TRIALS.c
        return cast(c.study_id, String) + func.coalesce(func.substr(c.stage, 1, 1), "")

    def lease_values(self) -> dict[str, Any]:
        return {"started_at": bindparam("v_now", type_=TRIALS.c.started_at.type)}

    def lease_columns(self) -> Sequence[ColumnElement[Any]]:
        c = TRIALS.c
        return (c.id, c.study_id, c.number, c.attempt, c.is_baseline, c.config, c.stage)

    def leased(self, session: Session, row: Row[Any]) -> wire.TrialSpec:
        spec = self.specs.get(session, row.study_id)
        objectives, measure = spec.objectives, spec.measure
        if row.stage == "screen" and spec.screen is not None:
            objectives, measure = spec.screen.objectives, spec.screen.measure
        controls = spec.kernel.controls
        return wire.TrialSpec(
            trial_id=row.id,
            study_id=row.study_id,
            number=row.number,
            attempt=row.attempt,
            is_baseline=row.is_baseline,
            kernel=spec.kernel,
            config=row.config,
            objectives=objectives,
            compile_timeout_s=spec.limits.compile_timeout_s,
            run_timeout_s=spec.limits.run_timeout_s,
            measure=measure,
            stage=row.stage,
            sandbox=spec.limits.sandbox,
            compile_only=spec.compile_only,
            acfs=self.controls_files.for_config(session, controls, row.config) if controls else [],
        )

    def cancel(self) -> ColumnElement[bool]:
        # a paused study lets running trials finish; a cancelled, failed or deleted one wants them stopped
        state = select(Study.state).where(Study.id == TRIALS.c.study_id).scalar_subquery()
        return func.coalesce(state, StudyState.CANCELLED.value).in_((StudyState.CANCELLED, StudyState.FAILED))

    # -- result ------------------------------------------------------------------------------

    def outcome(self, session: Session, lease: Held, report: wire.TrialResult) -> Outcome:
        """A result's fields; a screening stage's result makes the trial screened (its
        study's step decides on it)."""
        study_id, stage = self._route(session, lease)
        spec = self.specs.get(session, study_id)
        fields: dict[str, Any] = storable(dict(
            metrics={name: m.model_dump() for name, m in report.metrics.items()},
            correctness=report.correctness,
            compile_report=report.compile_report,
            environment=report.environment,
            timings=report.timings,
            log=report.log[-100_000:],
            message=report.message[:10_000],
        ))
        fields["fingerprint"] = lease.worker.fingerprint
        if report.status == "failed":
            fields["failure_reason"] = (report.failure_reason or wire.FailureReason.ERROR).value
            return Outcome(TrialState.FAILED.value, fields)
        if stage == "screen" and spec.screen is not None:
            return Outcome(_screened(spec.screen, lease.worker.id, report, fields).value, fields)
        try:
            outcome = results.evaluate(spec.objectives, spec.constraints,
                                       {name: m.value for name, m in report.metrics.items()})
        except results.Unusable as exc:
            fields["message"] = f"{exc}. {fields['message']}".strip()
            fields["failure_reason"] = wire.FailureReason.ERROR.value
            return Outcome(TrialState.FAILED.value, fields)
        fields.update(values=outcome.values, constraint_values=outcome.constraint_values, feasible=outcome.feasible)
        return Outcome(TrialState.COMPLETED.value, fields)

    @staticmethod
    def _route(session: Session, lease: Held) -> tuple[int, str | None]:
        """The study and stage of the lease's trial: from its token, or (a token of an older
        release) from its row."""
        digits = lease.route.rstrip("".join(STAGES))
        if digits.isdigit():
            return int(digits), STAGES.get(lease.route[len(digits):])
        row = session.execute(select(TRIALS.c.study_id, TRIALS.c.stage)
                              .where(TRIALS.c.lease_token == lease.token)).one()
        return row.study_id, row.stage

    def ack_columns(self) -> Sequence[ColumnElement[Any]]:
        return (TRIALS.c.id, TRIALS.c.study_id, TRIALS.c.stage, TRIALS.c.pool)

    def recorded(self, session: Session, row: Row[Any], state: str) -> wire.ResultAck:
        announce(session, row.study_id, row.pool, TrialState(state))  # its step accounts for it
        return self.ack(row, state, duplicate=False)

    def duplicate(self, row: Row[Any], state: str) -> wire.ResultAck | None:
        """The token's result is on the row when the trial finished or its screen reported (a
        promoted trial keeps its screen's token until its full stage is leased)."""
        reported = state in TRIAL.final or state == TrialState.SCREENED or (
            row.stage == "full" and state in (TrialState.QUEUED, TrialState.PAUSED))
        return self.ack(row, state, duplicate=True) if reported else None

    def ack(self, row: Row[Any], state: str, *, duplicate: bool) -> wire.ResultAck:
        return wire.ResultAck(trial_id=row.id, state=state, duplicate=duplicate)

    # -- expiry ------------------------------------------------------------------------------

    def expiry_columns(self) -> Sequence[ColumnElement[Any]]:
        return (TRIALS.c.study_id,)

    def expire_to(self, session: Session, rows: Sequence[Row[Any]]) -> list[Outcome]:
        """Failed after the last attempt, else back to waiting as its study is (queued,
        paused), or cancelled once the study has finished; under the study's lock, which
        pause, resume and cancel take."""
        states = {}
        for study_id in sorted({row.study_id for row in rows}):
            study = lock_study(session, study_id)
            states[study_id] = study.state if study is not None else StudyState.CANCELLED.value
        outcomes = []
        for row in rows:
            target = after_expired_lease(row.attempt, row.max_attempts, states[row.study_id])
            fields: dict[str, Any] = {"failure_reason": None, "message": None}
            if target == TrialState.FAILED:
                fields.update(failure_reason=wire.FailureReason.LEASE_EXPIRED.value,
                              message=f"lease expired {row.attempt} times; no worker finished this trial")
            elif target == TrialState.CANCELLED:
                fields["failure_reason"] = wire.FailureReason.CANCELLED.value
            outcomes.append(Outcome(target.value, fields))
        return outcomes

    def expired(self, session: Session, rows: Sequence[Row[Any]], outcomes: Sequence[Outcome]) -> None:
        for row, outcome in zip(rows, outcomes, strict=True):
            announce(session, row.study_id, row.pool, TrialState(outcome.state))


def _screened(screen: Screen, worker_id: int, result: wire.TrialResult, fields: dict[str, Any]) -> TrialState:
    """A screening result's fields: the screened metrics with their intervals (never objective
    values); a result without them fails the trial as a full one would."""
    try:
        results.evaluate(screen.objectives, [],
                         {name: m.value for name, m in result.metrics.items()})
    except results.Unusable as exc:
        fields["message"] = f"{exc}. {fields['message']}".strip()
        fields["failure_reason"] = wire.FailureReason.ERROR.value
        return TrialState.FAILED
    chosen = {name: result.metrics[name] for name in screen.objectives}
    intervals = {name: screening.Interval.of(m.model_dump()) for name, m in chosen.items()}
    fields["screening"] = storable(dict(
        values={name: i.value for name, i in intervals.items()},
        intervals={name: [i.low, i.high] for name, i in intervals.items()},
        units={name: m.unit for name, m in chosen.items()},
        worker_id=worker_id,
        timings=result.timings,
        promoted=None, dominated_by=None, told=None, reason=None,
    ))
    return TrialState.SCREENED

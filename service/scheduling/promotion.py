"""What becomes of a study's screened trials, decided in its scheduling step against the front
of its fully measured trials (service.scheduling.screening has the rule):
- promoted: the same trial goes back to the queue for its full stage, where any worker of
  the pool may take it (attempts count afresh; the sampler still holds it as running and
  hears its full values when that stage completes);
- screened out: it finishes with its screening values, which are never objective values,
  and the sampler hears of it now (service.scheduling.mirror);
- undecided (`screening.deferred`): while the study has no front yet and a full stage is
  being measured (the baseline's, at first), a screened trial waits for that front rather
  than being promoted for want of one; every step decides it again.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.domain.states import TrialState, waiting_state
from service.scheduling import screening
from service.scheduling.mirror import Mirror
from service.store.models import Study, Trial
from service.studies.document import document_of
from service.trials.transitions import transition
from wire.contract import FailureReason

WAITS = "waits for the study's first fully measured trial"


def decide(session: Session, study: Study, mirror: Mirror, screened: list[Trial]) -> int:
    """Decide every trial of `screened` (state screened), or defer it while the study's first
    front is on its way; returns how many it decided."""
    document = document_of(study)
    assert document.measure.promote is not None, "a study that screens has a promotion rule"
    rule = screening.Rule.of(document.measure.promote)
    members = front_members(session, study.id)
    awaited = not members and full_stage_pending(session, study.id)  # a front that is on its way
    decided = 0
    for trial in screened:
        data = dict(trial.screening or {})
        if awaited and not trial.is_baseline:
            if not data.get("deferred"):
                trial.screening = {**data, "deferred": True, "reason": WAITS}
            continue
        decided += 1
        decision = screening.decide(document.objectives, intervals(data), members, rule, baseline=trial.is_baseline)
        data.update(promoted=decision.promote, dominated_by=decision.by, told=decision.told, reason=decision.reason)
        if not decision.promote:
            transition(session, trial, TrialState.SCREENED_OUT, told=True, screening=data)
            study.n_screened_out += 1
            mirror.learn(trial)
            continue
        awaited = awaited or not members
        target = waiting_state(study.state)
        # the screen's lease token (and worker) stay until the full stage's lease replaces
        # them, so that a repeated post of the screen's result is still known as one
        fields: dict[str, Any] = dict(stage="full", attempt=0, lease_expires_at=None, phase=None,
                                      requires_energy=study.requires_energy, screening=data)
        if target == TrialState.CANCELLED:  # its study finished while it was screened
            fields.update(failure_reason=FailureReason.CANCELLED.value, told=True)
            study.n_cancelled += 1
        transition(session, trial, target, **fields)
        if target == TrialState.CANCELLED:
            mirror.learn(trial)
    return decided


def deferred(trial: Trial) -> bool:
    """A screened trial that an earlier step left undecided."""
    return trial.state == TrialState.SCREENED and bool((trial.screening or {}).get("deferred"))


def full_stage_pending(session: Session, study_id: int) -> bool:
    """Whether a promoted trial of the study waits for, or runs, its full stage."""
    return session.execute(
        select(Trial.id).where(Trial.study_id == study_id, Trial.stage == "full", Trial.state.in_(
            [TrialState.QUEUED.value, TrialState.PAUSED.value, TrialState.RUNNING.value])).limit(1)
    ).first() is not None


def intervals(data: dict[str, Any]) -> dict[str, screening.Interval]:
    """A stored screening result's intervals (service.trials.schemas.ScreeningOut)."""
    values = data.get("values") or {}
    return {name: screening.Interval(float(low), float(values[name]), float(high))
            for name, (low, high) in (data.get("intervals") or {}).items() if name in values}


def front_members(session: Session, study_id: int) -> list[screening.Member]:
    """The study's front as the rule compares with it: full values and screening intervals."""
    rows = session.execute(
        select(Trial.number, Trial.values, Trial.screening)
        .where(Trial.study_id == study_id, Trial.on_front.is_(True))
    ).all()
    return [screening.Member(row.number, row.values or {}, intervals(row.screening))
            for row in rows if row.screening]

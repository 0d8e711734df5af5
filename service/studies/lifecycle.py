"""A study's life: creation, pause, resume, cancel and its end. Every change of a study's
state goes through `transition`, which checks it against the study's state machine, records
it (a new sequence number and updated_at) and registers what it wakes."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.domain.machines import IllegalTransition
from service.domain.schedule import Settlement
from service.domain.states import STUDY, STUDY_FINISHED, TRIAL_WAITING, StudyState, TrialState
from service.errors import Conflict, NotFound
from service.notify import Channel
from service.store.db import lock_study, next_seq
from service.store.effects import effects
from service.store.models import Study, as_utc, utcnow
from service.studies import document as sd
from service.trials.transitions import transition_all
from wire.contract import FailureReason


def transition(session: Session, study: Study, to: StudyState, **fields: Any) -> None:
    """Move a study to `to`, changing `fields` with it (a finished study's finish_reason).
    A study that runs again wakes its step, which queues its trials."""
    target = STUDY.check(study.state, to)
    for name, value in fields.items():
        setattr(study, name, value)
    study.state = target.value
    if target in STUDY_FINISHED:
        study.finished_at = utcnow()
    touch(session, study)
    if target == StudyState.RUNNING:
        effects(session).wake_step(study.id)


def touch(session: Session, study: Study, seq: int | None = None) -> None:
    """The study changed: its event streams send it again (`seq`: a value the caller drew)."""
    study.updated_at = utcnow()
    study.seq = seq if seq is not None else next_seq(session)
    effects(session).notify(Channel.study(study.id), Channel.STUDIES)


def create(session: Session, team_id: int, token_id: int | None, document: sd.ResolvedDocument) -> Study:
    """The study row; its scheduling step queues the trials (the baseline first)."""
    metrics = set(document.objective_names) | {c.metric for c in document.constraints}
    budget = document.budget
    study = Study(
        team_id=team_id,
        name=document.name,
        state=STUDY.initial.value,
        document=document.model_dump(mode="json"),
        objectives=[o.model_dump() for o in document.objectives],
        pool=document.pool,
        backend=document.kernel.backend,
        sampler=document.sampler.name,
        requires_energy=bool(metrics & sd.ENERGY_OBJECTIVES),
        max_trials=budget.max_trials,
        max_failed_trials=budget.max_failed_trials,
        wall_time_s=budget.wall_time_s,
        parallelism=document.parallelism,
        priority=document.priority.value,
        weight=document.weight,
        reference_point=[document.reference_point[name] for name in document.objective_names],
        created_by=token_id,
        best={},
        seq=next_seq(session),
    )
    session.add(study)
    session.flush()
    effects(session).wake_step(study.id)  # its step queues the first trials
    effects(session).notify(Channel.STUDIES)
    return study


def past_wall_time(study: Study) -> bool:
    if study.wall_time_s is None:
        return False
    return (utcnow() - as_utc(study.created_at)).total_seconds() > study.wall_time_s


def wall_time_over(session: Session) -> list[int]:
    """Running or paused studies past their wall-time limit (their steps settle them)."""
    candidates = session.execute(
        select(Study).where(Study.state.in_((StudyState.RUNNING, StudyState.PAUSED)), Study.wall_time_s.is_not(None))
    ).scalars().all()
    return [s.id for s in candidates if past_wall_time(s)]


def cancel_waiting(session: Session, study: Study) -> int:
    """Cancel the study's queued and paused trials; they are accounted for at once."""
    cancelled = transition_all(session, study.id, TRIAL_WAITING, TrialState.CANCELLED,
                               failure_reason=FailureReason.CANCELLED.value, told=True)
    study.n_cancelled += len(cancelled)
    return len(cancelled)


def apply_settlement(session: Session, study: Study, settlement: Settlement) -> None:
    cancel_waiting(session, study)
    if settlement.finish_now:
        transition(session, study, settlement.state, finish_reason=settlement.reason)
    else:
        touch(session, study)


def change(session: Session, study_id: int, action: str) -> Study:
    """pause, resume or cancel, by a user; the study's lock is taken (waits for its step)."""
    study = lock_study(session, study_id)
    if study is None:
        raise NotFound(f"no study {study_id}", field="study_id")
    try:
        if action == "pause":
            transition(session, study, StudyState.PAUSED)
            transition_all(session, study.id, [TrialState.QUEUED], TrialState.PAUSED)
        elif action == "resume":
            transition(session, study, StudyState.RUNNING)
            transition_all(session, study.id, [TrialState.PAUSED], TrialState.QUEUED)
        else:
            cancel_waiting(session, study)
            transition(session, study, StudyState.CANCELLED, finish_reason="cancelled by user")
    except IllegalTransition as exc:
        raise Conflict(_refusal(action, study.state), field="state") from exc
    return study


def _refusal(action: str, state: str) -> str:
    if action == "pause":
        return f"only a running study can be paused; this one is {state}"
    if action == "resume":
        return f"only a paused study can be resumed; this one is {state}"
    return f"the study is already {state}"

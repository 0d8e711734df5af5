"""A study's life: creation, pause, resume, cancel and its end. Every change of a study's
state goes through `set_state`, which checks it against the state machine and records it
(a new sequence number and updated_at)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from service.domain.schedule import Settlement
from service.domain.states import STUDY_FINISHED, TRIAL_WAITING, IllegalTransition, StudyState, TrialState, check_study
from service.errors import Conflict, NotFound
from service.store.db import lock_study, next_seq
from service.store.models import Study, as_utc, utcnow
from service.studies import document as sd
from service.trials.transitions import move_all


def set_state(session: Session, study: Study, new: StudyState, reason: str | None = None) -> None:
    target = check_study(study.state, new)
    study.state = target.value
    if target in STUDY_FINISHED:
        study.finish_reason, study.finished_at = reason, utcnow()
    touch(session, study)


def touch(session: Session, study: Study, seq: int | None = None) -> None:
    """The study changed: its event streams send it again (`seq`: a value the caller drew)."""
    study.updated_at = utcnow()
    study.seq = seq if seq is not None else next_seq(session)


def create(session: Session, team_id: int, token_id: int | None, document: dict[str, Any]) -> Study:
    """The study row; its scheduling step queues the trials (the baseline first)."""
    objectives = document["objectives"]
    metrics = {o["name"] for o in objectives} | {c["metric"] for c in document["constraints"]}
    study = Study(
        team_id=team_id,
        name=document["name"],
        state=StudyState.RUNNING.value,
        document=document,
        objectives=objectives,
        pool=document["pool"],
        backend=document["kernel"]["backend"],
        sampler=document["sampler"]["name"],
        requires_energy=bool(metrics & sd.ENERGY_OBJECTIVES),
        max_trials=document["budget"]["max_trials"],
        max_failed_trials=document["budget"]["max_failed_trials"],
        wall_time_s=document["budget"]["wall_time_s"],
        parallelism=document["parallelism"],
        reference_point=[document["reference_point"][o["name"]] for o in objectives],
        created_by=token_id,
        best={},
        seq=next_seq(session),
    )
    session.add(study)
    session.flush()
    return study


def past_wall_time(study: Study) -> bool:
    if study.wall_time_s is None:
        return False
    return (utcnow() - as_utc(study.created_at)).total_seconds() > study.wall_time_s


def cancel_waiting(session: Session, study: Study) -> int:
    """Cancel the study's queued and paused trials; they are accounted for at once."""
    cancelled = move_all(session, study.id, TRIAL_WAITING, TrialState.CANCELLED, failure_reason="cancelled",
                         told=True)
    study.n_cancelled += len(cancelled)
    return len(cancelled)


def apply_settlement(session: Session, study: Study, settlement: Settlement) -> None:
    cancel_waiting(session, study)
    if settlement.finish_now:
        set_state(session, study, settlement.state, settlement.reason)
    else:
        touch(session, study)


def change(session: Session, study_id: int, action: str) -> Study:
    """pause, resume or cancel, by a user; the study's lock is taken (waits for its step)."""
    study = lock_study(session, study_id)
    if study is None:
        raise NotFound(f"no study {study_id}", field="study_id")
    try:
        if action == "pause":
            set_state(session, study, StudyState.PAUSED)
            move_all(session, study.id, [TrialState.QUEUED], TrialState.PAUSED)
        elif action == "resume":
            set_state(session, study, StudyState.RUNNING)
            move_all(session, study.id, [TrialState.PAUSED], TrialState.QUEUED)
        else:
            cancel_waiting(session, study)
            set_state(session, study, StudyState.CANCELLED, "cancelled by user")
    except IllegalTransition as exc:
        raise Conflict(_refusal(action, study.state), field="state") from exc
    return study


def _refusal(action: str, state: str) -> str:
    if action == "pause":
        return f"only a running study can be paused; this one is {state}"
    if action == "resume":
        return f"only a paused study can be resumed; this one is {state}"
    return f"the study is already {state}"

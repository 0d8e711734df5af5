"""Every change of a trial's state goes through here: the change is checked against the
state machine (service.domain.states), and the trial gets a new sequence number, which is
its event: event streams and sampler mirrors follow trials by sequence number."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.domain.states import TRIAL_FINISHED, TrialState, check_trial
from service.store.db import is_postgres, next_seq, next_seqs
from service.store.models import Trial, utcnow


def move(session: Session, trial: Trial, new: TrialState, *, seq: int | None = None, **fields: Any) -> None:
    """Change one trial's state (and any other fields with it)."""
    target = check_trial(trial.state, new)
    if seq is None:  # drawn first: drawing it flushes, and one UPDATE should carry the whole change
        seq = next_seq(session)
    trial.state = target.value
    for name, value in fields.items():
        setattr(trial, name, value)
    if target in TRIAL_FINISHED and trial.finished_at is None:
        trial.finished_at = utcnow()
    trial.seq = seq


def move_all(session: Session, study_id: int, old: Iterable[TrialState], new: TrialState, **fields: Any) -> list[Trial]:
    """Change every trial of a study in one of the `old` states; returns them. On Postgres a
    row that a lease has locked meanwhile is skipped (it is running by the time it commits)."""
    stmt = (select(Trial).where(Trial.study_id == study_id, Trial.state.in_([s.value for s in old]))
            .order_by(Trial.id).execution_options(populate_existing=True))
    if is_postgres(session):
        stmt = stmt.with_for_update(skip_locked=True)
    rows = list(session.execute(stmt).scalars())
    for row, seq in zip(rows, next_seqs(session, len(rows)), strict=True):
        move(session, row, new, seq=seq, **fields)
    return rows


def touch(session: Session, trial: Trial) -> None:
    """A new sequence number for a trial whose state stays, but whose shown fields changed
    (front membership, ratios), so that event streams send it again."""
    trial.seq = next_seq(session)

"""Every change of a trial's state goes through here: the move is checked against the
trial's state machine (service.domain.states), the trial gets a new sequence number, which
is its event (event streams and sampler mirrors follow trials by sequence number), and what
the move wakes is registered for after the commit (service.store.effects)."""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable, Iterator, Sequence
from typing import Any

from sqlalchemy import ColumnElement, and_, insert, select, text, update
from sqlalchemy.orm import Session

from service.domain.states import TRIAL, TRIAL_FINISHED, TRIAL_REPORTED, TrialState
from service.notify import Channel
from service.store.db import is_postgres, next_seq, next_seqs
from service.store.effects import effects
from service.store.models import TRIALS, Trial, constants, utcnow


def transition(session: Session, trial: Trial, to: TrialState, *, seq: int | None = None, **fields: Any) -> None:
    """Move one trial to `to`, changing `fields` with it."""
    target = TRIAL.check(trial.state, to)
    if seq is None:  # drawn first: drawing it flushes, and one UPDATE should carry the whole change
        seq = next_seq(session)
    for name, value in fields.items():
        setattr(trial, name, value)
    trial.state = target.value
    if target in TRIAL_FINISHED and trial.finished_at is None:
        trial.finished_at = utcnow()
    trial.seq = seq
    announce(session, trial.study_id, trial.pool, target, told=bool(trial.told))


def queue(session: Session, rows: list[dict[str, Any]]) -> list[int]:
    """Create trials in the machine's initial state (queued), one row's columns each; their
    ids, in order. Core statements, not the ORM's flush: a study's step queues dozens of
    trials at a time and reads none of them back. Several rows on Postgres: their ids are
    drawn first, and the rows go as one prepared INSERT run for each, whose text is the same
    whatever their number (a statement of every row's values is parsed anew each time)."""
    if len(rows) > 1 and is_postgres(session):
        ids = list(session.execute(_TRIAL_IDS, {"n": len(rows)}).scalars())
        session.execute(insert(TRIALS), [{**row, "id": trial_id} for row, trial_id in zip(rows, ids, strict=True)])
    elif rows:
        ids = list(session.execute(insert(TRIALS).returning(TRIALS.c.id, sort_by_parameter_order=True), rows).scalars())
    else:
        return []
    for row in rows:
        announce(session, row["study_id"], row["pool"], TRIAL.initial)
    return ids


_TRIAL_IDS = text("SELECT nextval(pg_get_serial_sequence('trials', 'id')) FROM generate_series(1, :n)")


def transition_all(session: Session, study_id: int, old: Iterable[TrialState], to: TrialState,
                   **fields: Any) -> list[Trial]:
    """Move every trial of a study in one of the `old` states; returns them. On Postgres a
    row that a lease has locked meanwhile is skipped (it is running by the time it commits)."""
    stmt = (select(Trial).where(Trial.study_id == study_id, Trial.state.in_([s.value for s in old]))
            .order_by(Trial.id).execution_options(populate_existing=True))
    if is_postgres(session):
        stmt = stmt.with_for_update(skip_locked=True)
    rows = list(session.execute(stmt).scalars())
    for row, seq in zip(rows, next_seqs(session, len(rows)), strict=True):
        transition(session, row, to, seq=seq, **fields)
    return rows


def announce(session: Session, study_id: int, pool: str, to: TrialState, *, told: bool = False) -> None:
    """Register what a trial's move to `to` wakes once committed: its study's event streams;
    a worker of its pool when it is queued; its study's step when the step has a report to
    account for. `transition` does it for every move; the lease queue's statements
    (service.trials.leases) do it through here."""
    woken = effects(session)
    woken.notify(Channel.study(study_id))
    if to == TrialState.QUEUED:
        woken.queued(pool, study_id=study_id)
    elif to in TRIAL_REPORTED and not told:
        woken.wake_step(study_id)


def awaiting_tell(c: Any) -> ColumnElement[bool]:
    """The trials (of columns `c`: the Trial entity's or the trials table's) whose report
    their study's step has yet to tell its sampler: those whose move `announce` woke the step
    for."""
    return and_(c.told.is_(False), c.state.in_(constants(TRIAL_REPORTED)))


def touch(session: Session, trials: Sequence[Trial], seqs: Iterator[int] | None = None) -> None:
    """New sequence numbers for trials whose state stays but whose shown fields changed
    (front membership, ratios), so that event streams send them again (taken from `seqs`,
    values the caller drew, while it lasts). Only a study's step touches trials, and it
    touches the study with them, which wakes the study's event streams."""
    drawn = list(itertools.islice(seqs, len(trials))) if seqs is not None else []
    drawn += next_seqs(session, len(trials) - len(drawn))
    for trial, seq in zip(trials, drawn, strict=True):
        trial.seq = seq


def touch_ids(session: Session, ids: Collection[int], **values: Any) -> None:
    """The same for trials not loaded in this session, with other field changes."""
    if not ids:
        return
    if is_postgres(session):  # nextval runs once per row
        session.execute(update(Trial).where(Trial.id.in_(ids)).values(seq=text("nextval('trial_seq')"), **values))
        return
    for trial_id, seq in zip(sorted(ids), next_seqs(session, len(ids)), strict=True):
        session.execute(update(Trial).where(Trial.id == trial_id).values(seq=seq, **values))

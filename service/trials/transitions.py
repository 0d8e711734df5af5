"""Every change of a trial's state goes through here: the move is checked against the
trial's state machine (service.domain.states), the trial gets a new sequence number, which
is its event (event streams and sampler mirrors follow trials by sequence number), and what
the move wakes is registered for after the commit (service.store.effects)."""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable, Iterator, Sequence
from typing import Any

from sqlalchemy import JSON, ColumnElement, Update, bindparam, select, text, update
from sqlalchemy.orm import Session

from service.domain.states import TRIAL, TRIAL_FINISHED, TRIAL_REPORTED, TrialState
from service.notify import Channel
from service.store.db import is_postgres, next_seq, next_seqs
from service.store.effects import effects
from service.store.models import TRIALS, JsonParam, Trial, utcnow


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


# the name the lease queue (service.trials.leases) calls it by
move = transition


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
    account for. `transition` does it for every move; a hot path that moves a trial with
    `move_statement` does it through here."""
    woken = effects(session)
    woken.notify(Channel.study(study_id))
    if to == TrialState.QUEUED:
        woken.queued(pool)
    elif to in TRIAL_REPORTED and not told:
        woken.wake_step(study_id)


def move_statement(postgres: bool, old: TrialState, new: TrialState, where: ColumnElement[bool],
                   params: Iterable[str], **expressions: Any) -> Update:
    """One statement that changes the one trial matching `where` from `old` to `new` (the hot
    paths: a lease, a result), built once and run with `move_params`: each column of `params`
    takes its value from the parameter `v_<column>`; `expressions` are SQL (attempt + 1).
    Add .returning(...) to read the row back.

    A Core statement on the table (`where` and `.returning` name `TRIALS.c` columns, not the
    ORM's `Trial` attributes, which would make it an ORM statement again): the hot paths read
    trials as rows, never as ORM objects, so there is no loaded object to keep in step, and
    the ORM's per-statement machinery is skipped (a quarter of a lease's server time). Built
    once, it is not built, compared and looked up in the compiled cache on every request
    either (0.8 ms of a lease's CPU on a slow 2-core machine)."""
    TRIAL.check(old, new)
    names = [*params, *(["finished_at"] if new in TRIAL_FINISHED else [])]
    values = {name: bindparam(f"v_{name}", type_=_param_type(TRIALS.c[name].type)) for name in names}
    seq = text("nextval('trial_seq')") if postgres else bindparam("v_seq", type_=TRIALS.c.seq.type)
    return (update(TRIALS).where(TRIALS.c.state == old.value, where)
            .values(state=new.value, seq=seq, **values, **expressions))


def _param_type(column_type: Any) -> Any:
    return JsonParam if isinstance(column_type, JSON) else column_type


def move_params(session: Session, new: TrialState, **values: Any) -> dict[str, Any]:
    """The parameters of a move_statement to `new` with these column values."""
    params = {f"v_{name}": value for name, value in values.items()}
    if new in TRIAL_FINISHED:
        params.setdefault("v_finished_at", utcnow())
    if not is_postgres(session):
        params["v_seq"] = next_seq(session)
    return params


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

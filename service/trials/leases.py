"""The lease queue: every kind of leased work (trials, validation jobs, and whatever comes
next) is leased, heartbeated, reported and expired here, through one code path over a
`WorkKind`.

A kind's units are the rows of a table of its own with the lease columns
(store.models.LeaseColumns, queue_indexes); each waits `queued`, is `running` while leased
and ends in a state of its kind. Every state this module writes is one statement, its move
checked against the kind's state machine, its wake-ups registered by the kind with the
transaction's effects (service.store.effects):

- A lease pops a queued unit of the worker's pool that the worker can run: one UPDATE ...
  RETURNING (`FOR UPDATE SKIP LOCKED` on Postgres, so concurrent workers never take the
  same row). A worker is offered the kinds it registered, in the order they were registered
  here (validation jobs first: a person waits for them, so they come before every study's
  priority class). A kind whose units belong to studies (`shared`) is leased by fair share:
  the replica's view of the pool (service.trials.shares) orders the studies the worker may
  lease from, and the lease tries the first few in that order, each by the index of its
  study's queue, then the pool's oldest queued unit of any study whose team's quota does
  not hold it back. Otherwise the pool's oldest queued unit.
- A lease token names its kind, its worker and the kind's route (a trial's study and stage)
  before its secret part, so a heartbeat or a report knows what it is for without reading
  the database: each is one UPDATE ... RETURNING of the live lease's row. Only a report
  that finds none (a duplicate, an expired lease, an unknown token) reads the row to say
  which. Reports are idempotent per token.
- Expiry hands units whose lease ran out back to the queue, or fails them after their last
  attempt: one statement per kind and round.
"""

from __future__ import annotations

import enum
import functools
import secrets
from collections.abc import Iterable, Iterator
from datetime import timedelta
from typing import Any

from pydantic import BaseModel
from sqlalchemy import (
    ARRAY,
    JSON,
    ColumnElement,
    Row,
    String,
    Update,
    any_,
    bindparam,
    func,
    literal_column,
    null,
    select,
    text,
    update,
)
from sqlalchemy.orm import Session

from service.config import Settings
from service.errors import Conflict
from service.store.db import is_postgres, next_seqs
from service.store.models import JsonParam, as_utc, constant, utcnow
from service.store.storable import storable_text
from service.trials.empty import QueueKey
from service.trials.kinds import Held, WorkKind
from service.trials.shares import ShareView
from service.workers import compat
from service.workers.registry import WorkerDirectory, WorkerInfo
from wire import contract as wire

QUEUED, RUNNING = "queued", "running"  # the states of every kind's units while waiting and leased
SECRET_BYTES = 24  # of a lease token's secret part (32 characters)
EXPIRE_BATCH = 200


class UnknownLease(Conflict):
    def __init__(self) -> None:
        super().__init__("unknown lease: it expired and was handed to another worker, or never existed",
                         field="token")


def token_route(token: str) -> tuple[str, int, str] | None:
    """(kind, worker id, route) of a lease token; None for a token of a release before
    contract 4 (a bare secret)."""
    parts = token.split(".")
    if len(parts) != 4 or not parts[1].isdigit():
        return None
    return parts[0], int(parts[1]), parts[2]


class LeaseQueue:
    """The kinds of leased work a replica serves, and the four operations over them."""

    def __init__(self, settings: Settings, workers: WorkerDirectory, shares: ShareView | None = None) -> None:
        self.settings = settings
        self.workers = workers
        self.shares = shares if shares is not None else ShareView()
        self.kinds: dict[str, WorkKind] = {}

    def register(self, kind: WorkKind) -> None:
        if kind.name in self.kinds:
            raise ValueError(f"work kind {kind.name!r} is registered already")
        self.kinds[kind.name] = kind

    def unregister(self, name: str) -> None:
        self.kinds.pop(name, None)

    def unknown_kinds(self, names: Iterable[str]) -> list[str]:
        return [name for name in names if name not in self.kinds]

    # -- lease -------------------------------------------------------------------------------

    def lease(self, session: Session, worker: WorkerInfo, contract: int) -> wire.Lease | None:
        """The worker's next unit of work, if one of its kinds has one queued for it."""
        queue = QueueKey.of(worker)
        for kind in self.kinds.values():
            if kind.name not in worker.kinds or (kind.hint is not None and kind.hint.skip(queue)):
                continue
            count_before = kind.hint.count if kind.hint is not None else 0
            row = self._lease_row(session, kind, worker)
            if row is not None:
                return self._reply(kind, row, kind.leased(session, row), contract)
            if kind.hint is not None:
                kind.hint.found_none(queue, count_before)
        return None

    def _lease_row(self, session: Session, kind: WorkKind, worker: WorkerInfo) -> Row[Any] | None:
        now = utcnow()
        postgres = is_postgres(session)
        params = {
            "w_pool": worker.pool, "w_backends": list(worker.backends), "v_now": now,
            "v_lease_expires_at": now + timedelta(seconds=self.settings.lease_s), "v_worker_id": worker.id,
            "v_prefix": f"{kind.name}.{worker.id}.", "v_secret": "." + secrets.token_urlsafe(SECRET_BYTES),
            **_seq_params(session, kind, 1),
        }
        if not kind.shared:
            return session.execute(_lease_statement(kind, postgres, worker.energy, worker.gpu), params).one_or_none()
        plan = self.shares.plan(worker)
        for study_id in plan.order:
            if not self.shares.claim(worker.pool, study_id):
                continue
            statement = _lease_statement(kind, postgres, worker.energy, worker.gpu, By.STUDY)
            row = session.execute(statement, {**params, "w_study": study_id}).one_or_none()
            if row is not None:
                return row
            self.shares.unclaim(worker.pool, study_id)
        by = By.POOL_BUT if plan.held else By.POOL
        row = session.execute(_lease_statement(kind, postgres, worker.energy, worker.gpu, by),
                              {**params, "w_held": plan.held}).one_or_none()
        if row is not None:
            self.shares.leased(worker.pool, row.study_id)
        return row

    def _reply(self, kind: WorkKind, row: Row[Any], work: BaseModel, contract: int) -> wire.Lease:
        return wire.Lease(
            token=row.lease_token,
            expires_at=as_utc(row.lease_expires_at),  # SQLite returns it without its zone
            lease_s=self.settings.lease_s,
            heartbeat_s=self.settings.heartbeat_s,
            **compat.lease_fields(contract, kind.name, work),
        )

    # -- a live lease's heartbeat and report ----------------------------------------------------

    def held(self, session: Session, token: str, token_id: int, kind: str | None = None) -> Held:
        """The live or reported lease of `token`, if its worker runs under API token
        `token_id` (several agents may share one worker token); `kind`: it must be of that kind."""
        named = token_route(token)
        if named is None:  # a lease of a release before contract 4: look for it
            found = self._find(session, token)
            if found is None:
                raise UnknownLease
            named = found
        name, worker_id, route = named
        known = self.kinds.get(name)
        worker = self.workers.get(session, worker_id)
        if known is None or worker is None or worker.token_id != token_id or (kind and name != kind):
            raise UnknownLease
        return Held(token, known, worker, route)

    def _find(self, session: Session, token: str) -> tuple[str, int, str] | None:
        for kind in self.kinds.values():
            c = kind.table.c
            worker_id = session.execute(select(c.worker_id).where(c.lease_token == token)).scalar_one_or_none()
            if worker_id is not None:
                return kind.name, worker_id, ""
        return None

    def heartbeat(self, session: Session, lease: Held, beat: wire.HeartbeatRequest) -> wire.HeartbeatResponse:
        expires = utcnow() + timedelta(seconds=self.settings.lease_s)
        cancel = session.execute(_heartbeat_statement(lease.kind), {
            "w_token": lease.token, "w_now": utcnow(), "v_expires": expires,
            "v_phase": storable_text(beat.phase[:32]) if beat.phase else None,
        }).scalar_one_or_none()
        if cancel is None:
            raise Conflict(f"the lease has expired; drop this {lease.kind.noun}", field="token")
        if beat.progress is not None:
            lease.kind.progressed(session, lease, beat.progress)
        return wire.HeartbeatResponse(expires_at=expires, cancel=bool(cancel))

    def record(self, session: Session, lease: Held, report: wire.WorkReport) -> wire.WorkAck:
        """Store a report on its unit's row: one statement while the lease is live.
        Idempotent per lease token."""
        kind = lease.kind
        outcome = kind.outcome(session, lease, report)
        fields = {"phase": None, **outcome.fields}
        if outcome.state in kind.machine.final:
            fields["finished_at"] = utcnow()
        statement = _record_statement(kind, is_postgres(session), outcome.state, tuple(sorted(fields)))
        params = {"w_token": lease.token, "w_now": utcnow(), **_seq_params(session, kind, 1),
                  **{f"v_{name}": value for name, value in fields.items()}}
        row = session.execute(statement, params).one_or_none()
        if row is not None:
            return kind.recorded(session, row, outcome.state)
        c = kind.table.c
        found = session.execute(select(c.state, *kind.ack_columns()).where(c.lease_token == lease.token)).one_or_none()
        if found is None:  # an expired lease's unit went back to the queue
            raise UnknownLease
        ack = kind.duplicate(found, found.state)
        if ack is None:
            raise Conflict(f"the lease has expired; the {kind.noun} goes back to the queue", field="token")
        return ack

    # -- expiry ------------------------------------------------------------------------------

    def expire(self, session: Session, limit: int = EXPIRE_BATCH) -> None:
        """Hand expired leases of every kind back to the queue, or fail their units once
        their attempts are used up (the kinds register what that wakes)."""
        for kind in self.kinds.values():
            self._expire(session, kind, limit)

    def _expire(self, session: Session, kind: WorkKind, limit: int) -> None:
        c = kind.table.c
        stmt = (select(c.id, c.attempt, c.max_attempts, c.pool, *kind.expiry_columns())
                .where(c.state == constant(RUNNING), c.lease_expires_at < utcnow())
                .order_by(c.lease_expires_at).limit(limit))
        if is_postgres(session):
            stmt = stmt.with_for_update(skip_locked=True, of=kind.table)
        rows = session.execute(stmt).all()
        if not rows:
            return
        outcomes = kind.expire_to(session, rows)
        for outcome in outcomes:
            kind.machine.check(RUNNING, outcome.state)
        names = tuple(sorted(outcomes[0].fields))
        now = utcnow()
        seqs = _seq_rows(session, kind, len(rows))
        session.execute(_expiry_statement(kind, is_postgres(session), names), [
            {"b_id": row.id, "b_attempt": row.attempt, "b_now": now, "b_state": outcome.state,
             "b_finished_at": now if outcome.state in kind.machine.final else None,
             **seq, **{f"b_{name}": outcome.fields[name] for name in names}}
            for row, outcome, seq in zip(rows, outcomes, seqs, strict=True)])
        kind.expired(session, rows, outcomes)


# -- statements: built once per kind and shape, then run with parameters ------------------------


def _seq_params(session: Session, kind: WorkKind, count: int) -> dict[str, int]:
    """SQLite's change sequence value for a sequenced kind's statement (Postgres draws it in SQL)."""
    if not kind.sequenced or is_postgres(session):
        return {}
    return {"v_seq": next_seqs(session, count)[0]}


def _seq_rows(session: Session, kind: WorkKind, count: int) -> Iterator[dict[str, int]]:
    if not kind.sequenced or is_postgres(session):
        return iter([{}] * count)
    return iter({"b_seq": seq} for seq in next_seqs(session, count))


def _seq(kind: WorkKind, postgres: bool, param: str) -> dict[str, Any]:
    if not kind.sequenced:
        return {}
    return {"seq": text("nextval('trial_seq')") if postgres else bindparam(param, type_=kind.table.c.seq.type)}


def _param(kind: WorkKind, name: str, column: str) -> Any:
    column_type = kind.table.c[column].type
    return bindparam(name, type_=JsonParam if isinstance(column_type, JSON) else column_type)


class By(enum.Enum):
    """Which queued unit a lease statement takes: the pool's oldest; the pool's oldest but of
    the studies `w_held`; study `w_study`'s first (by its queue's index)."""

    POOL = "pool"
    POOL_BUT = "pool but"
    STUDY = "study"


@functools.cache
def _lease_statement(kind: WorkKind, postgres: bool, energy: bool, gpu: bool, by: By = By.POOL) -> Update:
    c = kind.table.c
    # the state and the limit in the text: whatever plan a prepared statement settles on
    # reads the queue's index of queued units alone (models.queued_only), not a study's
    # every trial up to its first queued one
    candidate = (
        select(c.id)
        .where(c.pool == bindparam("w_pool"), c.state == constant(QUEUED), _one_of(c.backend, "w_backends", postgres))
        .limit(literal_column("1"))
    )
    if by == By.STUDY:
        candidate = candidate.where(c.study_id == bindparam("w_study")).order_by(c.number)
    else:
        candidate = candidate.order_by(c.id)
    if by == By.POOL_BUT:
        candidate = candidate.where(~_one_of(c.study_id, "w_held", postgres))
    if not energy:
        candidate = candidate.where(c.requires_energy.is_(False))
    if not gpu:
        candidate = candidate.where(c.requires_gpu.is_(False))
    if postgres:
        candidate = candidate.with_for_update(skip_locked=True)
    kind.machine.check(QUEUED, RUNNING)
    token = bindparam("v_prefix", type_=String) + kind.route() + bindparam("v_secret", type_=String)
    return (
        update(kind.table)
        .where(c.id == candidate.scalar_subquery(), c.state == QUEUED)
        .values(state=RUNNING, attempt=c.attempt + 1, lease_token=token,
                lease_expires_at=_param(kind, "v_lease_expires_at", "lease_expires_at"),
                worker_id=bindparam("v_worker_id"), phase="leased", **kind.lease_values(),
                **_seq(kind, postgres, "v_seq"))
        .returning(c.lease_token, c.lease_expires_at, *kind.lease_columns())
    )


def _one_of(column: ColumnElement[Any], name: str, postgres: bool) -> ColumnElement[bool]:
    """`column` is one of the list parameter `name`: on Postgres one array parameter, so the
    statement's text is the same whatever the list (an expanding IN is rendered anew on every
    execution)."""
    if postgres:
        return column == any_(bindparam(name, type_=ARRAY(column.type)))
    return column.in_(bindparam(name, expanding=True))


def _live(kind: WorkKind) -> ColumnElement[bool]:
    c = kind.table.c
    return (c.lease_token == bindparam("w_token")) & (c.state == RUNNING) & (
        c.lease_expires_at >= bindparam("w_now", type_=c.lease_expires_at.type))


@functools.cache
def _heartbeat_statement(kind: WorkKind) -> Update:
    c = kind.table.c
    return (update(kind.table).where(_live(kind))
            .values(lease_expires_at=bindparam("v_expires", type_=c.lease_expires_at.type),
                    phase=func.coalesce(bindparam("v_phase", type_=c.phase.type), c.phase))
            .returning(kind.cancel()))


@functools.lru_cache(maxsize=256)
def _record_statement(kind: WorkKind, postgres: bool, state: str, columns: tuple[str, ...]) -> Update:
    """The statement of a report that moves a unit to `state` and sets `columns` (each kind
    of report sets its own)."""
    kind.machine.check(RUNNING, state)
    values = {name: _param(kind, f"v_{name}", name) for name in columns}
    return (update(kind.table).where(_live(kind))
            .values(state=state, **values, **_seq(kind, postgres, "v_seq"))
            .returning(*kind.ack_columns()))


@functools.lru_cache(maxsize=64)
def _expiry_statement(kind: WorkKind, postgres: bool, names: tuple[str, ...]) -> Update:
    """Expired leases cleared and their units moved (one row per parameter set), unless the
    unit was reported or leased again meanwhile; a field whose parameter is None keeps its
    value."""
    c = kind.table.c
    kept = {name: func.coalesce(_param(kind, f"b_{name}", name), c[name]) for name in (*names, "finished_at")}
    expired = c.lease_expires_at < bindparam("b_now", type_=c.lease_expires_at.type)
    return (update(kind.table).where(c.id == bindparam("b_id"), c.state == RUNNING, c.attempt == bindparam("b_attempt"),
                                     expired)
            .values(state=bindparam("b_state"), lease_token=null(), lease_expires_at=null(), worker_id=null(),
                    phase=null(), **kept, **_seq(kind, postgres, "b_seq")))

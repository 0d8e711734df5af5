"""The lease queue: every kind of leased work (trials, validation jobs, and whatever comes
next) is leased, heartbeated, reported and expired here, through one code path over a
`WorkKind`.

A kind's units are the rows of a table of its own with the lease columns
(store.models.LeaseColumns, queue_indexes); each waits `queued`, is `running` while leased
and ends in a state of its kind. Every state this module writes is one statement:

- A lease pops the oldest queued unit of the worker's pool that the worker can run: one
  UPDATE ... RETURNING (`FOR UPDATE SKIP LOCKED` on Postgres, so concurrent workers never
  take the same row). A worker is offered the kinds it registered, in the order they were
  registered here (validation jobs first: a person waits for them).
- A lease token names its kind, its worker and the kind's route (a trial's study and stage)
  before its secret part, so a heartbeat or a report knows what it is for without reading
  the database: each is one UPDATE ... RETURNING of the live lease's row. Only a report
  that finds none (a duplicate, an expired lease, an unknown token) reads the row to say
  which. Reports are idempotent per token.
- Expiry hands units whose lease ran out back to the queue, or fails them after their last
  attempt: one statement per kind and round.
"""

from __future__ import annotations

import functools
import secrets
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar, Protocol

from pydantic import BaseModel
from sqlalchemy import (
    JSON,
    ColumnElement,
    Row,
    String,
    Table,
    Update,
    bindparam,
    false,
    func,
    literal,
    null,
    select,
    text,
    update,
)
from sqlalchemy.orm import Session

from service.config import Settings
from service.errors import Conflict
from service.store.db import is_postgres, next_seqs
from service.store.models import JsonParam, as_utc, utcnow
from service.store.storable import storable_text
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


@dataclass(frozen=True)
class Outcome:
    """The state a unit moves to and the fields written with it."""

    state: str
    fields: dict[str, Any]


@dataclass(frozen=True)
class Held:
    """A live lease as a report or a heartbeat names it: its kind, its worker (checked to run
    under the caller's token) and the kind's route from the token."""

    token: str
    kind: WorkKind
    worker: WorkerInfo
    route: str


class WorkKind(Protocol):
    """A kind of leased work. Kinds subclass this for its defaults."""

    name: ClassVar[str]  # on the wire (Lease.kind, RegisterRequest.kinds), first in its tokens
    noun: ClassVar[str]  # what people call a unit: "trial", "validation job"
    table: ClassVar[Table]  # its units: LeaseColumns, queue_indexes, `id`, `state`, `finished_at`
    report: ClassVar[type[wire.WorkReport]]  # what its workers post to /v1/leases/{token}/result
    finished: ClassVar[frozenset[str]]  # its states a report or an expiry ends in
    sequenced: ClassVar[bool] = False  # its rows carry the change sequence (`seq`) event streams follow
    hint: ClassVar[QueuedHint | None] = None  # rare work: see QueuedHint

    def __hash__(self) -> int:  # a kind is itself: its statements are built once (functools.cache)
        return id(self)

    def route(self) -> ColumnElement[str]:
        """SQL of the facts of a leased row that its reports need before they touch the
        database (no '.'); they go in the lease token."""
        return literal("", String)

    def lease_values(self) -> dict[str, Any]:
        """Columns a lease sets beyond the lease's own (SQL; the bound `v_now` is the time)."""
        return {}

    def lease_columns(self) -> Sequence[ColumnElement[Any]]:
        """What a lease reads back of the row for `leased`."""
        return (self.table.c.id,)

    def leased(self, session: Session, row: Row[Any]) -> BaseModel:
        """The work a lease of `row` hands its worker (and what else leasing it changes)."""
        ...

    def cancel(self) -> ColumnElement[bool]:
        """SQL: whether a heartbeat tells the worker to stop (and report nothing)."""
        return false()

    def outcome(self, session: Session, lease: Held, report: Any) -> Outcome:
        """What `report` (of the kind's report model) writes on its unit: raises Invalid when
        it cannot be accepted."""
        ...

    def ack_columns(self) -> Sequence[ColumnElement[Any]]:
        """What a report reads back of the row for `recorded` and `ack`."""
        return (self.table.c.id,)

    def recorded(self, session: Session, row: Row[Any], state: str) -> wire.WorkAck:
        """The acknowledgement of a report just written (and what follows it, after the commit)."""
        ...

    def duplicate(self, row: Row[Any], state: str) -> wire.WorkAck | None:
        """The acknowledgement of a report already recorded for this token, if the row in
        `state` says so; None: the lease expired instead."""
        return self.ack(row, state, duplicate=True) if state in self.finished else None

    def ack(self, row: Row[Any], state: str, *, duplicate: bool) -> wire.WorkAck:
        ...

    def expiry_columns(self) -> Sequence[ColumnElement[Any]]:
        """What expiry reads of the rows whose lease expired, for `expire_to` and `expired`."""
        return ()

    def expire_to(self, session: Session, rows: Sequence[Row[Any]]) -> list[Outcome]:
        """Where each unit whose lease expired goes: FAILED after its last attempt (the fields
        say why), else back to the queue. Every outcome names the same fields."""
        ...

    def expired(self, session: Session, rows: Sequence[Row[Any]], outcomes: Sequence[Outcome]) -> None:
        """What follows an expiry round's writes (wake-ups after the commit)."""


@dataclass(frozen=True)
class QueueKey:
    """What a worker can lease: its pool's units of its kinds and backends (with energy
    measurement or without, on a GPU or compile-only)."""

    pool: str
    backends: tuple[str, ...]
    energy: bool
    gpu: bool = True
    kinds: tuple[str, ...] = wire.DEFAULT_KINDS

    @classmethod
    def of(cls, worker: WorkerInfo) -> QueueKey:
        return cls(worker.pool, worker.backends, worker.energy, worker.gpu, worker.kinds)


class EmptyQueues:
    """Queues this replica found empty for workers of one kind (QueueKey). A trial queued
    later wakes as many waiting long-polls of its pool as trials were queued
    (Notifier.notify_some); a long-poll whose timer runs out looks at the database again
    only when that may have missed one: a pool notification found fewer waiters than it
    announced trials (locally or through Redis) after the empty look, or that look is older
    than `period_s` (other replicas without Redis). So hundreds of idle workers of a kind
    cost one query per period, not one each, and the scheduling steps that refill the
    queue are not crowded out."""

    def __init__(self, period_s: float) -> None:
        self.period_s = period_s
        self._empty: dict[QueueKey, tuple[int, float]] = {}  # -> (unanswered wake-ups then, when)

    def known_empty(self, queue: QueueKey, unanswered: int) -> bool:
        seen = self._empty.get(queue)
        return seen is not None and seen[0] == unanswered and time.monotonic() - seen[1] < self.period_s

    def found_empty(self, queue: QueueKey, unanswered_before: int) -> None:
        """Nothing for `queue` in a look that began when `unanswered_before` wake-ups had
        gone unanswered."""
        self._empty[queue] = (unanswered_before, time.monotonic())


class QueuedHint:
    """Kinds of worker for which this process recently found no queued unit of a rare kind
    of work (validation jobs beside trials).

    A lease skips looking for one for `period_s` after a look found none for its kind of
    worker, unless one was queued since: by this process, at once (`queued` runs after the
    commit that queued it and counts it, and a look is trusted only if nothing was counted
    since it began); by another replica, within the period. The same bookkeeping as the
    long-polls' `EmptyQueues`, with queued units in place of unanswered wake-ups."""

    def __init__(self, period_s: float = 1.0) -> None:
        self._empty = EmptyQueues(period_s)
        self.count = 0  # units this process has queued

    def skip(self, queue: QueueKey) -> bool:
        return self._empty.known_empty(queue, self.count)

    def found_none(self, queue: QueueKey, count_before: int) -> None:
        """None for `queue` in a look that began when `count_before` units had been queued."""
        self._empty.found_empty(queue, count_before)

    def queued(self) -> None:
        self.count += 1


def token_route(token: str) -> tuple[str, int, str] | None:
    """(kind, worker id, route) of a lease token; None for a token of a release before
    contract 4 (a bare secret)."""
    parts = token.split(".")
    if len(parts) != 4 or not parts[1].isdigit():
        return None
    return parts[0], int(parts[1]), parts[2]


class LeaseQueue:
    """The kinds of leased work a replica serves, and the four operations over them."""

    def __init__(self, settings: Settings, workers: WorkerDirectory) -> None:
        self.settings = settings
        self.workers = workers
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
        return session.execute(_lease_statement(kind, postgres, worker.energy, worker.gpu), params).one_or_none()

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

    def heartbeat(self, session: Session, lease: Held, phase: str | None) -> wire.HeartbeatResponse:
        expires = utcnow() + timedelta(seconds=self.settings.lease_s)
        cancel = session.execute(_heartbeat_statement(lease.kind), {
            "w_token": lease.token, "w_now": utcnow(), "v_expires": expires,
            "v_phase": storable_text(phase[:32]) if phase else None,
        }).scalar_one_or_none()
        if cancel is None:
            raise Conflict(f"the lease has expired; drop this {lease.kind.noun}", field="token")
        return wire.HeartbeatResponse(expires_at=expires, cancel=bool(cancel))

    def record(self, session: Session, lease: Held, report: wire.WorkReport) -> wire.WorkAck:
        """Store a report on its unit's row: one statement while the lease is live.
        Idempotent per lease token."""
        kind = lease.kind
        outcome = kind.outcome(session, lease, report)
        fields = {"phase": None, **outcome.fields}
        if outcome.state in kind.finished:
            fields["finished_at"] = utcnow()
        statement = _record_statement(kind, is_postgres(session), outcome.state, tuple(sorted(fields)))
        params = {"w_token": lease.token, "w_now": utcnow(), **_seq_params(session, kind, 1),
                  **{f"v_{name}": value for name, value in fields.items()}}
        row = session.execute(statement, params).one_or_none()
        if row is not None:
            return kind.recorded(session, row, outcome.state)
        c = kind.table.c
        found = session.execute(select(c.state, *kind.ack_columns()).where(c.lease_token == lease.token)).one_or_none()
        ack = kind.duplicate(found, found.state) if found is not None else None
        if ack is None:
            raise Conflict(f"the lease has expired; the {kind.noun} was handed back to the queue", field="token")
        return ack

    # -- expiry ------------------------------------------------------------------------------

    def expire(self, session: Session, limit: int = EXPIRE_BATCH) -> set[str]:
        """Hand expired leases of every kind back to the queue, or fail their units once
        their attempts are used up. Returns the pools that got work back."""
        pools: set[str] = set()
        for kind in self.kinds.values():
            pools |= self._expire(session, kind, limit)
        return pools

    def _expire(self, session: Session, kind: WorkKind, limit: int) -> set[str]:
        c = kind.table.c
        stmt = (select(c.id, c.attempt, c.max_attempts, c.pool, *kind.expiry_columns())
                .where(c.state == RUNNING, c.lease_expires_at < utcnow())
                .order_by(c.lease_expires_at).limit(limit))
        if is_postgres(session):
            stmt = stmt.with_for_update(skip_locked=True, of=kind.table)
        rows = session.execute(stmt).all()
        if not rows:
            return set()
        outcomes = kind.expire_to(session, rows)
        names = tuple(sorted(outcomes[0].fields))
        now = utcnow()
        seqs = _seq_rows(session, kind, len(rows))
        session.execute(_expiry_statement(kind, is_postgres(session), names), [
            {"b_id": row.id, "b_attempt": row.attempt, "b_now": now, "b_state": outcome.state,
             "b_finished_at": now if outcome.state in kind.finished else None,
             **seq, **{f"b_{name}": outcome.fields[name] for name in names}}
            for row, outcome, seq in zip(rows, outcomes, seqs, strict=True)])
        kind.expired(session, rows, outcomes)
        return {row.pool for row, outcome in zip(rows, outcomes, strict=True) if outcome.state == QUEUED}


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


@functools.cache
def _lease_statement(kind: WorkKind, postgres: bool, energy: bool, gpu: bool) -> Update:
    c = kind.table.c
    candidate = (
        select(c.id)
        .where(c.pool == bindparam("w_pool"), c.state == QUEUED, c.backend.in_(bindparam("w_backends", expanding=True)))
        .order_by(c.id)
        .limit(1)
    )
    if not energy:
        candidate = candidate.where(c.requires_energy.is_(False))
    if not gpu:
        candidate = candidate.where(c.requires_gpu.is_(False))
    if postgres:
        candidate = candidate.with_for_update(skip_locked=True)
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

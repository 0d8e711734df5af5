"""What a kind of leased work tells the lease queue (service.trials.leases): its table, its
lease's payload, its report and how a report and an expiry change its units."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from pydantic import BaseModel
from sqlalchemy import ColumnElement, Row, String, Table, false, literal
from sqlalchemy.orm import Session

from service.domain.machines import StateMachine
from service.trials.empty import QueuedHint
from service.workers.registry import WorkerInfo
from wire import contract as wire


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
    # its states and moves: queued -> running (a lease), running -> a report's or an expiry's
    # state; the final states stamp `finished_at`
    machine: ClassVar[StateMachine[Any]]
    sequenced: ClassVar[bool] = False  # its rows carry the change sequence (`seq`) event streams follow
    hint: ClassVar[QueuedHint | None] = None  # rare work: see QueuedHint
    # its units belong to studies (a `study_id` column) and lease by fair share between them
    # (service.trials.shares), not first in, first out
    shared: ClassVar[bool] = False

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

    def progressed(self, session: Session, lease: Held, progress: wire.RoundProgress) -> None:
        """Record a heartbeat's progress of a live lease's unit (a kind without rounds has
        none to keep); raises Invalid when it cannot be its unit's."""
        return None

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
        return self.ack(row, state, duplicate=True) if state in self.machine.final else None

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
        """What follows an expiry round's writes (wake-ups registered with the transaction's
        effects, service.store.effects)."""

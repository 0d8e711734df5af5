"""The audit log: every action on candidates, validations and artifacts, with who, when and why."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.accounts.tokens import Principal
from service.store.models import AuditEntry, utcnow
from service.store.storable import storable, storable_text

SERVICE_ACTOR = "service"
ACTIONS = ("promote", "validated", "validation_failed", "approve", "reject", "supersede", "rollback", "revoke",
           "stale", "revalidate")
SUBJECTS = ("candidate", "validation", "artifact")


@dataclass(frozen=True)
class Actor:
    name: str
    token_id: int | None

    @classmethod
    def of(cls, principal: Principal | None) -> Actor:
        return cls(SERVICE_ACTOR, None) if principal is None else cls(principal.name, principal.token_id)


def record(session: Session, team_id: int, actor: Actor, action: str, subject_type: str, subject_id: int,
           why: str = "", **details: Any) -> AuditEntry:
    assert action in ACTIONS and subject_type in SUBJECTS, (action, subject_type)
    entry = AuditEntry(team_id=team_id, at=utcnow(), actor=actor.name, actor_token_id=actor.token_id,
                       action=action, subject_type=subject_type, subject_id=subject_id,
                       why=storable_text(why), details=storable(details))
    session.add(entry)
    return entry


@dataclass(frozen=True)
class AuditFilter:
    action: str | None = None
    subject_type: str | None = None
    subject_id: int | None = None
    actor: str | None = None
    since: datetime | None = None
    limit: int = 200


def entries(session: Session, team_id: int, where: AuditFilter) -> list[AuditEntry]:
    """The team's entries matching `where`, newest first."""
    stmt = select(AuditEntry).where(AuditEntry.team_id == team_id)
    if where.action:
        stmt = stmt.where(AuditEntry.action == where.action)
    if where.subject_type:
        stmt = stmt.where(AuditEntry.subject_type == where.subject_type)
    if where.subject_id is not None:
        stmt = stmt.where(AuditEntry.subject_id == where.subject_id)
    if where.actor:
        stmt = stmt.where(AuditEntry.actor == where.actor)
    if where.since is not None:
        stmt = stmt.where(AuditEntry.at >= where.since)
    return list(session.execute(stmt.order_by(AuditEntry.id.desc()).limit(where.limit)).scalars())

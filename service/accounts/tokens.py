"""Teams and bearer tokens. Tokens are stored as SHA-256 hashes; the secret is shown once."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.errors import Forbidden, Invalid, Unauthorized
from service.store.models import ApiToken, Team

ROLES = ("viewer", "member", "approver", "admin")
ROLE_RANK = {role: rank for rank, role in enumerate(ROLES)}
DEFAULT_TEAM = "default"


@dataclass(frozen=True)
class Principal:
    token_id: int
    name: str
    kind: str  # user | worker
    role: str
    team_id: int | None
    superuser: bool
    pool: str | None

    def require(self, role: str) -> None:
        if self.kind != "user":
            raise Forbidden("worker tokens can only lease and report trials; use a user token")
        if ROLE_RANK[self.role] < ROLE_RANK[role]:
            raise Forbidden(f"this needs the {role} role; your token has {self.role}")

    def require_worker(self) -> None:
        if self.kind != "worker":
            raise Forbidden("this endpoint is for worker tokens; create one with `paretune token create --worker`")


def hash_token(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def authenticate(session: Session, header: str | None) -> Principal:
    if not header or not header.lower().startswith("bearer "):
        raise Unauthorized("send `Authorization: Bearer <token>`; `paretune token create` makes one")
    secret = header[7:].strip()
    row = session.execute(select(ApiToken).where(ApiToken.token_hash == hash_token(secret))).scalar_one_or_none()
    if row is None or row.revoked_at is not None:
        raise Unauthorized("the token is unknown or revoked")
    return Principal(row.id, row.name, row.kind, row.role, row.team_id, row.superuser, row.pool)


def get_or_create_team(session: Session, name: str) -> Team:
    team = session.execute(select(Team).where(Team.name == name)).scalar_one_or_none()
    if team is None:
        team = Team(name=name)
        session.add(team)
        session.flush()
    return team


def create_token(session: Session, *, name: str, kind: str, role: str, team_id: int | None,
                 superuser: bool = False, pool: str | None = None) -> tuple[ApiToken, str]:
    if kind == "user" and role not in ROLES:
        raise Invalid(f"unknown role {role!r}; use one of {', '.join(ROLES)}", field="role")
    prefix = "ptw_" if kind == "worker" else "ptu_"
    secret = prefix + secrets.token_urlsafe(32)
    row = ApiToken(
        token_hash=hash_token(secret), prefix=secret[:10], name=name, kind=kind,
        role="worker" if kind == "worker" else role, team_id=team_id, superuser=superuser, pool=pool,
    )
    session.add(row)
    session.flush()
    return row, secret


def bootstrap_admin(session: Session, name: str = "admin") -> str:
    """A superuser admin token in the default team (used by `paretune up` and `token create`)."""
    team = get_or_create_team(session, DEFAULT_TEAM)
    _, secret = create_token(session, name=name, kind="user", role="admin", team_id=team.id, superuser=True)
    return secret

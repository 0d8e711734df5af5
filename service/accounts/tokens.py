"""Teams and bearer tokens. Tokens are stored as SHA-256 hashes; the secret is shown once.

A token may expire (`expires_at`) and may be rotated: a new secret with the same name, role,
team and pool, the old one revoked at once or at the end of a grace period (its
`revoked_at` then lies in the future)."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.errors import Conflict, Forbidden, Invalid, Unauthorized
from service.store.models import ApiToken, Team, as_utc, utcnow

ROLES = ("viewer", "member", "approver", "admin")
ROLE_RANK = {role: rank for rank, role in enumerate(ROLES)}
DEFAULT_TEAM = "default"
PREFIX_CHARS = 10  # stored and shown: enough to tell tokens apart, nothing to guess with
MAX_LIFETIME_S = 10 * 365 * 86_400
MAX_GRACE_S = 7 * 86_400


@dataclass(frozen=True)
class Principal:
    token_id: int
    name: str
    kind: str  # user | worker
    role: str
    team_id: int | None
    superuser: bool
    pool: str | None
    valid_until: datetime | None = None  # its expiry, or the end of a rotation's grace period

    def require(self, role: str) -> None:
        if self.kind != "user":
            raise Forbidden("worker tokens can only lease and report trials; use a user token")
        if ROLE_RANK[self.role] < ROLE_RANK[role]:
            raise Forbidden(f"this needs the {role} role; your token has {self.role}")

    def require_worker(self) -> None:
        if self.kind != "worker":
            raise Forbidden("this endpoint is for worker tokens; create one with `paretune token create --worker`")

    def is_valid(self, now: datetime) -> bool:
        return self.valid_until is None or now < self.valid_until


class AuthenticationFailed(Unauthorized):
    """A 401 whose `reason` (missing, malformed, unknown, revoked, rotated, expired) is logged
    and sent; the secret itself never is."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message, field="authorization", reason=reason)
        self.reason = reason


def hash_token(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def bearer_secret(header: str | None) -> str:
    if not header:
        raise AuthenticationFailed("missing", "send `Authorization: Bearer <token>`; `paretune token create` makes one")
    if not header.lower().startswith("bearer ") or not header[7:].strip():
        raise AuthenticationFailed("malformed", "the Authorization header must be `Bearer <token>`")
    return header[7:].strip()


def authenticate(session: Session, header: str | None) -> Principal:
    secret = bearer_secret(header)
    row = session.execute(select(ApiToken).where(ApiToken.token_hash == hash_token(secret))).scalar_one_or_none()
    if row is None:
        raise AuthenticationFailed("unknown", "the token is unknown; `paretune token create` makes one")
    now = utcnow()
    revoked_at = as_utc(row.revoked_at) if row.revoked_at else None
    expires_at = as_utc(row.expires_at) if row.expires_at else None
    if revoked_at is not None and revoked_at <= now:
        if row.replaced_by is not None:
            raise AuthenticationFailed("rotated", "the token was rotated; use the new secret it was rotated into")
        raise AuthenticationFailed("revoked", "the token was revoked; ask a team admin for a new one")
    if expires_at is not None and expires_at <= now:
        raise AuthenticationFailed(
            "expired", f"the token expired at {expires_at.isoformat(timespec='seconds')}; "
                       "ask a team admin for a new one, or rotate tokens before they expire")
    ends = [t for t in (revoked_at, expires_at) if t is not None]
    return Principal(row.id, row.name, row.kind, row.role, row.team_id, row.superuser, row.pool,
                     valid_until=min(ends) if ends else None)


def is_live(row: ApiToken, now: datetime) -> bool:
    """Not revoked yet (a rotated token in its grace period still is live)."""
    return row.revoked_at is None or as_utc(row.revoked_at) > now


def get_or_create_team(session: Session, name: str) -> Team:
    team = session.execute(select(Team).where(Team.name == name)).scalar_one_or_none()
    if team is None:
        team = Team(name=name)
        session.add(team)
        session.flush()
    return team


def create_token(session: Session, *, name: str, kind: str, role: str, team_id: int | None,
                 superuser: bool = False, pool: str | None = None,
                 expires_in: float | None = None) -> tuple[ApiToken, str]:
    if kind == "user" and role not in ROLES:
        raise Invalid(f"unknown role {role!r}; use one of {', '.join(ROLES)}", field="role")
    if expires_in is not None and not 0 < expires_in <= MAX_LIFETIME_S:
        raise Invalid(f"expires_in must be between 1 and {MAX_LIFETIME_S} seconds", field="expires_in")
    prefix = "ptw_" if kind == "worker" else "ptu_"
    secret = prefix + secrets.token_urlsafe(32)
    now = utcnow()
    row = ApiToken(
        token_hash=hash_token(secret), prefix=secret[:PREFIX_CHARS], name=name, kind=kind,
        role="worker" if kind == "worker" else role, team_id=team_id, superuser=superuser, pool=pool,
        created_at=now, expires_at=now + timedelta(seconds=expires_in) if expires_in is not None else None,
    )
    session.add(row)
    session.flush()
    return row, secret


def rotate_token(session: Session, row: ApiToken, *, grace_s: float = 0,
                 expires_in: float | None = None) -> tuple[ApiToken, str]:
    """A new secret for the same name, role, team and pool; the old one stops working
    after `grace_s`. Without `expires_in` the new token lives as long as the old one did."""
    if row.replaced_by is not None:
        raise Conflict(f"token {row.id} was rotated already, into token {row.replaced_by}; rotate that one",
                       field="token_id")
    if not 0 <= grace_s <= MAX_GRACE_S:
        raise Invalid(f"grace_s must be between 0 and {MAX_GRACE_S} seconds", field="grace_s")
    if expires_in is None and row.expires_at is not None:
        expires_in = max(1.0, (as_utc(row.expires_at) - as_utc(row.created_at)).total_seconds())
    new, secret = create_token(session, name=row.name, kind=row.kind, role=row.role, team_id=row.team_id,
                               superuser=row.superuser, pool=row.pool, expires_in=expires_in)
    revoke_at = utcnow() + timedelta(seconds=grace_s)
    if row.revoked_at is None or as_utc(row.revoked_at) > revoke_at:
        row.revoked_at = revoke_at
    row.replaced_by = new.id
    return new, secret


def revoke_token(row: ApiToken) -> None:
    now = utcnow()
    if row.revoked_at is None or as_utc(row.revoked_at) > now:
        row.revoked_at = now


def bootstrap_admin(session: Session, name: str = "admin") -> str:
    """A superuser admin token in the default team (used by `paretune up` and `token create`)."""
    team = get_or_create_team(session, DEFAULT_TEAM)
    _, secret = create_token(session, name=name, kind="user", role="admin", team_id=team.id, superuser=True)
    return secret

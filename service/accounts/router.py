"""Teams and tokens: create, list, rotate, revoke (service.accounts.policy says who may)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body
from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from service.accounts import policy, tokens
from service.accounts.schemas import MeOut, RotateIn, TeamIn, TeamOut, TokenIn, TokenOut
from service.api.deps import PrincipalDep, ReadSession, StateDep, TokenId, WriteSession
from service.api.schemas import ERROR_RESPONSES
from service.errors import Conflict, Forbidden, NotFound
from service.store.db import after_commit
from service.store.models import ApiToken, Team, utcnow

router = APIRouter(prefix="/v1", tags=["accounts"], responses=ERROR_RESPONSES)


def _team_name(session: Session, team_id: int | None) -> str | None:
    team = session.get(Team, team_id) if team_id else None
    return team.name if team else None


def _token_out(session: Session, row: ApiToken, secret: str | None = None) -> TokenOut:
    return TokenOut(id=row.id, name=row.name, kind=row.kind, role=row.role, team=_team_name(session, row.team_id),
                    pool=row.pool, superuser=row.superuser, prefix=row.prefix, created_at=row.created_at,
                    expires_at=row.expires_at, revoked_at=row.revoked_at, replaced_by=row.replaced_by, token=secret)


def _facts(row: ApiToken) -> policy.TokenFacts:
    return policy.TokenFacts(row.id, row.kind, row.role, row.team_id, row.superuser)


def _live_token(session: Session, token_id: int) -> ApiToken | None:
    row = session.get(ApiToken, token_id)
    return row if row is not None and tokens.is_live(row, utcnow()) else None


@router.get("/me", response_model=MeOut)
def me(principal: PrincipalDep, session: ReadSession) -> MeOut:
    return MeOut(name=principal.name, kind=principal.kind, role=principal.role,
                 team=_team_name(session, principal.team_id), superuser=principal.superuser,
                 expires_at=principal.valid_until)


@router.post("/teams", status_code=201, response_model=TeamOut)
def create_team(body: TeamIn, principal: PrincipalDep, session: WriteSession) -> TeamOut:
    if not principal.superuser:
        raise Forbidden("only the operator's admin token can create teams")
    if session.execute(select(Team).where(Team.name == body.name)).scalar_one_or_none():
        raise Conflict(f"team {body.name!r} exists already", field="name")
    team = tokens.get_or_create_team(session, body.name)
    return TeamOut(id=team.id, name=team.name)


@router.get("/teams", response_model=list[TeamOut])
def list_teams(principal: PrincipalDep, session: ReadSession) -> list[TeamOut]:
    principal.require("viewer")
    stmt = select(Team).order_by(Team.name)
    if not principal.superuser:
        stmt = stmt.where(Team.id == principal.team_id)
    return [TeamOut(id=t.id, name=t.name) for t in session.execute(stmt).scalars()]


@router.post("/tokens", status_code=201, response_model=TokenOut)
def create_token(body: TokenIn, principal: PrincipalDep, session: WriteSession) -> TokenOut:
    """Team admins create user tokens in their own team, up to their own role; the operator
    (superuser) creates tokens in any team, worker tokens for pools and superuser tokens."""
    policy.check_create(principal, kind=body.kind, role=body.role, superuser=body.superuser)
    team_id = principal.team_id
    if body.team is not None:
        team = session.execute(select(Team).where(Team.name == body.team)).scalar_one_or_none()
        if team is None or (not principal.superuser and team.id != principal.team_id):
            raise NotFound(f"no team {body.team!r}; create it with POST /v1/teams", field="team")
        team_id = team.id
    if body.kind == "worker":
        row, secret = tokens.create_token(session, name=body.name, kind="worker", role="worker",
                                          team_id=None, pool=body.pool, expires_in=body.expires_in)
    else:
        row, secret = tokens.create_token(session, name=body.name, kind="user", role=body.role, team_id=team_id,
                                          superuser=body.superuser, expires_in=body.expires_in)
    return _token_out(session, row, secret)


@router.get("/tokens", response_model=list[TokenOut])
def list_tokens(principal: PrincipalDep, session: ReadSession) -> list[TokenOut]:
    """Tokens not revoked yet (expired ones included): the team's user tokens for a team
    admin, every token for the operator."""
    principal.require("admin")
    stmt = (select(ApiToken).where(or_(ApiToken.revoked_at.is_(None), ApiToken.revoked_at > utcnow()))
            .order_by(ApiToken.id))
    if not principal.superuser:
        stmt = stmt.where(ApiToken.team_id == principal.team_id, ApiToken.superuser.is_(False),
                          ApiToken.kind == "user")
    return [_token_out(session, row) for row in session.execute(stmt).scalars()]


@router.post("/tokens/{token_id}/rotate", status_code=201, response_model=TokenOut)
def rotate_token(token_id: TokenId, state: StateDep, principal: PrincipalDep, session: WriteSession,
                 body: Annotated[RotateIn | None, Body()] = None) -> TokenOut:
    """A new secret for the same name, role, team and pool; the old secret stops working at
    once, or after `grace_s`. Team admins rotate their team's tokens, the operator any, and
    any token may rotate itself."""
    principal.require("viewer")
    row = _live_token(session, token_id)
    policy.check_manage(principal, _facts(row) if row else None, token_id)
    assert row is not None
    body = body or RotateIn()
    new, secret = tokens.rotate_token(session, row, grace_s=body.grace_s, expires_in=body.expires_in)
    after_commit(session, lambda: state.principals.forget(token_id))
    return _token_out(session, new, secret)


@router.delete("/tokens/{token_id}", status_code=204)
def revoke_token(token_id: TokenId, state: StateDep, principal: PrincipalDep, session: WriteSession) -> None:
    """Revoke a token at once (team admins: their team's; the operator: any; anyone: its own)."""
    principal.require("viewer")
    row = _live_token(session, token_id)
    policy.check_manage(principal, _facts(row) if row else None, token_id)
    assert row is not None
    tokens.revoke_token(row)
    after_commit(session, lambda: state.principals.forget(token_id))

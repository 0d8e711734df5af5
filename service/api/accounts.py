"""Teams and tokens."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.accounts import tokens
from service.api.deps import PrincipalDep, ReadSession, StateDep, TokenId, WriteSession
from service.api.schemas import MeOut, TeamIn, TeamOut, TokenIn, TokenOut
from service.errors import Conflict, Forbidden, NotFound
from service.store.db import after_commit
from service.store.models import ApiToken, Team, utcnow

router = APIRouter(prefix="/v1", tags=["accounts"])


def _team_name(session: Session, team_id: int | None) -> str | None:
    team = session.get(Team, team_id) if team_id else None
    return team.name if team else None


def _token_out(session: Session, row: ApiToken, secret: str | None = None) -> TokenOut:
    return TokenOut(id=row.id, name=row.name, kind=row.kind, role=row.role, team=_team_name(session, row.team_id),
                    pool=row.pool, prefix=row.prefix, token=secret)


@router.get("/me", response_model=MeOut)
def me(principal: PrincipalDep, session: ReadSession) -> MeOut:
    return MeOut(name=principal.name, kind=principal.kind, role=principal.role,
                 team=_team_name(session, principal.team_id), superuser=principal.superuser)


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
    """Team admins create user tokens in their own team; the operator (superuser) creates
    tokens in any team and worker tokens for pools."""
    principal.require("admin")
    team_id = principal.team_id
    if body.team is not None:
        team = session.execute(select(Team).where(Team.name == body.team)).scalar_one_or_none()
        if team is None or (not principal.superuser and team.id != principal.team_id):
            raise NotFound(f"no team {body.team!r}; create it with POST /v1/teams", field="team")
        team_id = team.id
    if body.kind == "worker":
        if not principal.superuser:
            raise Forbidden("only the operator's admin token can create worker tokens")
        row, secret = tokens.create_token(session, name=body.name, kind="worker", role="worker",
                                          team_id=None, pool=body.pool)
    else:
        row, secret = tokens.create_token(session, name=body.name, kind="user", role=body.role, team_id=team_id)
    return _token_out(session, row, secret)


@router.get("/tokens", response_model=list[TokenOut])
def list_tokens(principal: PrincipalDep, session: ReadSession) -> list[TokenOut]:
    principal.require("admin")
    stmt = select(ApiToken).where(ApiToken.revoked_at.is_(None)).order_by(ApiToken.id)
    if not principal.superuser:
        stmt = stmt.where(ApiToken.team_id == principal.team_id, ApiToken.superuser.is_(False))
    return [_token_out(session, row) for row in session.execute(stmt).scalars()]


@router.delete("/tokens/{token_id}", status_code=204)
def revoke_token(token_id: TokenId, state: StateDep, principal: PrincipalDep, session: WriteSession) -> None:
    principal.require("admin")
    row = session.get(ApiToken, token_id)
    manageable = row is not None and (principal.superuser or (row.team_id == principal.team_id and not row.superuser))
    if row is None or not manageable:
        raise NotFound(f"no token {token_id} in your team", field="token_id")
    row.revoked_at = utcnow()
    after_commit(session, state.forget_principals)

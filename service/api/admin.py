"""Teams and tokens."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from service import auth
from service.api.schemas import MeOut, TeamIn, TeamOut, TokenIn, TokenOut
from service.app import PrincipalDep, StateDep, write_with_study
from service.errors import Conflict, Forbidden, NotFound
from service.store.models import ApiToken, Team, utcnow

router = APIRouter(prefix="/v1", tags=["admin"])


def _team_name(session: Session, team_id: int | None) -> str | None:
    team = session.get(Team, team_id) if team_id else None
    return team.name if team else None


def _token_out(session: Session, row: ApiToken, secret: str | None = None) -> TokenOut:
    return TokenOut(id=row.id, name=row.name, kind=row.kind, role=row.role, team=_team_name(session, row.team_id),
                    pool=row.pool, prefix=row.prefix, token=secret)


@router.get("/me", response_model=MeOut)
async def me(state: StateDep, principal: PrincipalDep) -> MeOut:
    def load() -> MeOut:
        with state.db.read() as session:
            return MeOut(name=principal.name, kind=principal.kind, role=principal.role,
                         team=_team_name(session, principal.team_id), superuser=principal.superuser)

    return await run_in_threadpool(load)


@router.post("/teams", status_code=201, response_model=TeamOut)
async def create_team(body: TeamIn, state: StateDep, principal: PrincipalDep) -> TeamOut:
    if not principal.superuser:
        raise Forbidden("only the operator's admin token can create teams")

    def create(session: Session) -> TeamOut:
        if session.execute(select(Team).where(Team.name == body.name)).scalar_one_or_none():
            raise Conflict(f"team {body.name!r} exists already", field="name")
        team = auth.get_or_create_team(session, body.name)
        return TeamOut(id=team.id, name=team.name)

    return await run_in_threadpool(write_with_study, state, create)  # type: ignore[no-any-return]


@router.get("/teams", response_model=list[TeamOut])
async def list_teams(state: StateDep, principal: PrincipalDep) -> list[TeamOut]:
    principal.require("viewer")

    def load() -> list[TeamOut]:
        with state.db.read() as session:
            stmt = select(Team).order_by(Team.name)
            if not principal.superuser:
                stmt = stmt.where(Team.id == principal.team_id)
            return [TeamOut(id=t.id, name=t.name) for t in session.execute(stmt).scalars()]

    return await run_in_threadpool(load)


@router.post("/tokens", status_code=201, response_model=TokenOut)
async def create_token(body: TokenIn, state: StateDep, principal: PrincipalDep) -> TokenOut:
    """Team admins create user tokens in their own team; the operator (superuser) creates
    tokens in any team and worker tokens for pools."""
    principal.require("admin")

    def create(session: Session) -> TokenOut:
        team_id = principal.team_id
        if body.team is not None:
            team = session.execute(select(Team).where(Team.name == body.team)).scalar_one_or_none()
            if team is None or (not principal.superuser and team.id != principal.team_id):
                raise NotFound(f"no team {body.team!r}; create it with POST /v1/teams", field="team")
            team_id = team.id
        if body.kind == "worker":
            if not principal.superuser:
                raise Forbidden("only the operator's admin token can create worker tokens")
            row, secret = auth.create_token(session, name=body.name, kind="worker", role="worker",
                                            team_id=None, pool=body.pool)
        else:
            row, secret = auth.create_token(session, name=body.name, kind="user", role=body.role, team_id=team_id)
        return _token_out(session, row, secret)

    return await run_in_threadpool(write_with_study, state, create)  # type: ignore[no-any-return]


@router.get("/tokens", response_model=list[TokenOut])
async def list_tokens(state: StateDep, principal: PrincipalDep) -> list[TokenOut]:
    principal.require("admin")

    def load() -> list[TokenOut]:
        with state.db.read() as session:
            stmt = select(ApiToken).where(ApiToken.revoked_at.is_(None)).order_by(ApiToken.id)
            if not principal.superuser:
                stmt = stmt.where(ApiToken.team_id == principal.team_id)
            return [_token_out(session, row) for row in session.execute(stmt).scalars()]

    return await run_in_threadpool(load)


@router.delete("/tokens/{token_id}", status_code=204)
async def revoke_token(token_id: int, state: StateDep, principal: PrincipalDep) -> None:
    principal.require("admin")

    def revoke(session: Session) -> None:
        row = session.get(ApiToken, token_id)
        if row is None or (not principal.superuser and row.team_id != principal.team_id):
            raise NotFound(f"no token {token_id} in your team", field="token_id")
        row.revoked_at = utcnow()

    await run_in_threadpool(write_with_study, state, revoke)

"""Worker pools: what a pool requires of its workers (trial isolation, docs/security.md; a
toolchain) and how its GPUs are shared between teams (service.trials.fairshare).

A pool needs no row to exist; one without a row requires nothing and shares equally. The
operator (a superuser token) sets a pool's requirements and its teams' weights and quotas;
every authenticated token may read the requirements, a team's admins their own team's share.
A worker below its pool's requirement is refused at registration, and its lease requests are
refused once the requirement is raised (within RULE_TTL_S on other replicas: the lease path
reads a replica's copy of the rules, as it does the principals).
"""

from __future__ import annotations

import threading
import time
from typing import Annotated, Any

from fastapi import APIRouter, Path
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from service.accounts.tokens import Principal
from service.api.deps import PrincipalDep, ReadSession, WriteSession
from service.api.schemas import Utc
from service.errors import Forbidden, Invalid, NotFound
from service.notify import Channel
from service.store.effects import effects
from service.store.models import ApiToken, Pool, PoolTeam, Team, Worker, utcnow
from service.trials import fairshare, shares
from service.trials.fairshare import Priority
from wire.contract import IsolationLevel
from wire.targets import release_of

# Included by service.workers.router under its /v1 prefix.
router = APIRouter(tags=["pools"])
PoolName = Annotated[str, Path(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.\-]+$")]
RULE_TTL_S = 5.0
_rules: dict[tuple[str, str], tuple[float, str | None]] = {}  # (database, pool) -> (until, level)
_rules_lock = threading.Lock()


class TeamShareIn(BaseModel):
    """A team's share of a pool: its weight against the other teams' (default 1 each) and
    its quotas (none by default)."""

    model_config = ConfigDict(extra="forbid")

    weight: float = Field(default=1.0, gt=0, le=1000)
    max_running: int | None = Field(default=None, ge=0, le=1_000_000)  # trials running at once
    gpu_hours_per_day: float | None = Field(default=None, ge=0, le=1_000_000)  # over the last 24 hours
    allow_urgent: bool = True  # its studies may take `priority: urgent`


class PoolIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    min_isolation: IsolationLevel = IsolationLevel.NONE
    auto_revalidate: bool = False  # re-validate artifacts at once when a worker makes them stale
    # the CUDA toolchain its workers must compile with: nvidia-cuda-nvcc's exact version
    # (13.3.73) or a release (13.3); a worker with another is refused at registration
    toolchain: str | None = Field(default=None, pattern=r"^(nvidia-cuda-nvcc==)?\d+\.\d+(\.\d+)?$")
    # team name -> its share; a team left out has weight 1 and no quota
    teams: dict[str, TeamShareIn] = Field(default_factory=dict, max_length=10_000)
    # a team's past use of the pool counts half after this long (Slurm's PriorityDecayHalfLife)
    usage_half_life_s: float = Field(default=3600.0, ge=60, le=30 * 86_400)


class TeamShareOut(TeamShareIn):
    team: str


class PoolOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    name: str
    min_isolation: IsolationLevel
    auto_revalidate: bool
    toolchain: str | None = None
    usage_half_life_s: float = 3600.0
    teams: list[TeamShareOut] = Field(default_factory=list)  # the operator sees every team's, others their own
    created_at: Utc
    updated_at: Utc


class TeamUsageOut(BaseModel):
    team: str
    weight: float
    max_running: int | None
    gpu_hours_per_day: float | None
    running: int = Field(description="trials of the team running in the pool now")
    share_running: float = Field(description="its fraction of the pool's running trials")
    fair_share: float = Field(description="its weight's fraction among the teams with trials queued or running")
    queued_studies: int = Field(description="its studies with trials queued")
    usage_gpu_hours: float = Field(description="its use of the pool, decayed by the pool's half-life")
    gpu_hours_24h: float = Field(description="its use in the last 24 hours (the daily quota's measure)")
    held_back: str | None = Field(description="why its queued trials wait although workers are free, if so")


class PoolSharesOut(BaseModel):
    pool: str
    usage_half_life_s: float
    mean_trial_s: float
    running: int
    teams: list[TeamUsageOut]


DEFAULT_POOL = "default"


def known(session: Session) -> set[str]:
    """The pools a study may name: the default, those the operator has set, those a worker
    token is for and those a worker has registered in."""
    names = {DEFAULT_POOL}
    names.update(session.execute(select(Pool.name)).scalars())
    names.update(pool for pool in session.execute(select(ApiToken.pool).where(ApiToken.revoked_at.is_(None))
                                                  .distinct()).scalars() if pool)
    names.update(session.execute(select(Worker.pool).distinct()).scalars())
    return names


def _required(session: Session, pool: str, cached: bool) -> str | None:
    key = (str(session.get_bind().engine.url), pool)
    now = time.monotonic()
    with _rules_lock:
        hit = _rules.get(key)
    if cached and hit is not None and hit[0] > now:
        return hit[1]
    row = session.get(Pool, pool)
    level = row.min_isolation if row is not None else None
    with _rules_lock:
        if len(_rules) > 10_000:
            _rules.clear()
        _rules[key] = (now + RULE_TTL_S, level)
    return level


def require_isolation(session: Session, pool: str, level: str | None, *, cached: bool = False) -> None:
    """Forbidden (naming the pool, its requirement and the worker's level) when a worker
    isolating its trials at `level` may not serve `pool`. `cached`: this replica's copy of
    the rule may be up to RULE_TTL_S old (the lease path)."""
    rule = _required(session, pool, cached)
    if rule is None:
        return
    required = IsolationLevel(rule)
    try:
        have = IsolationLevel(level or IsolationLevel.NONE)
    except ValueError:
        have = IsolationLevel.NONE
    if have.rank < required.rank:
        raise Forbidden(
            f"pool {pool!r} requires trial isolation {required.value!r} or better; this worker isolates at "
            f"{have.value!r}. Install bubblewrap on the worker (docs/security.md) or serve another pool",
            field="fingerprint.isolation",
        )


def require_toolchain(session: Session, pool: str, toolchain: dict[str, Any] | None) -> None:
    """Forbidden (naming both) when a worker compiling with `toolchain` (its fingerprint's)
    may not serve `pool`, which requires another."""
    row = session.get(Pool, pool)
    rule = row.toolchain if row is not None else None
    if not rule:
        return
    version = str((toolchain or {}).get("version") or "")
    if version != rule and release_of(version) != rule:
        raise Forbidden(f"pool {pool!r} requires the CUDA toolchain nvidia-cuda-nvcc {rule}; this worker compiles "
                        f"with {version or 'none'}: start it with --toolchain {rule} (paretune toolchain install "
                        f"nvidia-cuda-nvcc=={rule if rule.count('.') == 2 else rule + '.X'})",
                        field="fingerprint.toolchain")


@router.put("/pools/{name}", response_model=PoolOut)
def put_pool(name: PoolName, body: PoolIn, principal: PrincipalDep, session: WriteSession) -> PoolOut:
    """Set what a pool requires of its workers, whether it re-validates stale artifacts, and
    how it is shared between teams (operator only; the whole pool is replaced)."""
    if not principal.superuser:
        raise Forbidden("only the operator's admin token can set a pool's requirements")
    teams = dict(session.execute(select(Team.name, Team.id).where(Team.name.in_(sorted(body.teams)))).all())
    unknown = sorted(set(body.teams) - teams.keys())
    if unknown:
        errors = [{"field": f"teams.{team}", "message": f"no team {team!r}: name an existing team "
                                                        "(paretune team list) or leave it out"} for team in unknown]
        raise Invalid("; ".join(e["message"] for e in errors), field=errors[0]["field"], errors=errors)
    return _pool_out(session, save(session, name, body, teams), principal)


def save(session: Session, name: str, body: PoolIn, teams: dict[str, int]) -> Pool:
    """Replace the pool's settings (`teams`: the team ids of `body.teams`' names); once it
    commits, every replica reads its lease order anew."""
    row = session.get(Pool, name)
    now = utcnow()
    toolchain = body.toolchain.removeprefix("nvidia-cuda-nvcc==") if body.toolchain else None
    if row is None:
        row = Pool(name=name, created_at=now)
        session.add(row)
    row.min_isolation, row.auto_revalidate, row.toolchain = body.min_isolation.value, body.auto_revalidate, toolchain
    row.usage_half_life_s, row.updated_at = body.usage_half_life_s, now
    session.flush()
    session.execute(delete(PoolTeam).where(PoolTeam.pool == name))
    session.add_all(PoolTeam(pool=name, team_id=teams[team], **share.model_dump())
                    for team, share in body.teams.items())
    session.flush()
    with _rules_lock:
        _rules.pop((str(session.get_bind().engine.url), name), None)
    effects(session).notify(Channel.SHARES)
    return row


@router.get("/pools", response_model=list[PoolOut])
def list_pools(principal: PrincipalDep, session: ReadSession) -> list[PoolOut]:
    """Pools with requirements or team settings (any token may read them; the teams' shares:
    the operator every team's, others their own team's)."""
    return [_pool_out(session, p, principal) for p in session.execute(select(Pool).order_by(Pool.name)).scalars()]


@router.get("/pools/{name}/shares", response_model=PoolSharesOut)
def pool_shares(name: PoolName, principal: PrincipalDep, session: ReadSession) -> PoolSharesOut:
    """How the pool is shared now: each team's weight, quotas, running trials and use (the
    operator sees every team; others their own team, and the pool's totals)."""
    pool = shares.load(session, utcnow(), only=name).get(name) or shares.PoolShares(name)
    if session.get(Pool, name) is None and not pool.entries and not pool.teams:
        raise NotFound(f"no pool {name!r} has settings, trials or use", field="name")
    active = {e.candidate.team_id for e in pool.entries.values()}
    weights = {team: pool.share(team).weight for team in active}
    running = sum(u.running for u in pool.teams.values())
    rows = []
    for team in sorted({*pool.teams, *pool.shares, *active}, key=lambda t: pool.team_names.get(t, "")):
        if not principal.superuser and team != principal.team_id:
            continue
        share, usage = pool.share(team), pool.teams.get(team, fairshare.NO_USAGE)
        rows.append(TeamUsageOut(
            team=pool.team_names.get(team, str(team)), weight=share.weight, max_running=share.max_running,
            gpu_hours_per_day=share.gpu_hours_per_day, running=usage.running,
            share_running=round(usage.running / running, 4) if running else 0.0,
            fair_share=round(weights[team] / sum(weights.values()), 4) if team in weights else 0.0,
            queued_studies=sum(1 for e in pool.entries.values() if e.candidate.team_id == team and e.queued),
            usage_gpu_hours=round(usage.decayed_s / 3600, 6), gpu_hours_24h=round(usage.day_s / 3600, 6),
            held_back=pool.held_back(team)))
    return PoolSharesOut(pool=name, usage_half_life_s=pool.half_life_s, mean_trial_s=round(pool.mean_trial_s, 4),
                         running=running, teams=rows)


def _pool_out(session: Session, row: Pool, principal: Principal) -> PoolOut:
    query = (select(PoolTeam, Team.name).join(Team, Team.id == PoolTeam.team_id)
             .where(PoolTeam.pool == row.name).order_by(Team.name))
    if not principal.superuser:
        query = query.where(PoolTeam.team_id == principal.team_id)
    teams = [TeamShareOut(team=team_name, weight=t.weight, max_running=t.max_running,
                          gpu_hours_per_day=t.gpu_hours_per_day, allow_urgent=t.allow_urgent)
             for t, team_name in session.execute(query)]
    return PoolOut(name=row.name, min_isolation=IsolationLevel(row.min_isolation), auto_revalidate=row.auto_revalidate,
                   toolchain=row.toolchain, usage_half_life_s=row.usage_half_life_s, teams=teams,
                   created_at=row.created_at, updated_at=row.updated_at)


def require_priority(session: Session, pool: str, team_id: int, priority: Priority) -> None:
    """Forbidden (naming `priority`) when the operator keeps the team's studies in `pool`
    from taking `priority`."""
    if priority != Priority.URGENT:
        return
    row = session.get(PoolTeam, (pool, team_id))
    if row is not None and not row.allow_urgent:
        raise Forbidden(f"your team's studies may not take priority 'urgent' in pool {pool!r} (the operator's "
                        "allow_urgent); use 'normal' or 'batch', or ask the operator", field="priority")

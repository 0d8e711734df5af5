"""Worker pools: the trial isolation level a pool requires of its workers (docs/security.md).

A pool needs no row to exist; one without a row requires nothing. The operator (a superuser
token) sets a pool's requirement; every authenticated token may read them. A worker below
its pool's requirement is refused at registration, and its lease requests are refused once
the requirement is raised (within RULE_TTL_S on other replicas: the lease path reads a
replica's copy of the rules, as it does the principals).
"""

from __future__ import annotations

import threading
import time
from typing import Annotated, Any

from fastapi import APIRouter, Path
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.api.deps import PrincipalDep, ReadSession, WriteSession
from service.api.schemas import Utc
from service.errors import Forbidden
from service.store.models import Pool, utcnow
from wire.contract import IsolationLevel
from wire.targets import release_of

# Included by service.workers.router under its /v1 prefix.
router = APIRouter(tags=["pools"])
PoolName = Annotated[str, Path(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.\-]+$")]
RULE_TTL_S = 5.0
_rules: dict[tuple[str, str], tuple[float, str | None]] = {}  # (database, pool) -> (until, level)
_rules_lock = threading.Lock()


class PoolIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    min_isolation: IsolationLevel = IsolationLevel.NONE
    auto_revalidate: bool = False  # re-validate artifacts at once when a worker makes them stale
    # the CUDA toolchain its workers must compile with: nvidia-cuda-nvcc's exact version
    # (13.3.73) or a release (13.3); a worker with another is refused at registration
    toolchain: str | None = Field(default=None, pattern=r"^(nvidia-cuda-nvcc==)?\d+\.\d+(\.\d+)?$")


class PoolOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    name: str
    min_isolation: IsolationLevel
    auto_revalidate: bool
    toolchain: str | None = None
    created_at: Utc
    updated_at: Utc


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
    """Set the isolation level a pool requires and whether it re-validates stale artifacts (operator only)."""
    if not principal.superuser:
        raise Forbidden("only the operator's admin token can set a pool's requirements")
    row = session.get(Pool, name)
    now = utcnow()
    toolchain = body.toolchain.removeprefix("nvidia-cuda-nvcc==") if body.toolchain else None
    if row is None:
        row = Pool(name=name, min_isolation=body.min_isolation.value, auto_revalidate=body.auto_revalidate,
                   toolchain=toolchain, created_at=now, updated_at=now)
        session.add(row)
    else:
        row.min_isolation, row.auto_revalidate = body.min_isolation.value, body.auto_revalidate
        row.toolchain, row.updated_at = toolchain, now
    session.flush()
    with _rules_lock:
        _rules.pop((str(session.get_bind().engine.url), name), None)
    return PoolOut.model_validate(row)


@router.get("/pools", response_model=list[PoolOut])
def list_pools(principal: PrincipalDep, session: ReadSession) -> list[PoolOut]:
    """Pools with requirements (any token may read them)."""
    return [PoolOut.model_validate(p) for p in session.execute(select(Pool).order_by(Pool.name)).scalars()]

"""What every router depends on: the application's state, one database session per request
(committed at the edge, before the response is sent), and the caller's principal."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Path, Request
from sqlalchemy.orm import Session

from service.accounts.tokens import Principal, authenticate, hash_token
from service.config import Settings
from service.metrics import Metrics
from service.notify import Notifier
from service.scheduling.loop import Scheduler
from service.scheduling.mirror import MirrorCache
from service.store.db import Database
from service.trials.leases import StudySpecs
from service.trials.workers import WorkerDirectory

PRINCIPAL_TTL_S = 5.0  # a revoked token stops working within this long on other replicas


@dataclass
class AppState:
    settings: Settings
    db: Database
    cache: MirrorCache
    notifier: Notifier
    metrics: Metrics
    scheduler: Scheduler
    specs: StudySpecs = field(default_factory=StudySpecs)
    workers: WorkerDirectory = field(default_factory=WorkerDirectory)
    principals: dict[str, tuple[float, Principal]] = field(default_factory=dict)

    def forget_principals(self) -> None:
        self.principals.clear()


def get_state(request: Request) -> AppState:
    return request.app.state.paretune  # type: ignore[no-any-return]


StateDep = Annotated[AppState, Depends(get_state)]


async def read_session(state: StateDep) -> AsyncIterator[Session]:
    async with state.db.request_session(write=False) as session:
        yield session


async def write_session(state: StateDep) -> AsyncIterator[Session]:
    """A transaction that commits when the endpoint returns, before the response is sent
    (or rolls back if it raises)."""
    async with state.db.request_session(write=True) as session:
        yield session


ReadSession = Annotated[Session, Depends(read_session, scope="function")]
WriteSession = Annotated[Session, Depends(write_session, scope="function")]


def _lookup(state: AppState, header: str | None) -> Principal:
    with state.db.read() as session:
        return authenticate(session, header)


async def get_principal(request: Request, state: StateDep) -> Principal:
    header = request.headers.get("authorization")
    key = hash_token(header) if header else ""
    cached = state.principals.get(key)
    if cached is not None and cached[0] > time.monotonic():
        return cached[1]
    principal = await state.db.run(_lookup, state, header)
    if len(state.principals) > 10_000:
        state.principals.clear()
    state.principals[key] = (time.monotonic() + PRINCIPAL_TTL_S, principal)
    return principal


PrincipalDep = Annotated[Principal, Depends(get_principal)]

# ids in paths are database integers: larger ones name nothing (404), never a 500
MAX_ID = 2**63 - 1
StudyId = Annotated[int, Path(ge=1, le=MAX_ID, description="the study's id")]
TokenId = Annotated[int, Path(ge=1, le=MAX_ID, description="the token's id")]
TrialNumber = Annotated[int, Path(ge=0, le=2**31 - 1, description="the trial's number in its study")]

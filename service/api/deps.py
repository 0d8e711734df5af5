"""What every router depends on: the application's state, one database session per request
(committed at the edge, before the response is sent), and the caller's principal."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Path, Request, Security
from fastapi.security import HTTPBearer
from sqlalchemy.orm import Session

from service.accounts.limits import FailureLimiter
from service.accounts.principals import PrincipalCache
from service.accounts.tokens import PREFIX_CHARS, AuthenticationFailed, Principal, authenticate, hash_token
from service.artifacts.signing import SigningKey, load_signing_key
from service.artifacts.validations import ValidationWork
from service.config import Settings
from service.controls.catalog import ControlsCatalog
from service.controls.files import ControlsFiles
from service.errors import TooManyRequests
from service.metrics import Metrics
from service.notify import Notifier
from service.scheduling.loop import Scheduler
from service.scheduling.mirror import MirrorCache
from service.store.db import Database
from service.store.models import utcnow
from service.studies.specs import StudySpecs
from service.trials.empty import EmptyQueues
from service.trials.leases import LeaseQueue
from service.trials.shares import ShareView
from service.trials.work import TrialWork
from service.workers.registry import WorkerDirectory

log = logging.getLogger("paretune.auth")
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
    controls_files: ControlsFiles = field(default_factory=ControlsFiles)
    workers: WorkerDirectory = field(default_factory=WorkerDirectory)
    principals: PrincipalCache = field(default_factory=lambda: PrincipalCache(PRINCIPAL_TTL_S))
    auth_failures: FailureLimiter = field(init=False)
    empty_queues: EmptyQueues = field(init=False)
    shares: ShareView = field(init=False)  # the pools' lease order (service.trials.shares)
    queue: LeaseQueue = field(init=False)
    _signing: SigningKey | None = field(default=None, init=False)

    @property
    def catalog(self) -> ControlsCatalog:
        """The operator's CompileIQ search-space catalog (the scheduling steps read the same)."""
        return self.cache.catalog

    def __post_init__(self) -> None:
        self.auth_failures = FailureLimiter(self.settings.auth_failure_limit, self.settings.auth_failure_window_s)
        # without Redis other replicas' trials are found only by looking: every poll interval
        period = 5.0 if self.settings.redis_url else self.settings.poll_interval_s
        self.empty_queues = EmptyQueues(period)
        # the kinds of leased work, in the order a worker is offered them: a person waits for
        # a validation
        self.shares = ShareView(self.db)
        self.queue = LeaseQueue(self.settings, self.workers, self.shares)
        self.queue.register(ValidationWork())
        self.queue.register(TrialWork(self.specs, self.controls_files))

    def signing_key(self) -> SigningKey:
        """The artifact signing key, read (or made) on first use."""
        if self._signing is None:
            self._signing = load_signing_key(self.settings.data_dir, self.settings.signing_key_file)
        return self._signing


async def get_state(request: Request) -> AppState:
    """(async: a plain function dependency would be run on a worker thread, a hop per request)"""
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


# declared for the OpenAPI document (and /docs); get_principal reads the header itself
bearer = HTTPBearer(auto_error=False, description="a paretune token: `Authorization: Bearer <token>`")


def _lookup(state: AppState, header: str) -> Principal:
    with state.db.read() as session:
        return authenticate(session, header)


async def get_principal(request: Request, state: StateDep,
                        _: Annotated[object, Security(bearer)] = None) -> Principal:
    """The caller's token, or a 401. A client that failed to authenticate too often lately
    gets a 429 before its token is even looked at, so that guessing cannot go on."""
    header = request.headers.get("authorization")
    if not header:
        raise AuthenticationFailed("missing", "send `Authorization: Bearer <token>`; `paretune token create` makes one")
    client = request.client.host if request.client else "unknown"
    wait = state.auth_failures.retry_after(client, time.monotonic())
    if wait is not None:
        seconds = max(1, int(wait + 0.999))
        raise TooManyRequests(
            f"too many failed authentications from {client}; try again in {seconds} s", field="authorization",
            retry_after_s=seconds, headers={"Retry-After": str(seconds)})
    key = hash_token(header)
    now = utcnow()
    principal = state.principals.get(key, now)
    if principal is not None:
        return principal
    try:
        principal = await state.db.run(_lookup, state, header)
    except AuthenticationFailed as exc:
        state.auth_failures.record(client, time.monotonic())
        shown = header[7:].strip()[:PREFIX_CHARS] if header.lower().startswith("bearer ") else "(not a bearer token)"
        route = getattr(request.scope.get("route"), "path", request.url.path)  # lease tokens stay out of logs
        log.warning("authentication failed from %s: %s (token %r...) on %s %s", client, exc.reason, shown,
                    request.method, route)
        raise
    state.principals.put(key, principal)
    return principal


PrincipalDep = Annotated[Principal, Depends(get_principal)]

# ids of studies, tokens and workers are 32-bit database integers: a larger one is refused
# as invalid (422 naming it) before it reaches the database, which would refuse to compare it
MAX_ID = 2**31 - 1
StudyId = Annotated[int, Path(ge=1, le=MAX_ID, description="the study's id")]
TokenId = Annotated[int, Path(ge=1, le=MAX_ID, description="the token's id")]
TrialNumber = Annotated[int, Path(ge=0, le=2**31 - 1, description="the trial's number in its study")]

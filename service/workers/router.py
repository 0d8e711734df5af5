"""The worker protocol: register, long-poll lease, heartbeat, result (every kind of work
through the one lease queue, service.trials.leases); and the worker list."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.accounts.tokens import Principal
from service.api.deps import MAX_ID, AppState, PrincipalDep, ReadSession, StateDep, WriteSession
from service.api.schemas import ERROR_RESPONSES, WorkerOut
from service.artifacts import audit, catalog, validations, versions
from service.errors import Forbidden, Invalid, NotFound
from service.notify import Channel
from service.store.effects import effects
from service.store.models import Study, Trial, Worker
from service.store.storable import storable
from service.trials.empty import QueueKey
from service.workers import pools
from service.workers.compat import Contract, check_worker_contract
from service.workers.registry import WorkerInfo
from wire import contract as wire

router = APIRouter(prefix="/v1", tags=["workers"], responses=ERROR_RESPONSES,
                   dependencies=[Depends(check_worker_contract)])
router.include_router(pools.router)
LeaseToken = Annotated[str, Path(min_length=1, max_length=64, description="the lease's token")]


def owned_worker(session: Session, state: AppState, principal: Principal, worker_id: int) -> WorkerInfo:
    principal.require_worker()
    worker = state.workers.get(session, worker_id) if 0 < worker_id <= MAX_ID else None
    if worker is None or worker.token_id != principal.token_id:
        raise NotFound(f"no worker {worker_id} registered with this token; register first", field="worker_id")
    return worker


@router.post("/workers/register", status_code=201, response_model=wire.RegisterResponse)
def register(body: wire.RegisterRequest, state: StateDep, principal: PrincipalDep,
             session: WriteSession) -> wire.RegisterResponse:
    principal.require_worker()
    if principal.pool and body.pool != principal.pool:
        raise Forbidden(f"this worker token serves pool {principal.pool!r}, not {body.pool!r}", field="pool")
    for field in ("name", "pool"):
        if "\x00" in getattr(body, field):
            raise Invalid("text must not contain NUL characters", field=field)
    unknown = state.queue.unknown_kinds(body.kinds)
    if unknown:
        raise Invalid(f"this service leases no work of kind {', '.join(map(repr, unknown))}; it leases "
                      f"{', '.join(state.queue.kinds)}", field="kinds")
    fingerprint = body.fingerprint
    pools.require_isolation(session, body.pool, fingerprint.isolation)
    pools.require_toolchain(session, body.pool, (fingerprint.model_extra or {}).get("toolchain"))
    worker = Worker(name=body.name, pool=body.pool, token_id=principal.token_id,
                    fingerprint=storable(fingerprint.model_dump(mode="json")),
                    backends=storable(list(fingerprint.backends)), energy=fingerprint.energy,
                    kinds=list(body.kinds))
    session.add(worker)
    session.flush()
    state.workers.remember(worker)
    stale = catalog.mark_stale(session, worker)
    if stale and catalog.auto_revalidates(session, worker.pool):
        for artifact in stale:
            versions.revalidate(session, artifact, audit.Actor(audit.SERVICE_ACTOR, None),
                                f"automatic: {artifact.stale_reason}", validations.DEFAULT_ROUNDS)
    return wire.RegisterResponse(worker_id=worker.id, heartbeat_s=state.settings.heartbeat_s,
                                 lease_s=state.settings.lease_s)


@router.post("/leases", response_model=None,
             responses={200: {"model": wire.Lease}, 204: {"description": "nothing queued in time"}})
async def lease(body: wire.LeaseRequest, state: StateDep, principal: PrincipalDep, request: Request,
                contract: Contract) -> Response:
    """Long-poll: returns a lease as soon as work of the worker's pool and kinds is queued,
    or 204 after `wait_s`. A worker that went away meanwhile (it stopped) is leased nothing.

    It looks at the queue at once (unless a worker that leased through this replica lately
    asks for a queue known to be empty, EmptyQueues: it waits then), whenever a pool
    notification wakes it, and when its timer runs out only if a wake-up may have gone missing
    meanwhile: one that came while it looked, before it waited, makes it look again at once.
    After its first pass it makes sure, each time, that the worker is still there."""
    principal.require_worker()
    deadline = time.monotonic() + body.wait_s
    notifier = state.notifier
    known = state.workers.leasing(body.worker_id, principal.token_id) if body.wait_s > 0 else None
    queue = QueueKey.of(known) if known is not None else None  # the worker's pool and what it can run
    woken, first = queue is None, True
    while True:
        if not first and await request.is_disconnected():
            return Response(status_code=204)
        first = False
        if woken or queue is None or not state.empty_queues.known_empty(queue, notifier.unanswered_pool_wakeups):
            started = time.perf_counter()
            reply, worker = await state.db.run(lease_once, state, principal, body.worker_id, contract)
            state.metrics.lease_seconds.observe(time.perf_counter() - started)
            if reply is not None:
                return _json(reply)
            queue = QueueKey.of(worker)  # found empty (next_work)
            if not state.empty_queues.known_empty(queue, notifier.unanswered_pool_wakeups):
                woken = False
                continue
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return Response(status_code=204)
        woken = await notifier.wait(Channel.pool(queue.pool), min(remaining, state.empty_queues.period_s))


def lease_once(state: AppState, principal: Principal, worker_id: int,
               contract: int) -> tuple[wire.Lease | None, WorkerInfo]:
    """One attempt of a long-poll, in its own transaction (a long-poll spans several)."""
    with state.db.write() as session:
        worker = owned_worker(session, state, principal, worker_id)
        return next_work(session, state, worker, contract), worker


def next_work(session: Session, state: AppState, worker: WorkerInfo, contract: int) -> wire.Lease | None:
    """Lease the worker's next work, if any is queued for it (what this replica learns of
    its queue kept in state.empty_queues)."""
    pools.require_isolation(session, worker.pool, worker.fingerprint.get("isolation"), cached=True)
    state.workers.seen(session, worker.id)
    queue, unanswered = QueueKey.of(worker), state.notifier.unanswered_pool_wakeups
    lease = state.queue.lease(session, worker, contract)
    if lease is None:
        state.empty_queues.found_empty(queue, unanswered)
    return lease


@router.post("/leases/{token}/heartbeat", response_model=None, responses={200: {"model": wire.HeartbeatResponse}})
async def heartbeat(token: LeaseToken, body: wire.HeartbeatRequest, state: StateDep,
                    principal: PrincipalDep) -> Response:
    """Extend a held lease (every kind of work); `cancel` says to stop the work and report nothing.
    A validation job's heartbeat carries its rounds so far (`progress`)."""
    principal.require_worker()
    return _json(await state.db.run(heartbeat_once, state, principal, token, body))


def heartbeat_once(state: AppState, principal: Principal, token: str,
                   beat: wire.HeartbeatRequest) -> wire.HeartbeatResponse:
    with state.db.write() as session:
        held = state.queue.held(session, token, principal.token_id)
        return state.queue.heartbeat(session, held, beat)


REPORT_BODY = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "description": "the report of the lease's kind of work: a TrialResult for a trial, a "
                                     "ValidationReport for a validation job (wire.WorkReport and its kinds)"}}}}}


@router.post("/leases/{token}/result", response_model=None, openapi_extra=REPORT_BODY,
             responses={200: {"model": wire.ResultAck | wire.ValidationAck}})
async def result(token: LeaseToken, request: Request, state: StateDep, principal: PrincipalDep,
                 contract: Contract) -> Response:
    """A held lease's report, read as its kind's report (a 422 names what is wrong with it);
    posting it twice counts once. With `next_lease` the acknowledgement carries the
    worker's next lease, if one is queued."""
    started = time.perf_counter()
    principal.require_worker()
    ack = await state.db.run(report_once, state, principal, token, await request.body(), contract)
    state.metrics.result_seconds.observe(time.perf_counter() - started)
    return _json(ack)


@router.post("/leases/{token}/validation", response_model=None, deprecated=True,
             responses={200: {"model": wire.ValidationAck}})
async def validation_report(token: LeaseToken, body: wire.ValidationReport, state: StateDep,
                            principal: PrincipalDep, contract: Contract) -> Response:
    """A validation job's report, as workers of contract 3 and older post it (newer ones post
    every report to /v1/leases/{token}/result)."""
    principal.require_worker()
    return _json(await state.db.run(report_once, state, principal, token, body, contract, "validation"))


def report_once(state: AppState, principal: Principal, token: str, report: bytes | wire.WorkReport, contract: int,
                kind: str | None = None) -> wire.WorkAck:
    with state.db.write() as session:
        held = state.queue.held(session, token, principal.token_id, kind)
        if isinstance(report, bytes):
            report = _parse(held.kind.report, report)
        ack = state.queue.record(session, held, report)
        if report.next_lease:  # in the same transaction: one request per unit of work instead of two
            ack.next_lease = next_work(session, state, held.worker, contract)
        # a worker waits for what the report's step queues: this one, or one long-polling here
        if (report.next_lease and ack.next_lease is None) or state.notifier.waiting(Channel.pool(held.worker.pool)):
            effects(session).hurry()
        return ack


def _parse(model: type[wire.WorkReport], body: bytes) -> wire.WorkReport:
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise RequestValidationError(exc.errors(include_url=False)) from None


def _json(reply: BaseModel) -> Response:
    """(Serialised once, in Rust: the lease path's replies skip FastAPI's validation of what
    the service itself built.)"""
    return Response(reply.model_dump_json(), media_type="application/json")


@router.get("/workers", response_model=list[WorkerOut], tags=["workers"])
def list_workers(principal: PrincipalDep, session: ReadSession) -> list[WorkerOut]:
    """Workers of the pools the caller's team runs studies in (every worker for the operator)."""
    principal.require("viewer")
    done = (select(func.count()).select_from(Trial)
            .where(Trial.worker_id == Worker.id, Trial.state.in_(("completed", "failed")))
            .correlate(Worker).scalar_subquery())
    stmt = select(Worker, done).order_by(Worker.id.desc()).limit(1000)
    if not principal.superuser:
        pools = select(Study.pool).where(Study.team_id == principal.team_id).distinct()
        stmt = stmt.where(Worker.pool.in_(pools))
    return [WorkerOut.of(worker, count) for worker, count in session.execute(stmt)]

"""The worker protocol: register, long-poll lease, heartbeat, result."""

from __future__ import annotations

import time

from fastapi import APIRouter, Response
from sqlalchemy import select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from service import leases
from service.api.schemas import WorkerOut
from service.app import AppState, PrincipalDep, StateDep, write_with_study
from service.auth import Principal
from service.errors import Forbidden, NotFound
from service.store.models import Trial, Worker, utcnow
from workers import contract as wire

router = APIRouter(prefix="/v1", tags=["workers"])


def _worker(session: Session, principal: Principal, worker_id: int) -> Worker:
    principal.require_worker()
    worker = session.get(Worker, worker_id)
    if worker is None or worker.token_id != principal.token_id:
        raise NotFound(f"no worker {worker_id} registered with this token; register first", field="worker_id")
    return worker


def _token_worker(session: Session, principal: Principal) -> Worker:
    """The most recently registered worker of this token (lease URLs carry no worker id)."""
    principal.require_worker()
    worker = session.execute(
        select(Worker).where(Worker.token_id == principal.token_id).order_by(Worker.id.desc()).limit(1)
    ).scalar_one_or_none()
    if worker is None:
        raise NotFound("no worker registered with this token; register first", field="token")
    return worker


@router.post("/workers/register", status_code=201, response_model=wire.RegisterResponse)
async def register(body: wire.RegisterRequest, state: StateDep, principal: PrincipalDep) -> wire.RegisterResponse:
    principal.require_worker()
    if principal.pool and body.pool != principal.pool:
        raise Forbidden(f"this worker token serves pool {principal.pool!r}, not {body.pool!r}", field="pool")

    def create(session: Session) -> int:
        fp = body.fingerprint
        worker = Worker(name=body.name, pool=body.pool, token_id=principal.token_id,
                        fingerprint=fp.model_dump(mode="json"), backends=list(fp.backends), energy=fp.energy)
        session.add(worker)
        session.flush()
        return worker.id

    worker_id = await run_in_threadpool(write_with_study, state, create)
    return wire.RegisterResponse(worker_id=worker_id, heartbeat_s=state.settings.heartbeat_s,
                                 lease_s=state.settings.lease_s)


@router.post("/leases", response_model=wire.Lease, responses={204: {"description": "nothing queued in time"}})
async def lease(body: wire.LeaseRequest, state: StateDep, principal: PrincipalDep) -> object:
    """Long-poll: returns a lease as soon as a trial of the worker's pool is queued, or
    204 after `wait_s`."""
    deadline = time.monotonic() + body.wait_s
    pool = None
    while True:
        started = time.perf_counter()
        reply, pool = await run_in_threadpool(_try_lease, state, principal, body.worker_id)
        state.metrics.lease_seconds.observe(time.perf_counter() - started)
        if reply is not None:
            return reply
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return Response(status_code=204)
        period = 5.0 if state.settings.redis_url else state.settings.poll_interval_s
        await state.notifier.wait(f"pool:{pool}", min(remaining, period))


def _try_lease(state: AppState, principal: Principal, worker_id: int) -> tuple[dict | None, str]:
    def take(session: Session) -> tuple[dict | None, str]:
        worker = _worker(session, principal, worker_id)
        worker.last_seen_at = utcnow()
        taken = leases.acquire(session, worker, state.settings)
        if taken is None:
            return None, worker.pool
        trial, study = taken
        return leases.lease_reply(trial, study, state.settings), worker.pool

    return write_with_study(state, take)  # type: ignore[no-any-return]


@router.post("/leases/{token}/heartbeat", response_model=wire.HeartbeatResponse)
async def heartbeat(token: str, body: wire.HeartbeatRequest, state: StateDep,
                    principal: PrincipalDep) -> wire.HeartbeatResponse:
    def beat(session: Session) -> wire.HeartbeatResponse:
        worker = _token_worker_for_lease(session, principal, token)
        return leases.heartbeat(session, token, worker, body.phase, state.settings)

    return await run_in_threadpool(write_with_study, state, beat)  # type: ignore[no-any-return]


@router.post("/leases/{token}/result", response_model=wire.ResultAck)
async def result(token: str, body: wire.TrialResult, state: StateDep, principal: PrincipalDep) -> wire.ResultAck:
    started = time.perf_counter()

    def record(session: Session) -> tuple[wire.ResultAck, str | None, int | None]:
        worker = _token_worker_for_lease(session, principal, token)
        ack, study = leases.record_result(session, state.cache, token, worker, body)
        return ack, (study.pool if study else None), (study.id if study else None)

    ack, pool, study_id = await run_in_threadpool(write_with_study, state, record)
    state.metrics.result_seconds.observe(time.perf_counter() - started)
    if study_id is not None:
        state.notifier.notify(f"pool:{pool}", f"study:{study_id}", "studies")
    return ack  # type: ignore[no-any-return]


def _token_worker_for_lease(session: Session, principal: Principal, token: str) -> Worker:
    """The worker of this token that holds the lease (a token may run several agents)."""
    principal.require_worker()
    worker_id = session.execute(select(Trial.worker_id).where(Trial.lease_token == token)).scalar_one_or_none()
    if worker_id is not None:
        worker = session.get(Worker, worker_id)
        if worker is not None and worker.token_id == principal.token_id:
            return worker
    return _token_worker(session, principal)


@router.get("/workers", response_model=list[WorkerOut], tags=["workers"])
async def list_workers(state: StateDep, principal: PrincipalDep) -> list[WorkerOut]:
    principal.require("viewer")

    def load() -> list[WorkerOut]:
        with state.db.read() as session:
            rows = session.execute(select(Worker).order_by(Worker.id.desc()).limit(1000)).scalars()
            return [WorkerOut.model_validate(w) for w in rows]

    return await run_in_threadpool(load)

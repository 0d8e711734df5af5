"""The worker protocol: register, long-poll lease, heartbeat, result; and the worker list."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request, Response
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.accounts.tokens import Principal
from service.api.deps import MAX_ID, AppState, PrincipalDep, ReadSession, StateDep, WriteSession
from service.api.schemas import ERROR_RESPONSES, WorkerOut
from service.artifacts import audit, catalog, validations, versions
from service.errors import Conflict, Forbidden, Invalid, NotFound
from service.store.db import after_commit
from service.store.models import Study, Trial, Worker
from service.store.storable import storable
from service.trials import leases
from service.trials.leases import QueueKey
from service.workers import pools
from service.workers.compat import check_worker_contract
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
    fingerprint = body.fingerprint
    pools.require_isolation(session, body.pool, fingerprint.isolation)
    pools.require_toolchain(session, body.pool, (fingerprint.model_extra or {}).get("toolchain"))
    worker = Worker(name=body.name, pool=body.pool, token_id=principal.token_id,
                    fingerprint=storable(fingerprint.model_dump(mode="json")),
                    backends=storable(list(fingerprint.backends)), energy=fingerprint.energy)
    session.add(worker)
    session.flush()
    state.workers.remember(worker)
    stale = catalog.mark_stale(session, worker)
    if stale and catalog.auto_revalidates(session, worker.pool):
        for artifact in stale:
            versions.revalidate(session, artifact, audit.Actor(audit.SERVICE_ACTOR, None),
                                f"automatic: {artifact.stale_reason}", validations.DEFAULT_ROUNDS)
        after_commit(session, lambda: state.notifier.notify(f"pool:{body.pool}"))
    return wire.RegisterResponse(worker_id=worker.id, heartbeat_s=state.settings.heartbeat_s,
                                 lease_s=state.settings.lease_s)


@router.post("/leases", response_model=wire.Lease, responses={204: {"description": "nothing queued in time"}})
async def lease(body: wire.LeaseRequest, state: StateDep, principal: PrincipalDep, request: Request) -> object:
    """Long-poll: returns a lease as soon as a trial of the worker's pool is queued, or
    204 after `wait_s`. A worker that went away meanwhile (it stopped) is leased nothing."""
    principal.require_worker()
    deadline = time.monotonic() + body.wait_s
    notifier = state.notifier
    queue: QueueKey | None = None  # the worker's pool and what it can run, once looked up
    while True:
        unanswered = notifier.unanswered_pool_wakeups
        if queue is None or not state.empty_queues.known_empty(queue, unanswered):
            if queue is not None and await request.is_disconnected():
                return Response(status_code=204)
            started = time.perf_counter()
            reply, worker = await state.db.run(lease_once, state, principal, body.worker_id)
            state.metrics.lease_seconds.observe(time.perf_counter() - started)
            if reply is not None:
                return reply
            queue = QueueKey.of(worker)
            state.empty_queues.found_empty(queue, unanswered)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return Response(status_code=204)
        await notifier.wait(f"pool:{queue.pool}", min(remaining, state.empty_queues.period_s))


def lease_once(state: AppState, principal: Principal, worker_id: int) -> tuple[wire.Lease | None, WorkerInfo]:
    """One attempt of a long-poll, in its own transaction (a long-poll spans several)."""
    with state.db.write() as session:
        worker = owned_worker(session, state, principal, worker_id)
        return next_work(session, state, worker), worker


def next_work(session: Session, state: AppState, worker: WorkerInfo) -> wire.Lease | None:
    """Lease the worker's next work if any is queued: a validation job first (a person waits
    for it), else a trial."""
    pools.require_isolation(session, worker.pool, worker.fingerprint.get("isolation"), cached=True)
    state.workers.seen(session, worker.id)
    job = validations.acquire(session, worker, state.settings)
    if job is not None:
        return job
    trial = leases.acquire(session, worker, state.settings)
    if trial is None:
        return None
    spec = state.specs.get(session, trial.study_id)
    acfs = state.controls_files.for_config(session, spec.kernel.controls, trial.config) if spec.kernel.controls \
        else None
    return leases.lease_reply(trial, spec, state.settings, acfs)


@router.post("/leases/{token}/heartbeat", response_model=wire.HeartbeatResponse)
def heartbeat(token: LeaseToken, body: wire.HeartbeatRequest, state: StateDep, principal: PrincipalDep,
              session: WriteSession) -> wire.HeartbeatResponse:
    principal.require_worker()
    job = validations.held_job(session, token, principal.token_id, state.workers)
    if job is not None:
        return validations.heartbeat(job, body.phase, state.settings)
    trial, _ = leases.held_trial(session, token, principal.token_id, state.workers)
    return leases.heartbeat(session, trial, body.phase, state.settings)


@router.post("/leases/{token}/validation", response_model=wire.ValidationAck)
def validation_report(token: LeaseToken, body: wire.ValidationReport, principal: PrincipalDep,
                      session: WriteSession, state: StateDep) -> wire.ValidationAck:
    """A validation job's report (every round's values, correctness per shape); posting it
    twice counts once. The last job's report settles its candidates."""
    principal.require_worker()
    job = validations.held_job(session, token, principal.token_id, state.workers)
    if job is None:
        raise Conflict("unknown validation lease: it expired and was handed to another worker, or never existed",
                       field="token")
    return validations.record_report(session, job, body)


@router.post("/leases/{token}/result", response_model=wire.ResultAck)
def result(token: LeaseToken, body: wire.TrialResult, state: StateDep, principal: PrincipalDep,
           session: WriteSession) -> wire.ResultAck:
    started = time.perf_counter()
    principal.require_worker()
    trial, worker = leases.held_trial(session, token, principal.token_id, state.workers)
    ack = leases.record_result(session, trial, state.specs.get(session, trial.study_id), worker, body)
    if not ack.duplicate:
        study_id = trial.study_id
        after_commit(session, lambda: state.scheduler.wake(study_id))
        after_commit(session, lambda: state.notifier.notify(f"study:{study_id}"))
    if body.next_lease:  # in the same transaction: one request per trial instead of two
        ack.next_lease = next_work(session, state, worker)
    state.metrics.result_seconds.observe(time.perf_counter() - started)
    return ack


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

"""The trial queue: leases, heartbeats, results and the expiry of abandoned leases.

A lease is one transaction that moves a queued trial to running with a fresh token and an
expiry (`FOR UPDATE SKIP LOCKED` on Postgres, so concurrent workers never take the same
row). Results are accepted only for the live lease's token and are idempotent per token.
"""

from __future__ import annotations

import math
import secrets
from datetime import timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service import fronts, scheduler, studies
from service.config import Settings
from service.errors import Conflict
from service.store.db import lock_study, next_seq
from service.store.models import Study, Trial, Worker, as_utc, utcnow
from workers import contract as wire


def acquire(session: Session, worker: Worker, settings: Settings) -> tuple[Trial, Study] | None:
    """Lease the oldest queued trial of the worker's pool that the worker can run."""
    stmt = (
        select(Trial)
        .where(Trial.pool == worker.pool, Trial.state == "queued", Trial.backend.in_(worker.backends or []))
        .order_by(Trial.id)
        .limit(1)
    )
    if not worker.energy:
        stmt = stmt.where(Trial.requires_energy.is_(False))
    if session.get_bind().dialect.name == "postgresql":
        stmt = stmt.with_for_update(skip_locked=True)
    trial = session.execute(stmt).scalar_one_or_none()
    if trial is None:
        return None
    now = utcnow()
    trial.state = "running"
    trial.lease_token = secrets.token_urlsafe(32)
    trial.lease_expires_at = now + timedelta(seconds=settings.lease_s)
    trial.attempt += 1
    trial.worker_id = worker.id
    trial.started_at = now
    trial.phase = "leased"
    trial.seq = next_seq(session)
    worker.last_seen_at = now
    study = session.get(Study, trial.study_id)
    assert study is not None
    return trial, study


def trial_spec(trial: Trial, study: Study) -> wire.TrialSpec:
    doc = study.document
    return wire.TrialSpec(
        trial_id=trial.id,
        study_id=study.id,
        number=trial.number,
        attempt=trial.attempt,
        is_baseline=trial.is_baseline,
        kernel=wire.KernelSpec.model_validate(doc["kernel"]),
        config=trial.config,
        objectives=[o["name"] for o in study.objectives],
        compile_timeout_s=doc["limits"]["compile_timeout_s"],
        run_timeout_s=doc["limits"]["run_timeout_s"],
        measure=wire.MeasureSettings.model_validate(doc["measure"]),
    )


def _live_trial(session: Session, token: str, worker: Worker) -> Trial:
    trial = session.execute(select(Trial).where(Trial.lease_token == token)).scalar_one_or_none()
    if trial is None or trial.worker_id != worker.id:
        raise Conflict("unknown lease: it expired and was handed to another worker, or never existed",
                       field="token")
    return trial


def heartbeat(session: Session, token: str, worker: Worker, phase: str | None,
              settings: Settings) -> wire.HeartbeatResponse:
    trial = _live_trial(session, token, worker)
    now = utcnow()
    expires = trial.lease_expires_at and as_utc(trial.lease_expires_at)
    if trial.state != "running" or expires is None or expires < now:
        raise Conflict("the lease has expired; drop this trial", field="token")
    trial.lease_expires_at = now + timedelta(seconds=settings.lease_s)
    if phase:
        trial.phase = phase[:32]
    worker.last_seen_at = now
    study = session.get(Study, trial.study_id)
    # a paused study lets running trials finish; a cancelled or failed one wants them stopped
    cancel = study is None or study.state in ("cancelled", "failed")
    return wire.HeartbeatResponse(expires_at=trial.lease_expires_at, cancel=cancel)


def record_result(session: Session, cache: scheduler.MirrorCache, token: str, worker: Worker,
                  result: wire.TrialResult) -> tuple[wire.ResultAck, Study | None]:
    """Store a worker's result; tell the sampler; refill the queue. Idempotent per token."""
    trial = _live_trial(session, token, worker)
    if trial.state in scheduler.FINISHED:
        return wire.ResultAck(trial_id=trial.id, state=trial.state, duplicate=True), None
    study = lock_study(session, trial.study_id)
    assert study is not None
    session.refresh(trial, with_for_update=session.get_bind().dialect.name == "postgresql")
    expires = trial.lease_expires_at and as_utc(trial.lease_expires_at)
    if trial.state != "running" or trial.lease_token != token or expires is None or expires < utcnow():
        raise Conflict("the lease has expired; the trial was handed back to the queue", field="token")
    mirror = cache.get(session, study)  # sync before this trial's row changes
    if mirror.front is None:
        mirror.front = fronts.load_front(session, study.id)
    _fill_result(trial, study, result, worker)
    trial.seq = next_seq(session)
    if trial.state == "completed":
        fronts.on_completed(session, study, trial, mirror.front)
    else:
        study.n_failed += 1
    worker.trials_done += 1
    worker.last_seen_at = utcnow()
    studies.refill(session, cache, study)
    study.updated_at = utcnow()
    return wire.ResultAck(trial_id=trial.id, state=trial.state), study


def _fill_result(trial: Trial, study: Study, result: wire.TrialResult, worker: Worker) -> None:
    trial.finished_at = utcnow()
    trial.phase = None
    trial.metrics = {name: m.model_dump() for name, m in result.metrics.items()}
    trial.correctness = result.correctness
    trial.compile_report = result.compile_report
    trial.environment = result.environment
    trial.timings = result.timings
    trial.log = result.log[-100_000:]
    trial.message = result.message[:10_000]
    trial.fingerprint = worker.fingerprint
    if result.status == "failed":
        trial.state = "failed"
        trial.failure_reason = (result.failure_reason or wire.FailureReason.ERROR).value
        return
    problem = _metric_problem(study, result)
    if problem:
        trial.state, trial.failure_reason = "failed", wire.FailureReason.ERROR.value
        trial.message = f"{problem}. {trial.message}".strip()
        return
    trial.state = "completed"
    trial.values = {o["name"]: float(result.metrics[o["name"]].value) for o in study.objectives}
    trial.constraint_values = _constraint_values(study, result)
    trial.feasible = all(v <= 0 for v in trial.constraint_values or [])
    if trial.constraint_values is not None and not trial.constraint_values:
        trial.constraint_values = None


def _metric_problem(study: Study, result: wire.TrialResult) -> str | None:
    needed = [o["name"] for o in study.objectives] + [c["metric"] for c in study.document["constraints"]]
    for name in needed:
        metric = result.metrics.get(name)
        if metric is None:
            return f"the worker reported no value for {name!r}"
        if not math.isfinite(metric.value):
            return f"{name!r} is not a finite number ({metric.value})"
    return None


def _constraint_values(study: Study, result: wire.TrialResult) -> list[float]:
    values = []
    for constraint in study.document["constraints"]:
        measured = result.metrics[constraint["metric"]].value
        limit = constraint["value"]
        values.append(measured - limit if constraint["op"] == "<=" else limit - measured)
    return values


def expire_leases(session: Session, cache: scheduler.MirrorCache, limit: int = 200) -> set[str]:
    """Hand expired leases back to the queue, or fail them once attempts are used up.
    Returns the pools that got trials back."""
    stmt = (
        select(Trial.id, Trial.study_id)
        .where(Trial.state == "running", Trial.lease_expires_at < utcnow())
        .order_by(Trial.lease_expires_at)
        .limit(limit)
    )
    expired = session.execute(stmt).all()
    pools = set()
    for study_id in sorted({row.study_id for row in expired}):
        study = lock_study(session, study_id)
        assert study is not None
        rows = session.execute(
            select(Trial).where(
                Trial.study_id == study_id, Trial.state == "running", Trial.lease_expires_at < utcnow()
            )
        ).scalars().all()
        for trial in rows:
            _expire_one(session, study, trial)
        studies.refill(session, cache, study)
        pools.add(study.pool)
    return pools


def _expire_one(session: Session, study: Study, trial: Trial) -> None:
    trial.lease_token = None
    trial.lease_expires_at = None
    trial.worker_id = None
    trial.phase = None
    trial.seq = next_seq(session)
    if trial.attempt >= trial.max_attempts:
        trial.state = "failed"
        trial.failure_reason = wire.FailureReason.LEASE_EXPIRED.value
        trial.message = f"lease expired {trial.attempt} times; no worker finished this trial"
        trial.finished_at = utcnow()
        study.n_failed += 1
    elif study.state == "paused":
        trial.state = "paused"
    elif study.state == "running":
        trial.state = "queued"
    else:
        trial.state = "cancelled"
        trial.failure_reason = wire.FailureReason.CANCELLED.value
        trial.finished_at = utcnow()
        study.n_cancelled += 1


def check_wall_time(session: Session, cache: scheduler.MirrorCache) -> None:
    """Finish running studies whose wall-time limit has passed."""
    candidates = session.execute(
        select(Study).where(Study.state.in_(("running", "paused")), Study.wall_time_s.is_not(None))
    ).scalars().all()
    for candidate in candidates:
        if studies.past_wall_time(candidate):
            study = lock_study(session, candidate.id)
            if study is not None:
                studies.settle(session, study)


def lease_reply(trial: Trial, study: Study, settings: Settings) -> dict[str, Any]:
    assert trial.lease_token is not None and trial.lease_expires_at is not None
    return wire.Lease(
        token=trial.lease_token,
        expires_at=trial.lease_expires_at,
        lease_s=settings.lease_s,
        heartbeat_s=settings.heartbeat_s,
        trial=trial_spec(trial, study),
    ).model_dump(mode="json")

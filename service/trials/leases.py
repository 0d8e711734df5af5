"""The trial queue: leases, heartbeats, results and the expiry of abandoned leases.

Leasing pops the oldest queued trial of the worker's pool in one statement (`FOR UPDATE
SKIP LOCKED` on Postgres, so concurrent workers never take the same row) and does nothing
else. A result is one short transaction on its trial row and takes no study-wide lock: the
study's scheduling step accounts for it later. Results are accepted only for the live
lease's token and are idempotent per token.
"""

from __future__ import annotations

import functools
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Select, Update, bindparam, select, update
from sqlalchemy.orm import Session

from service.config import Settings
from service.domain import results
from service.domain.states import TRIAL_FINISHED, StudyState, TrialState, after_expired_lease
from service.errors import Conflict
from service.scheduling import screening
from service.store.db import is_postgres, lock_study
from service.store.models import TRIALS, Study, Trial, as_utc, utcnow
from service.store.storable import storable, storable_text
from service.studies.lifecycle import past_wall_time
from service.trials.transitions import move, move_params, move_statement
from service.workers.registry import WorkerDirectory, WorkerInfo
from wire import contract as wire


@dataclass(frozen=True)
class Screen:
    """A study's screening stage: what it measures and how."""

    objectives: list[str]
    measure: wire.MeasureSettings


@dataclass(frozen=True)
class StudySpec:
    """What leases and results need of a study: its document never changes after creation."""

    objectives: list[dict[str, str]]
    constraints: list[dict[str, Any]]
    kernel: wire.KernelSpec
    measure: wire.MeasureSettings
    limits: dict[str, Any]
    screen: Screen | None = None
    compile_only: bool = False


class StudySpecs:
    """A small per-process cache of StudySpec by study id."""

    def __init__(self, capacity: int = 1024) -> None:
        self.capacity = capacity
        self._specs: OrderedDict[int, StudySpec] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, session: Session, study_id: int) -> StudySpec:
        with self._lock:
            spec = self._specs.get(study_id)
            if spec is not None:
                self._specs.move_to_end(study_id)
                return spec
        document = session.execute(select(Study.document).where(Study.id == study_id)).scalar_one()
        full, screen = screening.screen_measure(document["measure"])
        spec = StudySpec(
            objectives=document["objectives"],
            constraints=document["constraints"],
            kernel=wire.KernelSpec.model_validate(document["kernel"]),
            measure=wire.MeasureSettings.model_validate(full),
            limits=document["limits"],
            screen=None if screen is None else Screen(document["measure"]["screen"]["objectives"],
                                                      wire.MeasureSettings.model_validate(screen)),
            compile_only=bool(document.get("compile_only", False)),
        )
        with self._lock:
            self._specs[study_id] = spec
            while len(self._specs) > self.capacity:
                self._specs.popitem(last=False)
        return spec


@dataclass(frozen=True)
class QueueKey:
    """What a worker can lease: its pool's trials and jobs of its backends (with energy
    measurement or without, on a GPU or compile-only)."""

    pool: str
    backends: tuple[str, ...]
    energy: bool
    gpu: bool = True

    @classmethod
    def of(cls, worker: WorkerInfo) -> QueueKey:
        return cls(worker.pool, worker.backends, worker.energy, worker.gpu)


class EmptyQueues:
    """Queues this replica found empty for workers of one kind (QueueKey). A trial queued
    later wakes as many waiting long-polls of its pool as trials were queued
    (Notifier.notify_some); a long-poll whose timer runs out looks at the database again
    only when that may have missed one: a pool notification found fewer waiters than it
    announced trials (locally or through Redis) after the empty look, or that look is older
    than `period_s` (other replicas without Redis). So hundreds of idle workers of a kind
    cost one query per period, not one each, and the scheduling steps that refill the
    queue are not crowded out."""

    def __init__(self, period_s: float) -> None:
        self.period_s = period_s
        self._empty: dict[QueueKey, tuple[int, float]] = {}  # -> (unanswered wake-ups then, when)

    def known_empty(self, queue: QueueKey, unanswered: int) -> bool:
        seen = self._empty.get(queue)
        return seen is not None and seen[0] == unanswered and time.monotonic() - seen[1] < self.period_s

    def found_empty(self, queue: QueueKey, unanswered_before: int) -> None:
        """Nothing for `queue` in a look that began when `unanswered_before` wake-ups had
        gone unanswered."""
        self._empty[queue] = (unanswered_before, time.monotonic())


@dataclass(frozen=True)
class Leased:
    """A trial as a lease hands it out."""

    id: int
    study_id: int
    number: int
    attempt: int
    is_baseline: bool
    config: dict[str, Any]
    lease_token: str
    lease_expires_at: datetime
    stage: wire.Stage | None = None


def acquire(session: Session, worker: WorkerInfo, settings: Settings) -> Leased | None:
    """Lease the oldest queued trial of the worker's pool that the worker can run: one
    statement (the row is picked and locked with SKIP LOCKED on Postgres)."""
    now = utcnow()
    params = move_params(session, TrialState.RUNNING, lease_token=secrets.token_urlsafe(32),
                         lease_expires_at=now + timedelta(seconds=settings.lease_s), worker_id=worker.id,
                         started_at=now, phase="leased")
    row = session.execute(_lease_statement(is_postgres(session), worker.energy, worker.gpu),
                          {"w_pool": worker.pool, "w_backends": list(worker.backends), **params}).one_or_none()
    return Leased(*row) if row is not None else None


@functools.cache
def _lease_statement(postgres: bool, energy: bool, gpu: bool) -> Update:
    c = TRIALS.c
    candidate = (
        select(c.id)
        .where(c.pool == bindparam("w_pool"), c.state == TrialState.QUEUED.value,
               c.backend.in_(bindparam("w_backends", expanding=True)))
        .order_by(c.id)
        .limit(1)
    )
    if not energy:
        candidate = candidate.where(c.requires_energy.is_(False))
    if not gpu:
        candidate = candidate.where(c.requires_gpu.is_(False))
    if postgres:
        candidate = candidate.with_for_update(skip_locked=True)
    return move_statement(
        postgres, TrialState.QUEUED, TrialState.RUNNING, c.id == candidate.scalar_subquery(),
        ("lease_token", "lease_expires_at", "worker_id", "started_at", "phase"), attempt=c.attempt + 1,
    ).returning(c.id, c.study_id, c.number, c.attempt, c.is_baseline, c.config, c.lease_token,
                c.lease_expires_at, c.stage)


def lease_reply(trial: Leased, spec: StudySpec, settings: Settings,
                acfs: list[wire.ControlsFile] | None = None) -> wire.Lease:
    objectives, measure = [o["name"] for o in spec.objectives], spec.measure
    if trial.stage == "screen" and spec.screen is not None:
        objectives, measure = spec.screen.objectives, spec.screen.measure
    return wire.Lease(
        token=trial.lease_token,
        expires_at=as_utc(trial.lease_expires_at),  # SQLite returns it without its zone
        lease_s=settings.lease_s,
        heartbeat_s=settings.heartbeat_s,
        trial=wire.TrialSpec(
            trial_id=trial.id,
            study_id=trial.study_id,
            number=trial.number,
            attempt=trial.attempt,
            is_baseline=trial.is_baseline,
            kernel=spec.kernel,
            config=trial.config,
            objectives=objectives,
            compile_timeout_s=spec.limits["compile_timeout_s"],
            run_timeout_s=spec.limits["run_timeout_s"],
            measure=measure,
            stage=trial.stage,
            sandbox=wire.SandboxLimits.model_validate(spec.limits.get("sandbox") or {}),
            compile_only=spec.compile_only,
            acfs=acfs or [],
        ),
    )


@dataclass(frozen=True)
class Held:
    """A lease token's trial, read under its row lock."""

    id: int
    study_id: int
    state: str
    worker_id: int
    lease_expires_at: datetime | None
    stage: str | None = None


def held_trial(session: Session, token: str, token_id: int, workers: WorkerDirectory) -> tuple[Held, WorkerInfo]:
    """The trial of a lease token and its worker, if that worker runs under API token
    `token_id` (several agents may share one worker token). Locked on Postgres."""
    row = session.execute(_held_statement(is_postgres(session)), {"w_token": token}).one_or_none()
    worker = workers.get(session, row.worker_id) if row is not None and row.worker_id else None
    if row is None or worker is None or worker.token_id != token_id:
        raise Conflict("unknown lease: it expired and was handed to another worker, or never existed",
                       field="token")
    return Held(row.id, row.study_id, row.state, worker.id, row.lease_expires_at, row.stage), worker


@functools.cache
def _held_statement(postgres: bool) -> Select[Any]:
    c = TRIALS.c
    stmt = select(c.id, c.study_id, c.state, c.worker_id, c.lease_expires_at, c.stage).where(
        c.lease_token == bindparam("w_token"))
    return stmt.with_for_update() if postgres else stmt


def _check_live(trial: Held, message: str) -> None:
    expires = trial.lease_expires_at and as_utc(trial.lease_expires_at)
    if trial.state != TrialState.RUNNING or expires is None or expires < utcnow():
        raise Conflict(message, field="token")


def heartbeat(session: Session, trial: Held, phase: str | None, settings: Settings) -> wire.HeartbeatResponse:
    _check_live(trial, "the lease has expired; drop this trial")
    expires = utcnow() + timedelta(seconds=settings.lease_s)
    values: dict[str, Any] = {"lease_expires_at": expires}
    if phase:
        values["phase"] = storable_text(phase[:32])
    session.execute(update(Trial).where(Trial.id == trial.id).values(**values))
    state = session.execute(select(Study.state).where(Study.id == trial.study_id)).scalar_one_or_none()
    # a paused study lets running trials finish; a cancelled or failed one wants them stopped
    cancel = state is None or state in (StudyState.CANCELLED, StudyState.FAILED)
    return wire.HeartbeatResponse(expires_at=expires, cancel=cancel)


def record_result(session: Session, trial: Held, spec: StudySpec, worker: WorkerInfo,
                  result: wire.TrialResult) -> wire.ResultAck:
    """Store a worker's result on its trial row: one statement. Idempotent per lease token.
    A screening stage's result makes the trial screened (its study's step decides on it)."""
    if _recorded(trial):
        return wire.ResultAck(trial_id=trial.id, state=trial.state, duplicate=True)
    _check_live(trial, "the lease has expired; the trial was handed back to the queue")
    fields: dict[str, Any] = storable(dict(
        metrics={name: m.model_dump() for name, m in result.metrics.items()},
        correctness=result.correctness,
        compile_report=result.compile_report,
        environment=result.environment,
        timings=result.timings,
        log=result.log[-100_000:],
        message=result.message[:10_000],
    ))
    fields.update(phase=None, fingerprint=worker.fingerprint)
    state = TrialState.COMPLETED
    if result.status == "failed":
        state, fields["failure_reason"] = TrialState.FAILED, (result.failure_reason or wire.FailureReason.ERROR).value
    elif trial.stage == "screen" and spec.screen is not None:
        state = _screened(spec.screen, worker, result, fields)
    else:
        try:
            outcome = results.evaluate(spec.objectives, spec.constraints,
                                       {name: m.value for name, m in result.metrics.items()})
        except results.Unusable as exc:
            fields["message"] = f"{exc}. {fields['message']}".strip()
            state, fields["failure_reason"] = TrialState.FAILED, wire.FailureReason.ERROR.value
        else:
            fields.update(values=outcome.values, constraint_values=outcome.constraint_values,
                          feasible=outcome.feasible)
    session.execute(_result_statement(is_postgres(session), state, tuple(sorted(fields))),
                    {"w_id": trial.id, **move_params(session, state, **fields)})
    return wire.ResultAck(trial_id=trial.id, state=state.value)


@functools.lru_cache(maxsize=64)
def _result_statement(postgres: bool, state: TrialState, columns: tuple[str, ...]) -> Update:
    """The statement of a result that sets `columns` (each kind of result sets its own)."""
    return move_statement(postgres, TrialState.RUNNING, state, TRIALS.c.id == bindparam("w_id"), columns)


def _recorded(trial: Held) -> bool:
    """Whether the token's result is already on the row: the trial finished, or its screen
    reported (a promoted trial keeps its screen's token until its full stage is leased)."""
    if trial.state in TRIAL_FINISHED or trial.state == TrialState.SCREENED:
        return True
    return trial.stage == "full" and trial.state in (TrialState.QUEUED, TrialState.PAUSED)


def _screened(screen: Screen, worker: WorkerInfo, result: wire.TrialResult, fields: dict[str, Any]) -> TrialState:
    """A screening result's fields: the screened metrics with their intervals (never objective
    values); a result without them fails the trial as a full one would."""
    try:
        results.evaluate([{"name": name} for name in screen.objectives], [],
                         {name: m.value for name, m in result.metrics.items()})
    except results.Unusable as exc:
        fields["message"] = f"{exc}. {fields['message']}".strip()
        fields["failure_reason"] = wire.FailureReason.ERROR.value
        return TrialState.FAILED
    chosen = {name: result.metrics[name] for name in screen.objectives}
    intervals = {name: screening.Interval.of(m.model_dump()) for name, m in chosen.items()}
    fields["screening"] = storable(dict(
        values={name: i.value for name, i in intervals.items()},
        intervals={name: [i.low, i.high] for name, i in intervals.items()},
        units={name: m.unit for name, m in chosen.items()},
        worker_id=worker.id,
        timings=result.timings,
        promoted=None, dominated_by=None, told=None, reason=None,
    ))
    return TrialState.SCREENED


def expire_leases(session: Session, limit: int = 200) -> tuple[set[int], set[str]]:
    """Hand expired leases back to the queue, or fail them once attempts are used up.
    Returns the studies touched (their steps have work) and the pools that got trials back."""
    expired = session.execute(
        select(Trial.study_id)
        .where(Trial.state == TrialState.RUNNING.value, Trial.lease_expires_at < utcnow())
        .order_by(Trial.lease_expires_at).limit(limit)
    ).scalars().all()
    pools: set[str] = set()
    touched: set[int] = set()
    for study_id in sorted(set(expired)):
        study = lock_study(session, study_id)
        assert study is not None
        stmt = select(Trial).where(Trial.study_id == study_id, Trial.state == TrialState.RUNNING.value,
                                   Trial.lease_expires_at < utcnow())
        if is_postgres(session):
            stmt = stmt.with_for_update()
        for trial in session.execute(stmt).scalars():
            target = after_expired_lease(trial.attempt, trial.max_attempts, study.state)
            fields: dict[str, Any] = dict(lease_token=None, lease_expires_at=None, worker_id=None, phase=None)
            if target == TrialState.FAILED:
                fields.update(failure_reason=wire.FailureReason.LEASE_EXPIRED.value,
                              message=f"lease expired {trial.attempt} times; no worker finished this trial")
            elif target == TrialState.CANCELLED:
                fields.update(failure_reason=wire.FailureReason.CANCELLED.value)
            move(session, trial, target, **fields)
            if target == TrialState.QUEUED:
                pools.add(study.pool)
        touched.add(study_id)
    return touched, pools


def wall_time_over(session: Session) -> list[int]:
    """Running or paused studies past their wall-time limit (their steps settle them)."""
    candidates = session.execute(
        select(Study).where(Study.state.in_(("running", "paused")), Study.wall_time_s.is_not(None))
    ).scalars().all()
    return [s.id for s in candidates if past_wall_time(s)]


"""Prometheus metrics: series read from the database at scrape time, plus request latencies.

Series read from the database are the same on every replica (aggregate them with `max`, not
`sum`); the latency histograms are each replica's own (aggregate with `sum`). Every query is
bounded: counts of finished trials come from the studies' counters, the trials table is read
only through its state index (active and failed trials) or its newest rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import case, func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from service.domain.states import TRIAL_FINISHED, TrialState
from service.store.db import Database
from service.store.models import Study, Trial, Worker, as_utc, utcnow

ACTIVE_STATES = tuple(s.value for s in TrialState if s not in TRIAL_FINISHED)
FINISHED_COLUMNS = {TrialState.COMPLETED.value: Study.n_completed, TrialState.FAILED.value: Study.n_failed,
                    TrialState.CANCELLED.value: Study.n_cancelled, TrialState.SCREENED_OUT.value: Study.n_screened_out}
LIVE_WORKER_S = 120.0  # a worker that spoke within this long is live (it long-polls every ~10 s)
POWER_WINDOW_S = 600.0  # power of trials finished this recently
POWER_RECENT_TRIALS = 500  # newest trials read for power


class _DatabaseCollector(Collector):
    def __init__(self, db: Database) -> None:
        self.db = db

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("paretune_database_up", "Whether this replica could read the database at scrape time")
        try:
            with self.db.read() as session:
                families = list(_database_families(session, utcnow()))
        except SQLAlchemyError:
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from families


def _database_families(session: Session, now: datetime) -> Iterator[Metric]:
    yield _studies(session)
    finished = _finished_by_pool(session)
    yield _trials(session, finished)
    yield _trials_finished(finished)
    yield _failures(session)
    yield _queue_depth(session)
    yield from _workers(session, now)
    yield _power(session, now)


def _studies(session: Session) -> Metric:
    family = GaugeMetricFamily("paretune_studies", "Studies by state", labels=["state"])
    for state, count in session.execute(select(Study.state, func.count()).group_by(Study.state)):
        family.add_metric([state], count)
    return family


def _finished_by_pool(session: Session) -> dict[tuple[str, str], int]:
    """Finished trials per (pool, state), summed from the studies' counters (one row per
    study, not per trial), which each study's scheduling step advances as it accounts for
    results (within about a second of them, at most `step_hold_s`)."""
    columns = [func.coalesce(func.sum(column), 0) for column in FINISHED_COLUMNS.values()]
    counts: dict[tuple[str, str], int] = {}
    for pool, *sums in session.execute(select(Study.pool, *columns).group_by(Study.pool)):
        for state, total in zip(FINISHED_COLUMNS, sums, strict=True):
            counts[(pool, state)] = int(total)
    return counts


def _trials(session: Session, finished: dict[tuple[str, str], int]) -> Metric:
    family = GaugeMetricFamily("paretune_trials", "Trials by state", labels=["state"])
    totals = dict.fromkeys(FINISHED_COLUMNS, 0)
    for (_, state), count in finished.items():
        totals[state] += count
    active = select(Trial.state, func.count()).where(Trial.state.in_(ACTIVE_STATES)).group_by(Trial.state)
    totals.update({state: count for state, count in session.execute(active)})
    for state, count in totals.items():
        family.add_metric([state], count)
    return family


def _trials_finished(finished: dict[tuple[str, str], int]) -> Metric:
    family = CounterMetricFamily("paretune_trials_finished", "Trials finished, per worker pool and final state",
                                 labels=["pool", "state"])
    for (pool, state), count in sorted(finished.items()):
        family.add_metric([pool, state], count)
    return family


def _failures(session: Session) -> Metric:
    family = CounterMetricFamily("paretune_trial_failures", "Failed trials, per worker pool and failure reason",
                                 labels=["pool", "reason"])
    stmt = (select(Trial.pool, Trial.failure_reason, func.count())
            .where(Trial.state == TrialState.FAILED.value).group_by(Trial.pool, Trial.failure_reason))
    for pool, reason, count in session.execute(stmt):
        family.add_metric([pool, reason or "unknown"], count)
    return family


def _queue_depth(session: Session) -> Metric:
    family = GaugeMetricFamily("paretune_queue_depth", "Queued trials per worker pool", labels=["pool"])
    stmt = select(Trial.pool, func.count()).where(Trial.state == TrialState.QUEUED.value).group_by(Trial.pool)
    for pool, count in session.execute(stmt):
        family.add_metric([pool], count)
    return family


def _workers(session: Session, now: datetime) -> Iterator[Metric]:
    registered = GaugeMetricFamily("paretune_workers", "Registered workers per pool (every agent start registers one)",
                                   labels=["pool"])
    live = GaugeMetricFamily("paretune_workers_live", f"Workers per pool heard from in the last {LIVE_WORKER_S:.0f} s",
                             labels=["pool"])
    age = GaugeMetricFamily("paretune_worker_last_seen_age_seconds",
                            "Seconds since any worker of the pool last leased, heartbeat or reported", labels=["pool"])
    cutoff = now - timedelta(seconds=LIVE_WORKER_S)
    is_live = func.sum(case((Worker.last_seen_at >= cutoff, 1), else_=0))
    stmt = select(Worker.pool, func.count(), is_live, func.max(Worker.last_seen_at)).group_by(Worker.pool)
    for pool, count, live_count, last_seen in session.execute(stmt):
        registered.add_metric([pool], count)
        live.add_metric([pool], int(live_count or 0))
        age.add_metric([pool], max(0.0, (now - as_utc(last_seen)).total_seconds()))
    yield from (registered, live, age)


def _power(session: Session, now: datetime) -> Metric:
    """power_w of each worker's latest trial that measured it: the GPU (or CPU package)
    power a worker's measurements ran at, read from the newest trials only."""
    family = GaugeMetricFamily(
        "paretune_power_watts", f"power_w of each worker's latest trial that measured it, last {POWER_WINDOW_S:.0f} s",
        labels=["pool", "worker"])
    recent = (select(Trial.pool, Trial.worker_id, Trial.finished_at, Trial.metrics)
              .where(Trial.state == TrialState.COMPLETED.value).order_by(Trial.id.desc()).limit(POWER_RECENT_TRIALS))
    latest: dict[tuple[str, int], tuple[datetime, float]] = {}
    cutoff = now - timedelta(seconds=POWER_WINDOW_S)
    for pool, worker_id, finished_at, metrics in session.execute(recent):
        watts = _power_w(metrics)
        if worker_id is None or finished_at is None or watts is None or as_utc(finished_at) < cutoff:
            continue
        key = (pool, worker_id)
        if key not in latest or as_utc(finished_at) > latest[key][0]:
            latest[key] = (as_utc(finished_at), watts)
    worker_ids = sorted({worker_id for _, worker_id in latest})
    rows = session.execute(select(Worker.id, Worker.name).where(Worker.id.in_(worker_ids)))
    names = {row.id: row.name for row in rows}
    for (pool, worker_id), (_, watts) in sorted(latest.items()):
        family.add_metric([pool, f"{names.get(worker_id, 'worker')}#{worker_id}"], watts)
    return family


def _power_w(metrics: dict[str, Any] | None) -> float | None:
    value = (metrics or {}).get("power_w", {}).get("value") if isinstance(metrics, dict) else None
    return float(value) if isinstance(value, int | float) else None


def step_histogram(registry: CollectorRegistry) -> Histogram:
    return Histogram(
        "paretune_step_seconds", "Time one scheduling step holds its study's lock (tell, front, ask)",
        registry=registry, buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
    )


class Metrics:
    def __init__(self, db: Database) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_DatabaseCollector(db))
        self.lease_seconds = Histogram(
            "paretune_lease_seconds", "Time to take one lease from the queue (database work only)",
            registry=self.registry, buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1),
        )
        self.result_seconds = Histogram(
            "paretune_result_seconds", "Time to record one result (one trial row)",
            registry=self.registry, buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
        )
        self.step_seconds = step_histogram(self.registry)
        self.write_lock_seconds = Histogram(
            "paretune_write_lock_seconds", "Time a transaction holds SQLite's single write lock (embedded only)",
            registry=self.registry, buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
        )
        db.on_write_lock_held = self.write_lock_seconds.observe
        self._redis_up: Gauge | None = None  # made when a Redis is configured: no series otherwise

    def observe_redis(self, reachable: bool | None) -> None:
        """Redis's reachability as this replica last saw it (None: no Redis configured)."""
        if reachable is None:
            return
        if self._redis_up is None:
            self._redis_up = Gauge("paretune_redis_up", "Whether this replica reached Redis at its last check "
                                   "(serving goes on without it; wake-ups across replicas then poll)",
                                   registry=self.registry)
        self._redis_up.set(1 if reachable else 0)

    def render(self) -> bytes:
        return generate_latest(self.registry)

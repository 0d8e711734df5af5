"""Prometheus metrics: counts read from the database at scrape time, plus lease latency."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from service.store.db import Database
from service.store.models import Study, Trial, Worker


class _DatabaseCollector(Collector):
    def __init__(self, db: Database) -> None:
        self.db = db

    def collect(self) -> Iterator[GaugeMetricFamily]:
        studies = GaugeMetricFamily("paretune_studies", "Studies by state", labels=["state"])
        trials = GaugeMetricFamily("paretune_trials", "Trials by state", labels=["state"])
        queue = GaugeMetricFamily("paretune_queue_depth", "Queued trials per worker pool", labels=["pool"])
        workers = GaugeMetricFamily("paretune_workers", "Registered workers per pool", labels=["pool"])
        with self.db.read() as session:
            for state, count in session.execute(select(Study.state, func.count()).group_by(Study.state)):
                studies.add_metric([state], count)
            for state, count in session.execute(select(Trial.state, func.count()).group_by(Trial.state)):
                trials.add_metric([state], count)
            depth = select(Trial.pool, func.count()).where(Trial.state == "queued").group_by(Trial.pool)
            for pool, count in session.execute(depth):
                queue.add_metric([pool], count)
            for pool, count in session.execute(select(Worker.pool, func.count()).group_by(Worker.pool)):
                workers.add_metric([pool], count)
        yield from (studies, trials, queue, workers)


class Metrics:
    def __init__(self, db: Database) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_DatabaseCollector(db))
        self.lease_seconds = Histogram(
            "paretune_lease_seconds", "Time to take one lease from the queue (database work only)",
            registry=self.registry, buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1),
        )
        self.result_seconds = Histogram(
            "paretune_result_seconds", "Time to record one result (tell, front, refill)",
            registry=self.registry, buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)

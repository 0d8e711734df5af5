"""The FastAPI application: wiring, error handling and background upkeep.

Routers depend on service.api.deps, never on this module."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool

from service.accounts import router as accounts
from service.api import ops
from service.api.deps import AppState
from service.artifacts import router as artifacts
from service.config import Settings
from service.controls import router as controls
from service.controls.catalog import ControlsCatalog
from service.http import BodyLimit, install_error_handlers
from service.metrics import Metrics
from service.notify import Channel, Notifier, postgres_dsn, stop_tasks
from service.scheduling.loop import Scheduler
from service.scheduling.mirror import MirrorCache
from service.store.db import Database
from service.store.migrate import prepare_schema
from service.studies import router as studies
from service.studies.lifecycle import wall_time_over
from service.trials import retention
from service.trials import router as trials
from service.web import mount_dashboard
from service.workers import router as workers

log = logging.getLogger("paretune.service")


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings.from_env()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        db = Database(settings.database_url, settings.db_pool_size)
        await run_in_threadpool(prepare_schema, db.engine, settings.migrate_on_start)
        notifier = Notifier(settings.redis_url, postgres_dsn(settings.database_url))
        await notifier.start()
        cache = MirrorCache(catalog=ControlsCatalog(settings.controls_catalog), capacity=settings.sampler_cache)
        metrics = Metrics(db)
        scheduler = Scheduler(db, cache, notifier, settings, observe=metrics.step_seconds.observe)
        state = AppState(settings, db, cache, notifier, metrics, scheduler)
        db.send_effects_to(notifier, scheduler, state.shares)
        # trials a scheduler process or another replica queued: this replica's lease order has their study lease again
        notifier.on(Channel.QUEUED, lambda channel: state.shares.queued((Channel.queued_study(channel),)))
        notifier.on(Channel.SHARES, lambda channel: state.shares.read_soon())  # the operator changed a pool
        app.state.paretune = state
        state.shares.start()
        if not settings.scheduler_process:  # else its wake-ups go to the scheduler process
            await scheduler.start()
        upkeep = asyncio.create_task(_upkeep(state))
        # What exists now (modules, the app, the database engine) lives as long as the
        # process: out of the collector's sight, a full collection pauses the process (and
        # any study lock a step holds) for milliseconds instead of a tenth of a second.
        gc.collect()
        gc.freeze()
        try:
            yield
        finally:
            await stop_tasks(upkeep)
            await run_in_threadpool(state.shares.stop)
            await scheduler.stop()
            await notifier.stop()
            db.dispose()  # waits for the steps in flight
            cache.clear()  # the mirrors, and their working directories

    app = FastAPI(
        title="paretune",
        version="1",
        description="Multi-objective Pareto tuning of GPU kernel compile configurations.",
        lifespan=lifespan,
    )
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    install_error_handlers(app)
    # the worker protocol first: a request is matched against the routes in this order, and
    # leases and results are most of the traffic
    for module in (workers, studies, trials, artifacts, controls, accounts, ops):
        app.include_router(module.router)
    app.include_router(studies.compare_router)
    mount_dashboard(app, Path(__file__).parent / "web" / "static")
    return app


async def _upkeep(state: AppState) -> None:
    """Expire abandoned leases of every kind of work, enforce wall-time limits (so that
    studies finish even when no worker is polling) and apply the trials' retention."""
    while True:
        await asyncio.sleep(state.settings.reaper_interval_s)
        try:
            state.scheduler.wake(*await state.db.run(_expire, state))
        except Exception:
            log.exception("upkeep failed; retrying")


def _expire(state: AppState) -> list[int]:
    """Expire leases (what that wakes is sent when it commits), delete a batch of trials past
    retention; the studies past their wall time."""
    with state.db.write() as session:
        state.queue.expire(session)
    if state.settings.trial_retention_days is not None:
        with state.db.write() as session:
            retention.prune(session, state.settings.trial_retention_days)
    with state.db.read() as session:
        return wall_time_over(session)


"""A scheduler process: the studies' scheduling steps without an HTTP server.

Server processes started with `PARETUNE_SCHEDULER_PROCESS=true` do not step studies; they
send their wake-ups (`step:<id>`) through the notifier, over Postgres's LISTEN/NOTIFY or
Redis, and this process steps the studies and sends back `pool:` and `study:` wake-ups.
Its timer finds work whose wake-up was lost, and each step's study lock lets several
scheduler processes (or replicas that step their own studies) share the studies safely.
With a metrics port it serves its own `paretune_step_seconds` there (Prometheus text format,
any path), which server processes that step nothing do not have. Started by `paretune serve`,
it stops when its standard input closes: the server holds the other end, and even a server
killed outright closes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import threading

from prometheus_client import CollectorRegistry, start_http_server

from service.config import Settings
from service.controls.catalog import ControlsCatalog
from service.metrics import step_histogram
from service.notify import Notifier, postgres_dsn
from service.scheduling.loop import Scheduler
from service.scheduling.mirror import MirrorCache
from service.store.db import Database
from service.store.migrate import prepare_schema

log = logging.getLogger("paretune.scheduling")
POOL_SIZE = 8  # steady Postgres connections of a scheduler process: its steps and scans


async def run(settings: Settings, stop: asyncio.Event | None = None, metrics_port: int | None = None,
              exit_with_parent: bool = False) -> None:
    """Step studies until `stop` is set (SIGTERM or SIGINT when not given, or the end of
    standard input with `exit_with_parent`). Postgres only (`paretune scheduler` refuses SQLite)."""
    stop = stop or _stop_on_signals()
    if exit_with_parent:
        _stop_at_end_of_input(stop)
    registry = CollectorRegistry()
    step_seconds = step_histogram(registry)
    exporter = start_http_server(metrics_port, registry=registry)[0] if metrics_port is not None else None
    db = Database(settings.database_url, min(settings.db_pool_size, POOL_SIZE))
    await asyncio.get_running_loop().run_in_executor(None, prepare_schema, db.engine, settings.migrate_on_start)
    notifier = Notifier(settings.redis_url, postgres_dsn(settings.database_url))
    await notifier.start()
    cache = MirrorCache(catalog=ControlsCatalog(settings.controls_catalog), capacity=settings.sampler_cache)
    scheduler = Scheduler(db, cache, notifier, settings, observe=step_seconds.observe)
    db.send_effects_to(notifier, scheduler)
    await scheduler.start()
    scheduler.follow()
    gc.collect()
    gc.freeze()  # as in the server: what exists now lives as long as the process
    log.info("scheduler process stepping studies on %s", db.engine.url.render_as_string(hide_password=True))
    try:
        await stop.wait()
    finally:
        await scheduler.stop()
        await notifier.stop()
        db.dispose()
        if exporter is not None:
            exporter.shutdown()


def _stop_at_end_of_input(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()

    def watch() -> None:
        with contextlib.suppress(OSError):
            while os.read(0, 4096):  # nothing is ever written; b"" once the writer is gone
                pass
        log.warning("the process that started this scheduler is gone; stopping")
        with contextlib.suppress(RuntimeError):  # the loop is already closed: stopping anyway
            loop.call_soon_threadsafe(stop.set)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _stop_on_signals() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stop.set)
    return stop

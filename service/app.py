"""The FastAPI application: state, dependencies, error handling and background upkeep."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from service import leases, scheduler
from service.auth import Principal, authenticate
from service.config import Settings
from service.errors import ApiError, TooLarge
from service.metrics import Metrics
from service.notify import Notifier
from service.store.db import Database
from service.store.migrate import upgrade

log = logging.getLogger("paretune.service")


@dataclass
class AppState:
    settings: Settings
    db: Database
    cache: scheduler.MirrorCache
    notifier: Notifier
    metrics: Metrics


def get_state(request: Request) -> AppState:
    return request.app.state.paretune  # type: ignore[no-any-return]


StateDep = Annotated[AppState, Depends(get_state)]


async def get_principal(request: Request, state: StateDep) -> Principal:
    header = request.headers.get("authorization")

    def lookup() -> Principal:
        with state.db.read() as session:
            return authenticate(session, header)

    return await run_in_threadpool(lookup)


PrincipalDep = Annotated[Principal, Depends(get_principal)]


class BodyLimit:
    """Refuse request bodies over the limit before they are read into memory."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and int(length) > self.max_bytes:
            await _too_large(self.max_bytes)(scope, receive, send)
            return
        seen = 0

        async def limited() -> Any:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                raise TooLarge(f"the request body is over {self.max_bytes} bytes", field="body")
            return message

        await self.app(scope, limited, send)


def _too_large(limit: int) -> JSONResponse:
    error = TooLarge(f"the request body is over {limit} bytes; send a smaller document", field="body")
    return JSONResponse(error.body(), status_code=error.status)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings.from_env()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        db = Database(settings.database_url)
        await run_in_threadpool(upgrade, db.engine)
        notifier = Notifier(settings.redis_url)
        await notifier.start()
        state = AppState(settings, db, scheduler.MirrorCache(), notifier, Metrics(db))
        app.state.paretune = state
        upkeep = asyncio.create_task(_upkeep(state))
        try:
            yield
        finally:
            upkeep.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await upkeep
            await notifier.stop()
            db.dispose()

    app = FastAPI(
        title="paretune",
        version="1",
        description="Multi-objective Pareto tuning of GPU kernel compile configurations.",
        lifespan=lifespan,
    )
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)

    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {"field": ".".join(str(p) for p in e["loc"] if p != "body"), "message": e["msg"]}
            for e in exc.errors()
        ]
        summary = "; ".join(f"{e['field'] or 'body'}: {e['message']}" for e in errors[:5])
        body = {"error": {"code": "invalid", "message": summary, "field": errors[0]["field"] if errors else None,
                          "errors": errors}}
        return JSONResponse(body, status_code=422)

    from service.api import admin, ops, studies, workers

    for module in (studies, workers, admin, ops):
        app.include_router(module.router)
    from service.web import mount_dashboard

    mount_dashboard(app, Path(__file__).parent / "web" / "static")
    return app


async def _upkeep(state: AppState) -> None:
    """Expire abandoned leases and enforce wall-time limits, so that studies finish even
    when no worker is polling."""
    while True:
        await asyncio.sleep(state.settings.reaper_interval_s)
        try:
            await run_in_threadpool(_upkeep_once, state)
        except Exception:
            log.exception("upkeep failed; retrying")


def _upkeep_once(state: AppState) -> None:
    pools = write_with_study(state, lambda s: leases.expire_leases(s, state.cache))
    state.notifier.notify(*(f"pool:{pool}" for pool in pools))
    write_with_study(state, lambda s: leases.check_wall_time(s, state.cache))


def write_with_study(state: AppState, work: Callable[[Any], Any], study_id: int | None = None) -> Any:
    """Run `work(session)` in a write transaction; if it fails, drop sampler mirrors that
    may have seen uncommitted asks."""
    try:
        with state.db.write() as session:
            return work(session)
    except ApiError:
        raise  # refused before any sampler was asked: the mirrors are untouched
    except Exception:
        if study_id is None:
            state.cache = scheduler.MirrorCache(state.cache.capacity)
        else:
            state.cache.drop(study_id)
        raise


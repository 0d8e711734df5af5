"""Liveness, readiness and Prometheus metrics (no authentication: they reveal no team's data).

`/livez` answers while the process serves requests: it depends on nothing else, so a database
or Redis outage never restarts a replica. `/healthz` is readiness: 200 while the database
answers, whatever Redis does (Redis only speeds up wake-ups; without it replicas poll), with
Redis's state in the body and in `paretune_redis_up`; 503 only when the database does not answer.
"""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy import text

from service.api.deps import AppState, StateDep

router = APIRouter(tags=["operations"])


def _database_ok(state: AppState) -> bool:
    try:
        with state.db.read() as session:
            session.execute(text("SELECT 1"))
        return True
    except Exception:
        return False


@router.get("/livez")
async def livez() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/healthz")
async def healthz(state: StateDep) -> JSONResponse:
    db_ok = await state.db.run(_database_ok, state)
    redis_ok = await state.notifier.ping()
    state.metrics.observe_redis(redis_ok)
    body = {"status": "ok" if db_ok and redis_ok is not False else "degraded", "database": db_ok,
            "redis": "not configured" if redis_ok is None else redis_ok}
    return JSONResponse(body, status_code=200 if db_ok else 503)


@router.get("/metrics")
async def metrics(state: StateDep) -> Response:
    state.metrics.observe_redis(await state.notifier.ping())
    payload = await state.db.run(state.metrics.render)
    return Response(payload, media_type=CONTENT_TYPE_LATEST)

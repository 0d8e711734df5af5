"""Health and Prometheus metrics (no authentication: they reveal no team's data)."""

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


@router.get("/healthz")
async def healthz(state: StateDep) -> JSONResponse:
    db_ok = await state.db.run(_database_ok, state)
    redis_ok = await state.notifier.ping()
    healthy = db_ok and redis_ok is not False
    body = {"status": "ok" if healthy else "degraded", "database": db_ok,
            "redis": "not configured" if redis_ok is None else redis_ok}
    return JSONResponse(body, status_code=200 if healthy else 503)


@router.get("/metrics")
async def metrics(state: StateDep) -> Response:
    payload = await state.db.run(state.metrics.render)
    return Response(payload, media_type=CONTENT_TYPE_LATEST)

"""Studies, their trials, fronts and live events."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator, Sequence
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Header, Query, Request
from fastapi.responses import StreamingResponse
from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from service import studies as study_ops
from service.api.schemas import (
    FrontOut,
    HistoryPoint,
    StudyList,
    StudyOut,
    TrialDetail,
    TrialOut,
    TrialPage,
    trial_out,
)
from service.app import PrincipalDep, StateDep, write_with_study
from service.auth import Principal
from service.errors import Invalid, NotFound
from service.store.models import Study, Trial

router = APIRouter(prefix="/v1/studies", tags=["studies"])

KEEPALIVE_S = 15.0
TRIAL_STATES = ("queued", "paused", "running", "completed", "failed", "cancelled")
STUDY_STATES = ("running", "paused", "completed", "cancelled", "failed")


def visible_study(session: Session, principal: Principal, study_id: int) -> Study:
    """The study if the caller's team owns it; another team's study does not exist (404)."""
    principal.require("viewer")
    study = session.get(Study, study_id)
    if study is None or study.team_id != principal.team_id:
        raise NotFound(f"no study {study_id} in your team", field="study_id")
    return study


@router.post("", status_code=201, response_model=StudyOut)
async def create_study(
    state: StateDep, principal: PrincipalDep,
    document: Annotated[dict[str, Any], Body(description="the study document (see docs/api.md)")],
) -> StudyOut:
    principal.require("member")
    normalised = await run_in_threadpool(study_ops.validate_document, document)

    def create(session: Session) -> StudyOut:
        assert principal.team_id is not None
        study = study_ops.create_study(session, state.cache, principal.team_id, principal.token_id, normalised)
        return StudyOut.of(study, with_document=True)

    out = await run_in_threadpool(write_with_study, state, create)
    state.notifier.notify(f"pool:{out.pool}", f"study:{out.id}", "studies")
    return out


@router.get("", response_model=StudyList)
async def list_studies(
    state: StateDep, principal: PrincipalDep,
    state_filter: Annotated[str | None, Query(alias="state")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> StudyList:
    principal.require("viewer")
    if state_filter is not None and state_filter not in STUDY_STATES:
        raise Invalid(f"unknown state {state_filter!r}; use one of {', '.join(STUDY_STATES)}", field="state")

    def load() -> StudyList:
        with state.db.read() as session:
            stmt = select(Study).where(Study.team_id == principal.team_id).order_by(Study.id.desc()).limit(limit)
            if state_filter:
                stmt = stmt.where(Study.state == state_filter)
            return StudyList(items=[StudyOut.of(s) for s in session.execute(stmt).scalars()])

    return await run_in_threadpool(load)


@router.get("/{study_id}", response_model=StudyOut)
async def get_study(study_id: int, state: StateDep, principal: PrincipalDep) -> StudyOut:
    def load() -> StudyOut:
        with state.db.read() as session:
            return StudyOut.of(visible_study(session, principal, study_id), with_document=True)

    return await run_in_threadpool(load)


async def _transition(study_id: int, action: str, state: Any, principal: Principal) -> StudyOut:
    principal.require("member")

    def change(session: Session) -> StudyOut:
        visible_study(session, principal, study_id)
        return StudyOut.of(study_ops.set_state(session, state.cache, study_id, action))

    out = await run_in_threadpool(write_with_study, state, change, study_id)
    state.notifier.notify(f"pool:{out.pool}", f"study:{study_id}", "studies")
    return out


@router.post("/{study_id}/pause", response_model=StudyOut)
async def pause(study_id: int, state: StateDep, principal: PrincipalDep) -> StudyOut:
    return await _transition(study_id, "pause", state, principal)


@router.post("/{study_id}/resume", response_model=StudyOut)
async def resume(study_id: int, state: StateDep, principal: PrincipalDep) -> StudyOut:
    return await _transition(study_id, "resume", state, principal)


@router.post("/{study_id}/cancel", response_model=StudyOut)
async def cancel(study_id: int, state: StateDep, principal: PrincipalDep) -> StudyOut:
    return await _transition(study_id, "cancel", state, principal)


def _encode_cursor(parts: list[Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(parts).encode()).decode()


def _decode_cursor(cursor: str) -> list[Any]:
    try:
        parts = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        assert isinstance(parts, list)
        return parts
    except Exception as exc:
        raise Invalid("cursor is not one this API returned; pass next_cursor back unchanged",
                      field="cursor") from exc


@router.get("/{study_id}/trials", response_model=TrialPage)
async def list_trials(
    study_id: int, state: StateDep, principal: PrincipalDep,
    state_filter: Annotated[str | None, Query(alias="state", description="comma-separated states")] = None,
    on_front: bool | None = None,
    sort: Annotated[str, Query(description="number, -number, or an objective name (prefix - to reverse)")] = "number",
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: str | None = None,
) -> TrialPage:
    states = state_filter.split(",") if state_filter else []
    for s in states:
        if s not in TRIAL_STATES:
            raise Invalid(f"unknown trial state {s!r}; use {', '.join(TRIAL_STATES)}", field="state")

    def load() -> TrialPage:
        with state.db.read() as session:
            study = visible_study(session, principal, study_id)
            stmt = select(Trial).where(Trial.study_id == study_id)
            if states:
                stmt = stmt.where(Trial.state.in_(states))
            if on_front is not None:
                stmt = stmt.where(Trial.on_front.is_(on_front))
            stmt, key = _sorted(stmt, study, sort, cursor)
            rows = session.execute(stmt.limit(limit + 1)).scalars().all()
            items = [trial_out(t) for t in rows[:limit]]
            next_cursor = _encode_cursor(key(rows[limit - 1])) if len(rows) > limit else None
            return TrialPage(items=items, next_cursor=next_cursor)

    return await run_in_threadpool(load)


def _sorted(stmt: Any, study: Study, sort: str, cursor: str | None) -> tuple[Any, Any]:
    """Keyset pagination: order by (key, number) and continue after the cursor's key."""
    descending = sort.startswith("-")
    name = sort.lstrip("-")
    after = _decode_cursor(cursor) if cursor else None
    if name == "number":
        column = Trial.number
        stmt = stmt.order_by(column.desc() if descending else column)
        if after:
            stmt = stmt.where(column < after[0] if descending else column > after[0])
        return stmt, lambda t: [t.number]
    if name not in [o["name"] for o in study.objectives]:
        raise Invalid(f"cannot sort by {name!r}; use number or an objective of this study", field="sort")
    value = Trial.values[name].as_float()
    stmt = stmt.where(Trial.values.is_not(None))
    order = (value.desc(), Trial.number.desc()) if descending else (value, Trial.number)
    stmt = stmt.order_by(*order)
    if after:
        v, n = after
        if descending:
            stmt = stmt.where(or_(value < v, and_(value == v, Trial.number < n)))
        else:
            stmt = stmt.where(or_(value > v, and_(value == v, Trial.number > n)))
    return stmt, lambda t: [t.values[name], t.number]


@router.get("/{study_id}/trials/{number}", response_model=TrialDetail)
async def get_trial(study_id: int, number: int, state: StateDep, principal: PrincipalDep) -> TrialDetail:
    def load() -> TrialDetail:
        with state.db.read() as session:
            visible_study(session, principal, study_id)
            trial = session.execute(
                select(Trial).where(Trial.study_id == study_id, Trial.number == number)
            ).scalar_one_or_none()
            if trial is None:
                raise NotFound(f"study {study_id} has no trial number {number}", field="number")
            return TrialDetail.model_validate(trial, from_attributes=True)

    return await run_in_threadpool(load)


@router.get("/{study_id}/front", response_model=FrontOut)
async def get_front(
    study_id: int, state: StateDep, principal: PrincipalDep,
    history_points: Annotated[int, Query(ge=2, le=5000)] = 500,
) -> FrontOut:
    def load() -> FrontOut:
        with state.db.read() as session:
            study = visible_study(session, principal, study_id)
            front = session.execute(
                select(Trial).where(Trial.study_id == study_id, Trial.on_front.is_(True)).order_by(Trial.number)
            ).scalars().all()
            baseline = session.execute(
                select(Trial).where(Trial.study_id == study_id, Trial.is_baseline.is_(True))
            ).scalar_one_or_none()
            return _front(session, study, front, baseline, history_points)

    return await run_in_threadpool(load)


def _front(session: Session, study: Study, front: Sequence[Trial], baseline: Trial | None, points: int) -> FrontOut:
    reference = {o["name"]: r for o, r in zip(study.objectives, study.reference_point, strict=True)}
    raw = None
    if study.baseline_values:
        raw = {}
        for o in study.objectives:
            base = float(study.baseline_values[o["name"]])
            ratio = reference[o["name"]]
            raw[o["name"]] = base * ratio if o["direction"] == "minimize" else base / ratio
    history = _history(session, study, points)
    note = None if study.baseline_values else "no hypervolume yet: it is measured against the baseline, still running"
    return FrontOut(
        study_id=study.id, objectives=study.objectives, trials=[trial_out(t) for t in front],
        baseline=trial_out(baseline) if baseline else None, hypervolume=study.hypervolume,
        reference_point=reference, reference_point_raw=raw, history=history, note=note,
    )


def _history(session: Session, study: Study, points: int) -> list[HistoryPoint]:
    """Hypervolume by completed-trial count, thinned to about `points` entries."""
    total = study.n_completed
    stride = max(1, total // points)
    stmt = select(Trial.completed_index, Trial.hypervolume_after).where(
        Trial.study_id == study.id, Trial.completed_index.is_not(None), Trial.hypervolume_after.is_not(None)
    )
    if stride > 1:
        stmt = stmt.where(or_(Trial.completed_index % stride == 0, Trial.completed_index == total))
    rows = session.execute(stmt.order_by(Trial.completed_index)).all()
    return [HistoryPoint(completed=r[0], hypervolume=r[1]) for r in rows if r[0] is not None and r[1] is not None]


@router.get("/{study_id}/events", response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}}}})
async def events(
    study_id: int, request: Request, state: StateDep, principal: PrincipalDep,
    after: Annotated[int | None, Query(description="resume after this event id")] = None,
    last_event_id: Annotated[str | None, Header()] = None,
    follow: Annotated[Literal["true", "false"], Query(description="false: send what is there, then close")] = "true",
) -> StreamingResponse:
    """Server-sent events: `trial` (a trial changed: its row), `study` (progress, front
    size, hypervolume) and `end` when the study has finished."""
    def check() -> None:
        with state.db.read() as session:
            visible_study(session, principal, study_id)

    await run_in_threadpool(check)
    cursor = after if after is not None else int(last_event_id) if last_event_id and last_event_id.isdigit() else 0
    stream = _event_stream(state, request, study_id, cursor, follow == "true")
    return StreamingResponse(stream, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def _event_stream(state: Any, request: Request, study_id: int, cursor: int,
                        follow: bool) -> AsyncIterator[str]:
    def changes(after: int) -> tuple[list[TrialOut], list[int], StudyOut]:
        with state.db.read() as session:
            rows = session.execute(
                select(Trial).where(Trial.study_id == study_id, Trial.seq > after).order_by(Trial.seq).limit(500)
            ).scalars().all()
            study = session.get(Study, study_id)
            assert study is not None
            return [trial_out(r) for r in rows], [r.seq for r in rows], StudyOut.of(study)

    last_study: str | None = None
    last_sent = time.monotonic()
    yield "retry: 2000\n\n"
    while True:
        trials, seqs, study = await run_in_threadpool(changes, cursor)
        for trial, seq in zip(trials, seqs, strict=True):
            yield f"event: trial\nid: {seq}\ndata: {trial.model_dump_json()}\n\n"
            cursor, last_sent = seq, time.monotonic()
        summary = study.model_dump_json()
        if summary != last_study:
            yield f"event: study\ndata: {summary}\n\n"
            last_study = summary
        if len(trials) == 500:
            continue
        if study.state in ("completed", "cancelled", "failed") and study.progress.in_flight == 0:
            yield f"event: end\ndata: {json.dumps({'state': study.state})}\n\n"
            return
        if not follow or await request.is_disconnected():
            return
        await state.notifier.wait(f"study:{study_id}", 15.0 if state.settings.redis_url else
                                  state.settings.poll_interval_s)
        if time.monotonic() - last_sent > KEEPALIVE_S:  # keeps proxies from closing an idle stream
            yield ": keep-alive\n\n"
            last_sent = time.monotonic()

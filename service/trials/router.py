"""A study's trials, its front and its live events."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Annotated, Literal

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import Response, StreamingResponse
from sqlalchemy.orm import Session

from service.api.deps import AppState, PrincipalDep, ReadSession, StateDep, StudyId, TrialNumber
from service.api.schemas import ERROR_RESPONSES
from service.domain.states import STUDY_FINISHED
from service.errors import NotFound
from service.notify import Channel
from service.store.models import Study
from service.studies.access import visible_study
from service.studies.document import document_of
from service.studies.schemas import ObjectiveOut, StudyOut
from service.trials import queries
from service.trials.schemas import (
    FrontOut,
    HistoryPoint,
    PointsOut,
    TrialDetail,
    TrialOut,
    TrialPage,
    points_json,
    trial_out,
)

router = APIRouter(prefix="/v1/studies", tags=["trials"], responses=ERROR_RESPONSES)

KEEPALIVE_S = 15.0
EVENT_PAGE = 500


@router.get("/{study_id}/trials", response_model=TrialPage)
def list_trials(
    study_id: StudyId, principal: PrincipalDep, session: ReadSession,
    state_filter: Annotated[str | None, Query(alias="state", max_length=200,
                                              description="comma-separated states")] = None,
    on_front: bool | None = None,
    sort: Annotated[str, Query(max_length=200,
                               description="number, -number, or an objective name (prefix - to reverse)")] = "number",
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(max_length=queries.MAX_CURSOR_CHARS)] = None,
) -> TrialPage:
    states = queries.parse_states(state_filter)
    study = visible_study(session, principal, study_id)
    rows, next_cursor = queries.page(session, study, states=states, on_front=on_front, sort=sort, limit=limit,
                                     cursor=cursor)
    return TrialPage(items=[trial_out(t) for t in rows], next_cursor=next_cursor)


@router.get("/{study_id}/points", response_model=PointsOut)
def get_points(
    study_id: StudyId, principal: PrincipalDep, session: ReadSession,
    since: Annotated[int, Query(ge=0, le=2**63 - 1,
                                description="only trials changed after this cursor of an earlier answer")] = 0,
) -> Response:
    """Every completed and screened-out trial of the study, as columns, for plots."""
    study = visible_study(session, principal, study_id)
    names = document_of(study).objective_names
    points = queries.points(session, study_id, names, since)
    return Response(points_json(study_id, names, points), media_type="application/json")


@router.get("/{study_id}/trials/{number}", response_model=TrialDetail)
def get_trial(study_id: StudyId, number: TrialNumber, principal: PrincipalDep, session: ReadSession) -> TrialDetail:
    visible_study(session, principal, study_id)
    trial = queries.by_number(session, study_id, number)
    if trial is None:
        raise NotFound(f"study {study_id} has no trial number {number}", field="number")
    return TrialDetail.model_validate(trial, from_attributes=True)


@router.get("/{study_id}/front", response_model=FrontOut)
def get_front(
    study_id: StudyId, principal: PrincipalDep, session: ReadSession,
    history_points: Annotated[int, Query(ge=2, le=5000)] = 500,
) -> FrontOut:
    study = visible_study(session, principal, study_id)
    objectives = document_of(study).objectives
    members, baseline = queries.front(session, study_id)
    reference = {o.name: r for o, r in zip(objectives, study.reference_point, strict=True)}
    raw = None
    if study.baseline_values:
        raw = {}
        for o in objectives:
            base, ratio = float(study.baseline_values[o.name]), reference[o.name]
            raw[o.name] = base * ratio if o.direction == "minimize" else base / ratio
    history = [HistoryPoint(completed=c, hypervolume=h)
               for c, h in queries.hypervolume_history(session, study, history_points)]
    note = None if study.baseline_values else "no hypervolume yet: it is measured against the baseline, still running"
    return FrontOut(
        study_id=study.id, objectives=[ObjectiveOut(name=o.name, direction=o.direction) for o in objectives],
        trials=[trial_out(t) for t in members],
        baseline=trial_out(baseline) if baseline else None, hypervolume=study.hypervolume,
        reference_point=reference, reference_point_raw=raw, history=history, note=note,
    )


@router.get("/{study_id}/events", response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}}}})
def events(
    study_id: StudyId, request: Request, state: StateDep, principal: PrincipalDep, session: ReadSession,
    after: Annotated[int | None, Query(ge=0, le=2**63 - 1, description="resume after this event id")] = None,
    last_event_id: Annotated[str | None, Header(max_length=100)] = None,
    follow: Annotated[Literal["true", "false"], Query(description="false: send what is there, then close")] = "true",
) -> StreamingResponse:
    """Server-sent events: `trial` (a trial changed: its row), `study` (progress, front
    size, hypervolume) and `end` when the study has finished."""
    visible_study(session, principal, study_id)
    cursor = after if after is not None else _event_id(last_event_id)
    stream = _event_stream(state, request, study_id, cursor, follow == "true")
    return StreamingResponse(stream, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def _event_id(header: str | None) -> int:
    """A Last-Event-ID the stream sent; anything else starts from the beginning."""
    if header and header.isdigit() and len(header) < 19:
        return int(header)
    return 0


def _changes(state: AppState, study_id: int, after: int) -> tuple[list[TrialOut], list[int], StudyOut]:
    with state.db.read() as session:
        return _read_changes(session, study_id, after)


def _read_changes(session: Session, study_id: int, after: int) -> tuple[list[TrialOut], list[int], StudyOut]:
    rows = queries.changed_since(session, study_id, after, EVENT_PAGE)
    study = session.get(Study, study_id)
    assert study is not None
    infeasible = queries.infeasible_counts(session, [study_id]).get(study_id, 0)
    return [trial_out(r) for r in rows], [r.seq for r in rows], StudyOut.of(study, infeasible=infeasible)


async def _event_stream(state: AppState, request: Request, study_id: int, cursor: int,
                        follow: bool) -> AsyncIterator[str]:
    last_study: str | None = None
    last_sent = time.monotonic()
    yield "retry: 2000\n\n"
    while True:
        trials, seqs, study = await state.db.run(_changes, state, study_id, cursor)
        for trial, seq in zip(trials, seqs, strict=True):
            yield f"event: trial\nid: {seq}\ndata: {trial.model_dump_json()}\n\n"
            cursor, last_sent = seq, time.monotonic()
        summary = study.model_dump_json()
        if summary != last_study:
            yield f"event: study\ndata: {summary}\n\n"
            last_study = summary
        if len(trials) == EVENT_PAGE:
            continue
        if study.state in STUDY_FINISHED and study.progress.in_flight == 0:
            yield f"event: end\ndata: {json.dumps({'state': study.state})}\n\n"
            return
        if not follow or await request.is_disconnected():
            return
        await state.notifier.wait(Channel.study(study_id), 15.0 if state.settings.redis_url else
                                  state.settings.poll_interval_s)
        if time.monotonic() - last_sent > KEEPALIVE_S:  # keeps proxies from closing an idle stream
            yield ": keep-alive\n\n"
            last_sent = time.monotonic()

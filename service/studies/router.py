"""Studies: create, list, read, pause, resume, cancel; their fronts compared."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query
from sqlalchemy import select
from sqlalchemy.orm import defer

from service.api.deps import PrincipalDep, ReadSession, StateDep, StudyId, WriteSession
from service.api.schemas import ERROR_RESPONSES
from service.controls import studies as controls
from service.domain.states import StudyState
from service.errors import Invalid
from service.store.models import Study
from service.studies import compare as comparison
from service.studies import document as sd
from service.studies import documents, lifecycle, warm_start
from service.studies.access import visible_study
from service.studies.schemas import DocumentedAs, StudyList, StudyOut
from service.trials import queries
from service.workers import pools

EXAMPLES: dict[str, Any] = {
    "builtin": {"summary": "a built-in CPU kernel, its own search space", "value": {
        "name": "matmul: runtime vs p99", "kernel": {"backend": "cpu", "builtin": "matmul"},
        "objectives": ["runtime_ms", "p99_ms"], "budget": {"max_trials": 40}, "parallelism": 2,
        "sampler": {"name": "nsga2", "seed": 1, "options": {"population_size": 10}}}},
    "python": {"summary": "a Python objective function over a space of its own", "value": {
        "name": "block sizes", "kernel": {"backend": "python", "source": "mypackage.bench:run"},
        "space": [{"name": "block", "type": "int", "low": 16, "high": 256, "step": 16, "default": 64},
                  {"name": "layout", "type": "categorical", "choices": ["row", "col"], "default": "row"},
                  {"name": "scale", "type": "float", "low": 0.1, "high": 10.0, "log": True, "default": 1.0}],
        "objectives": [{"name": "latency_ms"}, {"name": "accuracy", "direction": "maximize"}],
        "constraints": [{"metric": "latency_ms", "op": "<=", "value": 5.0}],
        "budget": {"max_trials": 200, "wall_time_s": 3600}, "pool": "default"}},
}

router = APIRouter(prefix="/v1/studies", tags=["studies"], responses=ERROR_RESPONSES)
compare_router = APIRouter(prefix="/v1/compare", tags=["studies"], responses=ERROR_RESPONSES)


@router.post("", status_code=201, response_model=StudyOut)
def create_study(
    state: StateDep, principal: PrincipalDep, session: WriteSession,
    document: Annotated[dict[str, Any], DocumentedAs(sd.StudyDocument),
                        Body(description="the study document (see docs/api.md)", openapi_examples=EXAMPLES)],
) -> StudyOut:
    principal.require("member")
    resolved = documents.validate(document, pools=pools.known(session))
    assert principal.team_id is not None
    pools.require_priority(session, resolved.pool, principal.team_id, resolved.priority)
    warm_start.resolve(session, principal.team_id, resolved)
    controls.resolve(session, state.catalog, resolved)
    study = lifecycle.create(session, principal.team_id, principal.token_id, resolved)
    return StudyOut.of(study, with_document=True)


@router.get("", response_model=StudyList)
def list_studies(
    principal: PrincipalDep, session: ReadSession,
    state_filter: Annotated[str | None, Query(alias="state", max_length=20)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> StudyList:
    principal.require("viewer")
    names = [s.value for s in StudyState]
    if state_filter is not None and state_filter not in names:
        raise Invalid(f"unknown state {state_filter!r}; use one of {', '.join(names)}", field="state")
    # a document is parsed once per process (document_of): the list does not read it again
    stmt = (select(Study).options(defer(Study.document)).where(Study.team_id == principal.team_id)
            .order_by(Study.id.desc()).limit(limit))
    if state_filter:
        stmt = stmt.where(Study.state == state_filter)
    studies = list(session.execute(stmt).scalars())
    infeasible = queries.infeasible_counts(session, [s.id for s in studies])
    return StudyList(items=[StudyOut.of(s, infeasible=infeasible.get(s.id, 0)) for s in studies])


@router.get("/{study_id}", response_model=StudyOut)
def get_study(study_id: StudyId, state: StateDep, principal: PrincipalDep, session: ReadSession) -> StudyOut:
    study = visible_study(session, principal, study_id)
    infeasible = queries.infeasible_counts(session, [study.id]).get(study.id, 0)
    out = StudyOut.of(study, with_document=True, infeasible=infeasible)
    out.queued_reason = state.shares.reason(study.id)
    return out


def _change(study_id: int, action: str, principal: PrincipalDep, session: WriteSession) -> StudyOut:
    visible_study(session, principal, study_id, role="member")
    study = lifecycle.change(session, study_id, action)
    return StudyOut.of(study, infeasible=queries.infeasible_counts(session, [study.id]).get(study.id, 0))


@router.post("/{study_id}/pause", response_model=StudyOut)
def pause(study_id: StudyId, principal: PrincipalDep, session: WriteSession) -> StudyOut:
    """Stop handing out trials; running ones may finish."""
    return _change(study_id, "pause", principal, session)


@router.post("/{study_id}/resume", response_model=StudyOut)
def resume(study_id: StudyId, principal: PrincipalDep, session: WriteSession) -> StudyOut:
    return _change(study_id, "resume", principal, session)


@router.post("/{study_id}/cancel", response_model=StudyOut)
def cancel(study_id: StudyId, principal: PrincipalDep, session: WriteSession) -> StudyOut:
    """Cancel waiting trials and finish the study; running trials are told to stop."""
    return _change(study_id, "cancel", principal, session)


@compare_router.get("", response_model=comparison.ComparisonOut)
def compare(
    principal: PrincipalDep, session: ReadSession,
    studies: Annotated[str, Query(max_length=200, description="2 to 6 study ids of one kernel and the same "
                                                              "objectives, separated by commas: 12,15")],
) -> comparison.ComparisonOut:
    """The studies' fronts, raw and as ratios to each study's baseline, with their targets
    (device, workload shapes, toolchain, ACF, pool) and the target fields that differ."""
    principal.require("viewer")
    ids = comparison.parse_ids(studies)
    return comparison.compare(session, comparison.comparable(session, principal, ids))

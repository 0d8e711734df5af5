"""Candidates, validations, approved artifacts and the audit log (docs/artifacts.md).

Members promote trials; approvers (not the promoter) approve, reject, roll back, revoke and
re-validate; every team member reads. A team sees only its own objects. The public key is
public: builds verify artifacts offline against it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any, NoReturn

from fastapi import APIRouter, Body, Path, Query, Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.api.deps import MAX_ID, PrincipalDep, ReadSession, StateDep, StudyId, WriteSession
from service.api.schemas import ERROR_RESPONSES
from service.artifacts import audit, candidates, catalog, validations, versions
from service.artifacts.progress import of_jobs
from service.artifacts.schemas import (
    REVALIDATIONS_SHOWN,
    ArtifactDetail,
    ArtifactOut,
    AuditOut,
    CandidateDetail,
    CandidateOut,
    DecisionIn,
    MatchOut,
    PromoteIn,
    PromoteOut,
    ResolveOut,
    RevalidateIn,
    RollbackIn,
    ValidationOut,
    VersionOut,
    VersionSummary,
)
from service.artifacts.signing import PublicKeyInfo
from service.errors import Invalid
from service.store.models import ArtifactVersion, Candidate, Validation, ValidationJob, utcnow
from service.studies.access import visible_study
from wire.targets import parse_toolchain

router = APIRouter(prefix="/v1", tags=["artifacts"], responses=ERROR_RESPONSES)
CandidateId = Annotated[int, Path(ge=1, le=MAX_ID, description="the candidate's id")]
ValidationId = Annotated[int, Path(ge=1, le=MAX_ID, description="the validation's id")]
ArtifactId = Annotated[int, Path(ge=1, le=MAX_ID, description="the artifact's id")]
VersionNumber = Annotated[int, Path(ge=1, le=MAX_ID, description="the version's number")]
QueryText = Annotated[str | None, Query(max_length=500, pattern=r"^[^\x00]*$")]


def _validation_out(session: Session, validation: Validation, samples: bool = False) -> ValidationOut:
    jobs = list(session.execute(select(ValidationJob).where(ValidationJob.validation_id == validation.id)
                                .order_by(ValidationJob.id)).scalars())
    return ValidationOut.of(validation, jobs, samples)


def _candidates_out(session: Session, rows: Sequence[Candidate]) -> list[CandidateOut]:
    """The candidates, each with its validation's progress (one query for all)."""
    jobs = validations.jobs_of(session, sorted({c.validation_id for c in rows if c.validation_id is not None}))
    now = utcnow()
    progress = {validation_id: of_jobs(found, now) for validation_id, found in jobs.items()}
    return [CandidateOut.of(c, progress.get(c.validation_id or 0)) for c in rows]


def _candidate_detail(session: Session, candidate: Candidate) -> CandidateDetail:
    validation = session.get(Validation, candidate.validation_id) if candidate.validation_id else None
    validation_out = _validation_out(session, validation) if validation is not None else None
    result = (validation.results or {}).get(str(candidate.id)) if validation is not None else None
    version = session.get(ArtifactVersion, candidate.version_id) if candidate.version_id else None
    return CandidateDetail(**CandidateOut.of(candidate, validation_out.progress if validation_out else None)
                           .model_dump(), result=result,
                           approved_artifact_id=version.artifact_id if version is not None else None,
                           validation=validation_out)


def _promoted(session: Session, rows: Sequence[Candidate], validation: Validation) -> PromoteOut:
    validation_out = _validation_out(session, validation)
    return PromoteOut(candidates=[CandidateOut.of(c, validation_out.progress) for c in rows],
                      validation=validation_out)


# -- candidates ------------------------------------------------------------------------------


@router.post("/studies/{study_id}/candidates", status_code=201, response_model=PromoteOut)
def promote(study_id: StudyId, body: PromoteIn, principal: PrincipalDep, session: WriteSession) -> PromoteOut:
    """Promote completed, feasible trials as candidates; their validation is queued to the
    study's pool (split over its live workers)."""
    study = visible_study(session, principal, study_id, role="member")
    rows, validation = candidates.promote(session, study, audit.Actor.of(principal), body.trials, body.note,
                                          body.rounds)
    return _promoted(session, rows, validation)


@router.get("/studies/{study_id}/candidates", response_model=list[CandidateOut])
def list_candidates(study_id: StudyId, principal: PrincipalDep, session: ReadSession) -> list[CandidateOut]:
    study = visible_study(session, principal, study_id)
    rows = session.execute(select(Candidate).where(Candidate.study_id == study.id).order_by(Candidate.id.desc())
                           .limit(1000)).scalars().all()
    return _candidates_out(session, rows)


@router.get("/candidates/{candidate_id}", response_model=CandidateDetail)
def get_candidate(candidate_id: CandidateId, principal: PrincipalDep, session: ReadSession) -> CandidateDetail:
    """A candidate with its validation (rounds done and left, ETA) and its verdict (ratios
    with intervals per objective)."""
    return _candidate_detail(session, candidates.visible_candidate(session, principal, candidate_id))


@router.post("/candidates/{candidate_id}/approve", status_code=201, response_model=VersionOut)
def approve(candidate_id: CandidateId, state: StateDep, principal: PrincipalDep, session: WriteSession,
            body: Annotated[DecisionIn | None, Body()] = None) -> VersionOut:
    """Approve a validated candidate (approver role, not its promoter): a new signed version
    of its (kernel, target), current from now on."""
    candidate = candidates.visible_candidate(session, principal, candidate_id, role="approver")
    row = versions.approve(session, candidate, audit.Actor.of(principal), state.signing_key(),
                           (body or DecisionIn()).why)
    return VersionOut.full(row)


@router.post("/candidates/{candidate_id}/reject", response_model=CandidateOut)
def reject(candidate_id: CandidateId, principal: PrincipalDep, session: WriteSession,
           body: Annotated[DecisionIn | None, Body()] = None) -> CandidateOut:
    candidate = candidates.visible_candidate(session, principal, candidate_id, role="approver")
    rejected = candidates.reject(session, candidate, audit.Actor.of(principal), (body or DecisionIn()).why)
    return _candidates_out(session, [rejected])[0]


@router.get("/validations/{validation_id}", response_model=ValidationOut)
def get_validation(validation_id: ValidationId, principal: PrincipalDep, session: ReadSession,
                   samples: Annotated[bool, Query(description="include every job's raw report")] = False
                   ) -> ValidationOut:
    return _validation_out(session, candidates.visible_validation(session, principal, validation_id), samples)


# -- artifacts -------------------------------------------------------------------------------


def _toolchain(text: str | None) -> dict[str, str]:
    try:
        return parse_toolchain(text or "")
    except ValueError as exc:
        raise Invalid(str(exc), field="toolchain") from None


def _workload(text: str | None) -> dict[str, int] | None:
    if not text:
        return None
    dims: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, value = part.partition("=")
        size = value.strip()
        if not name.strip() or not (size.isascii() and size.isdigit()) or len(size) > 15:
            raise Invalid(f"workload item {part!r}: write dim=size, e.g. m=4096,n=4096", field="workload")
        dims[name.strip()] = int(value)
    return dims


@router.get("/artifacts", response_model=list[ArtifactOut])
def list_artifacts(
    principal: PrincipalDep, session: ReadSession,
    kernel: Annotated[QueryText, Query(description="a part of the kernel's name")] = None,
    gpu: Annotated[QueryText, Query(description="a part of the GPU (or CPU) model")] = None,
    toolchain: Annotated[QueryText, Query(description='versions the target must have, "triton=3.4.0,ptxas=12.8"')
                         ] = None,
    workload: Annotated[QueryText, Query(description='dims of a workload shape, "m=4096,n=4096"')] = None,
    stale: bool | None = None,
) -> list[ArtifactOut]:
    """The team's artifacts, searchable by kernel, GPU, toolchain and workload."""
    principal.require("viewer")
    where = catalog.Search(kernel=kernel, gpu=gpu, toolchain=_toolchain(toolchain) or None,
                           workload=_workload(workload), stale=stale)
    return [ArtifactOut.of(a) for a in catalog.search(session, principal.team_id, where)]


@router.get("/artifacts/public-key", response_model=PublicKeyInfo)
def public_key(state: StateDep) -> PublicKeyInfo:
    """The service's Ed25519 public key: pin it in builds and verify artifacts offline."""
    return state.signing_key().public_info()


@router.get("/artifacts/resolve", response_model=ResolveOut)
def resolve(
    principal: PrincipalDep, session: ReadSession,
    kernel: Annotated[str, Query(min_length=1, max_length=200, pattern=r"^[^\x00]*$")],
    gpu: Annotated[str, Query(min_length=1, max_length=200, pattern=r"^[^\x00]*$",
                              description="the GPU model (the CPU model for cpu kernels)")],
    compute_capability: Annotated[str | None, Query(max_length=20, pattern=r"^[^\x00]*$")] = None,
    machine: Annotated[str | None, Query(max_length=50, pattern=r"^[^\x00]*$")] = None,
    toolchain: QueryText = None,
) -> ResolveOut:
    """The current approved version of `kernel` for the nearest matching target, with the match made."""
    principal.require("viewer")
    found = catalog.resolve(session, principal.team_id, kernel, gpu, compute_capability, _toolchain(toolchain),
                            machine)
    return ResolveOut(
        kernel=found.artifact.kernel, artifact_id=found.artifact.id, version=found.version.version,
        sha256=found.version.sha256, target=found.artifact.target,
        match=MatchOut(exact=found.exact, differences={k: list(v) for k, v in found.differences.items()}),
        stale=found.artifact.stale, file=found.version.file,
    )


@router.get("/artifacts/{artifact_id}", response_model=ArtifactDetail)
def get_artifact(artifact_id: ArtifactId, principal: PrincipalDep, session: ReadSession) -> ArtifactDetail:
    """An artifact with its versions and its latest re-validations (their progress and verdicts)."""
    principal.require("viewer")
    artifact = versions.visible_artifact(session, principal.team_id, artifact_id)
    rows = session.execute(select(ArtifactVersion).where(ArtifactVersion.artifact_id == artifact.id)
                           .order_by(ArtifactVersion.version)).scalars()
    revalidated = session.execute(select(Candidate).where(Candidate.artifact_id == artifact.id)
                                  .order_by(Candidate.id.desc()).limit(REVALIDATIONS_SHOWN)).scalars()
    return ArtifactDetail(**ArtifactOut.of(artifact).model_dump(), versions=[VersionSummary.of(v) for v in rows],
                          revalidations=[_candidate_detail(session, c) for c in revalidated])


@router.get("/artifacts/{artifact_id}/versions/{version}", response_model=VersionOut)
def get_version(artifact_id: ArtifactId, version: VersionNumber, principal: PrincipalDep,
                session: ReadSession) -> VersionOut:
    principal.require("viewer")
    artifact = versions.visible_artifact(session, principal.team_id, artifact_id)
    return VersionOut.full(versions.version_of(session, artifact, version))


@router.get("/artifacts/{artifact_id}/versions/{version}/file",
            responses={200: {"content": {"application/json": {}}, "description": "the signed artifact file"}})
def download(artifact_id: ArtifactId, version: VersionNumber, principal: PrincipalDep,
             session: ReadSession) -> Response:
    """The signed file, byte for byte as `paretune artifact verify` checks it."""
    principal.require("viewer")
    artifact = versions.visible_artifact(session, principal.team_id, artifact_id)
    row = versions.version_of(session, artifact, version)
    name = re.sub(r"[^A-Za-z0-9._-]", "_", f"{artifact.kernel}-{artifact.id}-v{row.version}.json")
    return Response(row.file.encode("utf-8"), media_type="application/json",
                    headers={"Content-Disposition": f'attachment; filename="{name}"', "X-Artifact-Sha256": row.sha256})


def _edit(artifact_id: int, version: int, principal: PrincipalDep, session: WriteSession) -> NoReturn:
    principal.require("member")
    artifact = versions.visible_artifact(session, principal.team_id, artifact_id)
    versions.refuse_edit(session, artifact, version)


@router.put("/artifacts/{artifact_id}/versions/{version}", response_model=VersionOut,
            responses={409: {"description": "always: an approved version is immutable"}})
def replace_version(artifact_id: ArtifactId, version: VersionNumber, principal: PrincipalDep,
                    session: WriteSession, body: Annotated[dict[str, Any] | None, Body()] = None) -> VersionOut:
    """Refused: nothing is edited after approval (409)."""
    _edit(artifact_id, version, principal, session)


@router.patch("/artifacts/{artifact_id}/versions/{version}", response_model=VersionOut,
              responses={409: {"description": "always: an approved version is immutable"}})
def edit_version(artifact_id: ArtifactId, version: VersionNumber, principal: PrincipalDep,
                 session: WriteSession, body: Annotated[dict[str, Any] | None, Body()] = None) -> VersionOut:
    """Refused: nothing is edited after approval (409)."""
    _edit(artifact_id, version, principal, session)


@router.post("/artifacts/{artifact_id}/rollback", response_model=VersionOut)
def rollback(artifact_id: ArtifactId, body: RollbackIn, principal: PrincipalDep, session: WriteSession) -> VersionOut:
    """Make an earlier, superseded version current again."""
    principal.require("approver")
    artifact = versions.visible_artifact(session, principal.team_id, artifact_id, lock=True)
    return VersionOut.full(versions.rollback(session, artifact, body.version, audit.Actor.of(principal), body.why))


@router.post("/artifacts/{artifact_id}/versions/{version}/revoke", response_model=VersionOut)
def revoke(artifact_id: ArtifactId, version: VersionNumber, principal: PrincipalDep, session: WriteSession,
           body: Annotated[DecisionIn | None, Body()] = None) -> VersionOut:
    """Stop serving a version; a revoked current version leaves none current until a rollback or approval."""
    principal.require("approver")
    artifact = versions.visible_artifact(session, principal.team_id, artifact_id, lock=True)
    row = versions.revoke(session, artifact, version, audit.Actor.of(principal), (body or DecisionIn()).why)
    return VersionOut.full(row)


@router.post("/artifacts/{artifact_id}/revalidate", status_code=201, response_model=PromoteOut)
def revalidate(artifact_id: ArtifactId, principal: PrincipalDep, session: WriteSession,
               body: Annotated[RevalidateIn | None, Body()] = None) -> PromoteOut:
    """Validate the current version's configuration again on the pool's workers as they are
    now; another approver approves the result into a new version."""
    principal.require("approver")
    artifact = versions.visible_artifact(session, principal.team_id, artifact_id, lock=True)
    given = body or RevalidateIn()
    candidate, validation = versions.revalidate(session, artifact, audit.Actor.of(principal), given.note,
                                                given.rounds)
    return _promoted(session, [candidate], validation)


# -- audit -----------------------------------------------------------------------------------


@router.get("/audit", response_model=list[AuditOut])
def list_audit(
    principal: PrincipalDep, session: ReadSession,
    action: Annotated[str | None, Query(max_length=32)] = None,
    subject_type: Annotated[str | None, Query(max_length=16)] = None,
    subject_id: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
    actor: QueryText = None,
    since: datetime | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> list[AuditOut]:
    """The team's audit log, newest first: who did what to which candidate, validation or
    artifact, when and why."""
    principal.require("viewer")
    if action is not None and action not in audit.ACTIONS:
        raise Invalid(f"unknown action {action!r}; use one of {', '.join(audit.ACTIONS)}", field="action")
    if subject_type is not None and subject_type not in audit.SUBJECTS:
        raise Invalid(f"unknown subject_type {subject_type!r}; use one of {', '.join(audit.SUBJECTS)}",
                      field="subject_type")
    where = audit.AuditFilter(action=action, subject_type=subject_type, subject_id=subject_id, actor=actor,
                              since=since, limit=limit)
    return [AuditOut.of(e) for e in audit.entries(session, principal.team_id or 0, where)]

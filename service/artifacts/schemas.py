"""Input and output schemas of the candidates, validations, artifacts and audit endpoints."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from service.api.schemas import Utc
from service.artifacts.progress import JobRounds, ValidationProgress, of_jobs
from service.artifacts.validations import DEFAULT_ROUNDS
from service.store.models import Artifact, ArtifactVersion, AuditEntry, Candidate, Validation, ValidationJob, utcnow

REVALIDATIONS_SHOWN = 10
TrialNumberIn = Annotated[int, Field(ge=0, le=2**31 - 1)]
Text = Annotated[str, Field(max_length=10_000, pattern=r"^[^\x00]*$")]


class PromoteIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    trials: list[TrialNumberIn] = Field(min_length=1, max_length=32, description="numbers of completed trials")
    note: Text = Field(default="", description="why these configurations")
    rounds: int = Field(default=DEFAULT_ROUNDS, ge=2, le=1000,
                        description="interleaved rounds in all, split over the pool's workers")


class RevalidateIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    note: Text = ""
    rounds: int = Field(default=DEFAULT_ROUNDS, ge=2, le=1000)


class DecisionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    why: Text = Field(default="", description="recorded in the audit log")


class RollbackIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int = Field(ge=1, le=2**31 - 1, description="the superseded version to make current again")
    why: Text = ""


class CandidateOut(BaseModel):
    id: int
    study_id: int
    trial_id: int
    trial_number: int
    config: dict[str, Any]
    note: str
    state: str = Field(description="validating, validated, failed, approved or rejected")
    promoted_by: str
    validation_id: int | None
    artifact_id: int | None = Field(description="for a re-validation: the artifact it re-validates")
    version_id: int | None
    decided_by: str | None
    reason: str | None
    created_at: Utc
    updated_at: Utc
    progress: ValidationProgress | None = Field(
        default=None, description="its validation's rounds done and left, and when it should be done")

    @classmethod
    def of(cls, row: Candidate, progress: ValidationProgress | None = None) -> CandidateOut:
        return cls(id=row.id, study_id=row.study_id, trial_id=row.trial_id, trial_number=row.trial_number,
                   config=row.config, note=row.note, state=row.state, promoted_by=row.promoted_by_name,
                   validation_id=row.validation_id, artifact_id=row.artifact_id, version_id=row.version_id,
                   decided_by=row.decided_by_name, reason=row.reason, created_at=row.created_at,
                   updated_at=row.updated_at, progress=progress)


class JobOut(BaseModel):
    id: int
    state: str
    rounds: int
    attempt: int
    worker_id: int | None
    phase: str | None
    rounds_done: int = Field(description="rounds measured so far (of this attempt)")
    round_s: list[float] = Field(description="the seconds each round measured so far took, as its worker timed it")
    progress_at: Utc | None = Field(description="when rounds_done last grew")
    message: str | None
    report: dict[str, Any] | None = Field(default=None, description="the worker's report with every round's values "
                                                                    "(with samples=true)")

    @classmethod
    def of(cls, row: ValidationJob, samples: bool) -> JobOut:
        rounds = JobRounds.of(row)
        return cls(id=row.id, state=row.state, rounds=row.rounds, attempt=row.attempt, worker_id=row.worker_id,
                   phase=row.phase, rounds_done=rounds.done, round_s=list(rounds.round_s),
                   progress_at=rounds.progress_at, message=row.message, report=row.report if samples else None)


class ValidationOut(BaseModel):
    id: int
    study_id: int
    state: str = Field(description="queued, running, completed or failed")
    candidate_ids: list[int]
    baseline: dict[str, Any]
    rounds: int
    progress: ValidationProgress
    jobs: list[JobOut]
    results: dict[str, Any] | None = Field(
        description="per candidate id: passed, correct, correctness per shape, and per objective the ratio to the "
                    "baseline with its confidence interval, gain and significance")
    target: dict[str, Any] | None
    message: str | None
    requested_by: str
    created_at: Utc
    finished_at: Utc | None

    @classmethod
    def of(cls, row: Validation, jobs: list[ValidationJob], samples: bool = False) -> ValidationOut:
        return cls(id=row.id, study_id=row.study_id, state=row.state, candidate_ids=list(row.candidate_ids),
                   baseline=row.baseline, rounds=row.rounds, progress=of_jobs(jobs, utcnow()),
                   jobs=[JobOut.of(j, samples) for j in jobs],
                   results=row.results, target=row.target, message=row.message,
                   requested_by=row.requested_by_name, created_at=row.created_at, finished_at=row.finished_at)


class PromoteOut(BaseModel):
    candidates: list[CandidateOut]
    validation: ValidationOut


class CandidateDetail(CandidateOut):
    approved_artifact_id: int | None = Field(default=None, description="the artifact its approval made a version of")
    validation: ValidationOut | None
    result: dict[str, Any] | None = Field(description="this candidate's verdict in its validation")


class VersionSummary(BaseModel):
    version: int
    state: str = Field(description="current, superseded or revoked")
    stale: bool
    sha256: str
    approved_by: str
    approved_at: Utc
    candidate_id: int | None
    validation_id: int | None
    acf: dict[str, Any] | None = Field(default=None, description="the ACF it carries: sha256 and binding, no bytes")

    @classmethod
    def of(cls, row: ArtifactVersion) -> VersionSummary:
        acf = (row.document.get("controls") or {}).get("acf")
        return cls(version=row.version, state=row.state, stale=row.stale, sha256=row.sha256,
                   approved_by=row.approved_by_name, approved_at=row.approved_at, candidate_id=row.candidate_id,
                   validation_id=row.validation_id,
                   acf={k: v for k, v in acf.items() if k != "content_base64"} if acf else None)


class VersionOut(VersionSummary):
    artifact_id: int
    document: dict[str, Any]
    signature: dict[str, Any]
    file: str = Field(description="the signed file, verbatim")

    @classmethod
    def full(cls, row: ArtifactVersion) -> VersionOut:
        return cls(**VersionSummary.of(row).model_dump(), artifact_id=row.artifact_id, document=row.document,
                   signature=row.signature, file=row.file)


class ArtifactOut(BaseModel):
    id: int
    kernel: str
    backend: str
    pool: str
    target: dict[str, Any]
    current_version: int | None
    stale: bool
    stale_reason: str | None
    created_at: Utc
    updated_at: Utc

    @classmethod
    def of(cls, row: Artifact) -> ArtifactOut:
        return cls(id=row.id, kernel=row.kernel, backend=row.backend, pool=row.pool, target=row.target,
                   current_version=row.current_version, stale=row.stale, stale_reason=row.stale_reason,
                   created_at=row.created_at, updated_at=row.updated_at)


class ArtifactDetail(ArtifactOut):
    versions: list[VersionSummary]
    revalidations: list[CandidateDetail] = Field(
        description=f"its latest re-validations (at most {REVALIDATIONS_SHOWN}), newest first: each a candidate "
                    "with its validation's progress and, once judged, its verdict")


class MatchOut(BaseModel):
    exact: bool
    differences: dict[str, list[str | None]] = Field(description="field: [the artifact's, the one asked for]")


class ResolveOut(BaseModel):
    kernel: str
    artifact_id: int
    version: int
    sha256: str
    target: dict[str, Any]
    match: MatchOut
    stale: bool
    file: str = Field(description="the signed file, verbatim")


class AuditOut(BaseModel):
    id: int
    at: Utc
    actor: str
    action: str
    subject_type: str
    subject_id: int
    why: str
    details: dict[str, Any]

    @classmethod
    def of(cls, row: AuditEntry) -> AuditOut:
        return cls(id=row.id, at=row.at, actor=row.actor, action=row.action, subject_type=row.subject_type,
                   subject_id=row.subject_id, why=row.why, details=row.details)

"""SQLAlchemy 2.0 models: the database is the source of truth and the trial queue."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
    literal_column,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, declared_attr, mapped_column
from sqlalchemy.sql.elements import ColumnElement

# JSONB on Postgres (indexable, compact), plain JSON text on SQLite.
Json = JSON().with_variant(JSONB(), "postgresql")
# The same for a bound parameter whose None means SQL NULL, as a None written in a statement
# does (a Json parameter would store JSON null).
JsonParam = JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")
# SQLite only auto-increments INTEGER PRIMARY KEY, so BigInteger ids fall back to Integer there.
BigId = BigInteger().with_variant(Integer(), "sqlite")


def utcnow() -> datetime:
    return datetime.now(UTC)


def as_utc(moment: datetime) -> datetime:
    """SQLite gives back naive datetimes; every stored time is UTC."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: Json, list[Any]: Json}


class Team(Base):
    __tablename__ = "teams"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ApiToken(Base):
    """A bearer token. Only its SHA-256 is stored; the secret is shown once at creation."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(16))  # user | worker
    role: Mapped[str] = mapped_column(String(16))  # viewer | member | approver | admin | worker
    superuser: Mapped[bool] = mapped_column(Boolean, default=False)
    team_id: Mapped[int | None] = mapped_column(ForeignKey("teams.id"), nullable=True)
    pool: Mapped[str | None] = mapped_column(String(100), nullable=True)  # worker tokens only
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # set in the future while a rotated token's grace period runs
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    replaced_by: Mapped[int | None] = mapped_column(Integer, nullable=True)  # the token it was rotated into


class Worker(Base):
    __tablename__ = "workers"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    pool: Mapped[str] = mapped_column(String(100), index=True)
    token_id: Mapped[int] = mapped_column(ForeignKey("api_tokens.id"))
    fingerprint: Mapped[dict[str, Any]] = mapped_column(default=dict)
    backends: Mapped[list[Any]] = mapped_column(default=list)
    energy: Mapped[bool] = mapped_column(Boolean, default=False)
    # the kinds of leased work it runs (service.trials.leases); None: those of contract 3 and older
    kinds: Mapped[list[Any] | None] = mapped_column(Json, nullable=True)
    registered_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Study(Base):
    __tablename__ = "studies"
    # retention's studies still to prune: finished, in order (service.trials.retention)
    __table_args__ = (Index("ix_studies_retention", "trials_pruned_at", "finished_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    state: Mapped[str] = mapped_column(String(16), index=True)  # running|paused|completed|cancelled|failed
    finish_reason: Mapped[str | None] = mapped_column(String(200), nullable=True)
    document: Mapped[dict[str, Any]] = mapped_column()  # the validated, normalised study document
    objectives: Mapped[list[Any]] = mapped_column()  # [{"name", "direction"}]
    pool: Mapped[str] = mapped_column(String(100))
    backend: Mapped[str] = mapped_column(String(32))
    sampler: Mapped[str] = mapped_column(String(16))
    requires_energy: Mapped[bool] = mapped_column(Boolean, default=False)
    max_trials: Mapped[int] = mapped_column(Integer)
    max_failed_trials: Mapped[int] = mapped_column(Integer)
    wall_time_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    parallelism: Mapped[int] = mapped_column(Integer)
    # its share of its team's use of the pool (service.trials.fairshare): class, then weight
    priority: Mapped[str] = mapped_column(String(8), default="normal", server_default="normal")
    weight: Mapped[float] = mapped_column(Float, default=1.0, server_default="1")
    n_created: Mapped[int] = mapped_column(Integer, default=0)
    n_completed: Mapped[int] = mapped_column(Integer, default=0)
    n_failed: Mapped[int] = mapped_column(Integer, default=0)
    n_cancelled: Mapped[int] = mapped_column(Integer, default=0)
    n_screened_out: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    baseline_values: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)
    reference_point: Mapped[list[Any]] = mapped_column()  # relative to the baseline, minimisation
    hypervolume: Mapped[float | None] = mapped_column(Float, nullable=True)
    front_size: Mapped[int] = mapped_column(Integer, default=0)
    best: Mapped[dict[str, Any]] = mapped_column(default=dict)  # objective -> best raw value
    seq: Mapped[int] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"), default=0)  # last change
    created_by: Mapped[int | None] = mapped_column(ForeignKey("api_tokens.id"), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # retention deleted the trials it deletes of this finished study (service.trials.retention)
    trials_pruned_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class LeaseColumns:
    """The columns of leased work, one row a unit (service.trials.leases): what may run it
    (pool, backend, energy counter, GPU) and its lease (token, expiry, worker, attempts,
    phase). Each table of a work kind mixes them in and adds `queue_indexes`."""

    pool: Mapped[str] = mapped_column(String(100))
    backend: Mapped[str] = mapped_column(String(32))
    requires_energy: Mapped[bool] = mapped_column(Boolean, default=False)
    # a GPU backend's work that runs (not compile-only): workers without a GPU never lease it
    requires_gpu: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    max_attempts: Mapped[int] = mapped_column(Integer, default=3)
    lease_token: Mapped[str | None] = mapped_column(String(64), unique=True, nullable=True)
    lease_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    phase: Mapped[str | None] = mapped_column(String(32), nullable=True)

    @declared_attr
    def worker_id(cls) -> Mapped[int | None]:
        return mapped_column(ForeignKey("workers.id"), nullable=True)


def constant(value: str) -> ColumnElement[str]:
    """A name (a state, a failure reason) written into a statement's text rather than passed
    as a parameter. Postgres runs a prepared statement on a generic plan once that looks no
    costlier than planning it each time; a generic plan knows a constant's share of the rows
    (few queued, many completed) and can read a partial index (`queued_only`), where with a
    parameter it guesses, and its guess turns with each ANALYZE."""
    if not value.isidentifier():
        raise ValueError(f"not a name: {value!r}")
    return literal_column(f"'{value}'", String)


def constants(values: Iterable[str]) -> list[ColumnElement[str]]:
    """`constant` of each, in an order that keeps the statement's text the same."""
    return [constant(value) for value in sorted(values)]


def queued_only(*columns: str, name: str) -> Index:
    """An index of the queued rows alone, read by statements that name the state `constant`ly.
    A row enters it once, when it is queued, not at each of its updates."""
    queued = text("state = 'queued'")
    return Index(name, *columns, postgresql_where=queued, sqlite_where=queued)


def queue_indexes(table: str) -> tuple[Index, Index]:
    """The indexes of a work kind's table: its queue (a pool's oldest queued unit) and its
    expiry (running units by lease expiry)."""
    return (queued_only("pool", "id", name=f"ix_{table}_queue"),
            Index(f"ix_{table}_expiry", "state", "lease_expires_at"))


POINT_COLUMNS = ("state", "told", "number", "on_front", "feasible", "is_baseline", "values")


class Trial(LeaseColumns, Base):
    __tablename__ = "trials"
    __table_args__ = (
        UniqueConstraint("study_id", "number", name="uq_trials_study_number"),
        *queue_indexes("trials"),
        # by change: event streams, sampler mirrors, and every column a plot reads of its
        # trials (service.trials.queries.points), so that 100,000 of them are read from the
        # index alone ((study_id, seq) is unique: the other columns never take part in a comparison)
        Index("ix_trials_study_seq", "study_id", "seq", *POINT_COLUMNS),
        Index("ix_trials_study_completed", "study_id", "completed_index"),  # the hypervolume's history
        Index("ix_trials_study_front", "study_id", "on_front", "number"),  # the front in order, without a scan
        Index("ix_trials_study_state_number", "study_id", "state", "number"),
        queued_only("study_id", "number", name="ix_trials_study_queue"),  # a study's first queued trial
        # the untold trials of a study, and studies with untold trials (a study's step, the
        # scheduler's scan): every equality of their queries, so that SQLite, which has no
        # statistics, does not read a study's finished trials through (study_id, state) instead
        Index("ix_trials_told", "told", "state", "study_id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16))  # service.domain.states.TrialState
    # studies with a screen: the stage the trial is in or finished in (screen | full); else None
    stage: Mapped[str | None] = mapped_column(String(8), nullable=True)
    seq: Mapped[int] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"), default=0)
    is_baseline: Mapped[bool] = mapped_column(Boolean, default=False)
    config: Mapped[dict[str, Any]] = mapped_column()
    sampler_state: Mapped[dict[str, Any]] = mapped_column(default=dict)  # optuna system attrs
    values: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)  # objective -> raw
    relative: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)  # value / baseline
    metrics: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)  # full Metric dicts
    feasible: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    constraint_values: Mapped[list[Any] | None] = mapped_column(Json, nullable=True)  # <= 0 feasible
    on_front: Mapped[bool] = mapped_column(Boolean, default=False)
    # finished and accounted for by the study's scheduling step (counts, front, sampler)
    told: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    completed_index: Mapped[int | None] = mapped_column(Integer, nullable=True)
    hypervolume_after: Mapped[float | None] = mapped_column(Float, nullable=True)
    # the screening stage's result and what became of it (service.trials.schemas.ScreeningOut); never
    # objective values: `values` holds the full stage's only
    screening: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)
    failure_reason: Mapped[str | None] = mapped_column(String(32), nullable=True)
    message: Mapped[str | None] = mapped_column(Text, nullable=True)
    log: Mapped[str | None] = mapped_column(Text, nullable=True)
    correctness: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)
    compile_report: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)
    environment: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)
    timings: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)
    fingerprint: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


# The trials table itself, for Core statements on the lease and result paths: they read rows,
# never ORM objects, and skip the ORM's per-statement machinery.
TRIALS = cast(Table, Trial.__table__)


class Pool(Base):
    """A worker pool's policy (a pool needs no row to exist: no row, no requirement)."""

    __tablename__ = "pools"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    min_isolation: Mapped[str] = mapped_column(String(16))  # none | user | namespaces
    # the CUDA toolchain its workers must compile with: an exact version or a release (13.3)
    toolchain: Mapped[str | None] = mapped_column(String(32), nullable=True)
    # re-validate an artifact at once when a worker of the pool makes it stale
    auto_revalidate: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # how fast a team's past use of the pool stops counting against its share
    usage_half_life_s: Mapped[float] = mapped_column(Float, default=3600.0, server_default="3600")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class PoolTeam(Base):
    """What the operator set for one team in a pool (service.trials.fairshare.TeamShare); a
    team without a row has weight 1 and no quota."""

    __tablename__ = "pool_teams"

    pool: Mapped[str] = mapped_column(ForeignKey("pools.name", ondelete="CASCADE"), primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), primary_key=True)
    weight: Mapped[float] = mapped_column(Float, default=1.0)
    max_running: Mapped[int | None] = mapped_column(Integer, nullable=True)
    gpu_hours_per_day: Mapped[float | None] = mapped_column(Float, nullable=True)
    allow_urgent: Mapped[bool] = mapped_column(Boolean, default=True)


class PoolUsage(Base):
    """GPU-seconds a study's trials held their leases in a pool, per hour, added by the
    study's scheduling step as it accounts for them. It outlives the study: a team's use
    counts after its studies are deleted."""

    __tablename__ = "pool_usage"
    __table_args__ = (Index("ix_pool_usage_hour", "hour"),)

    pool: Mapped[str] = mapped_column(String(100), primary_key=True)
    study_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    hour: Mapped[datetime] = mapped_column(DateTime(timezone=True), primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"))
    gpu_s: Mapped[float] = mapped_column(Float, default=0.0)
    trials: Mapped[int] = mapped_column(Integer, default=0)


class Candidate(Base):
    """A completed, feasible trial promoted towards an artifact (service.artifacts)."""

    __tablename__ = "candidates"
    __table_args__ = (Index("ix_candidates_study", "study_id", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"))
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id"), index=True)
    trial_id: Mapped[int] = mapped_column(BigId, ForeignKey("trials.id", ondelete="CASCADE"))
    trial_number: Mapped[int] = mapped_column(Integer)
    config: Mapped[dict[str, Any]] = mapped_column()
    note: Mapped[str] = mapped_column(Text, default="")
    state: Mapped[str] = mapped_column(String(16))  # service.artifacts.states.CandidateState
    promoted_by: Mapped[int | None] = mapped_column(ForeignKey("api_tokens.id"), nullable=True)  # None: the service
    promoted_by_name: Mapped[str] = mapped_column(String(200))
    validation_id: Mapped[int | None] = mapped_column(Integer, nullable=True)  # its latest validation
    artifact_id: Mapped[int | None] = mapped_column(Integer, nullable=True)  # a re-validation's artifact
    version_id: Mapped[int | None] = mapped_column(Integer, nullable=True)  # the version its approval made
    decided_by_name: Mapped[str | None] = mapped_column(String(200), nullable=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)  # a rejection's why
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Validation(Base):
    """Candidates and the baseline re-measured interleaved, in one or more jobs."""

    __tablename__ = "validations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"), index=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id"), index=True)
    pool: Mapped[str] = mapped_column(String(100))
    state: Mapped[str] = mapped_column(String(16))  # queued | running | completed | failed
    candidate_ids: Mapped[list[Any]] = mapped_column()
    baseline: Mapped[dict[str, Any]] = mapped_column()  # the baseline configuration
    rounds: Mapped[int] = mapped_column(Integer)  # over all jobs
    jobs: Mapped[int] = mapped_column(Integer)
    # per candidate id: correct, correctness per shape, metrics (ratio, interval, significance)
    results: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)
    target: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)
    fingerprints: Mapped[list[Any] | None] = mapped_column(Json, nullable=True)
    message: Mapped[str | None] = mapped_column(Text, nullable=True)
    requested_by_name: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class ValidationJob(LeaseColumns, Base):
    """One block of a validation's rounds: leased through the same queue as trials."""

    __tablename__ = "validation_jobs"
    __table_args__ = queue_indexes("validation_jobs")

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    validation_id: Mapped[int] = mapped_column(ForeignKey("validations.id", ondelete="CASCADE"), index=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"))
    state: Mapped[str] = mapped_column(String(16))  # queued | running | completed | failed
    spec: Mapped[dict[str, Any]] = mapped_column()  # the wire ValidationSpec, less attempt
    rounds: Mapped[int] = mapped_column(Integer)
    # the rounds measured so far (heartbeats of its lease, then its report), the seconds each
    # took, and when the count last grew (service.artifacts.progress)
    rounds_done: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    round_s: Mapped[list[Any] | None] = mapped_column(Json, nullable=True)
    progress_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    report: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)  # raw samples included
    message: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


VALIDATION_JOBS = cast(Table, ValidationJob.__table__)


class Artifact(Base):
    """A kernel on one target (device and toolchain): its versions share it."""

    __tablename__ = "artifacts"
    __table_args__ = (UniqueConstraint("team_id", "kernel", "target_key", name="uq_artifacts_kernel_target"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id"), index=True)
    kernel: Mapped[str] = mapped_column(String(200), index=True)
    backend: Mapped[str] = mapped_column(String(32))
    pool: Mapped[str] = mapped_column(String(100))
    target: Mapped[dict[str, Any]] = mapped_column()
    target_key: Mapped[str] = mapped_column(String(64))  # sha256 of the target's canonical JSON
    gpu: Mapped[str | None] = mapped_column(String(200), nullable=True)  # the device, for searching
    current_version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    stale: Mapped[bool] = mapped_column(Boolean, default=False)
    stale_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ArtifactVersion(Base):
    """One approved, signed version. `file`, `document`, `sha256` and `signature` never
    change after insertion: a database trigger refuses it (migration 0006)."""

    __tablename__ = "artifact_versions"
    __table_args__ = (UniqueConstraint("artifact_id", "version", name="uq_artifact_versions_version"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    artifact_id: Mapped[int] = mapped_column(ForeignKey("artifacts.id", ondelete="CASCADE"))
    version: Mapped[int] = mapped_column(Integer)
    candidate_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    validation_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    document: Mapped[dict[str, Any]] = mapped_column()
    file: Mapped[str] = mapped_column(Text)  # the signed file, verbatim
    sha256: Mapped[str] = mapped_column(String(64))
    signature: Mapped[dict[str, Any]] = mapped_column()
    state: Mapped[str] = mapped_column(String(16))  # current | superseded | revoked | rejected
    stale: Mapped[bool] = mapped_column(Boolean, default=False)
    approved_by_name: Mapped[str] = mapped_column(String(200))
    approved_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class AuditEntry(Base):
    """Who did what to which candidate, validation or artifact, when and why."""

    __tablename__ = "audit_log"
    __table_args__ = (Index("ix_audit_team_id", "team_id", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id"))
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    actor: Mapped[str] = mapped_column(String(200))  # a token's name, or "service"
    actor_token_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    action: Mapped[str] = mapped_column(String(32))
    subject_type: Mapped[str] = mapped_column(String(16))  # candidate | validation | artifact
    subject_id: Mapped[int] = mapped_column(Integer)
    why: Mapped[str] = mapped_column(Text, default="")
    details: Mapped[dict[str, Any]] = mapped_column(default=dict)


class ControlsFile(Base):
    """An NVIDIA Advanced Controls File, by the sha256 of its bytes: generated by CompileIQ's
    engine for a study, or imported with a Booster Pack. Immutable once written."""

    __tablename__ = "controls_files"

    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    content: Mapped[bytes] = mapped_column(LargeBinary)
    size_bytes: Mapped[int] = mapped_column(Integer)
    compiler: Mapped[str] = mapped_column(String(16))  # ptxas | nvcc
    version: Mapped[str] = mapped_column(String(16))  # the compiler release it is for: "13.3"
    origin: Mapped[str] = mapped_column(String(16))  # engine | pack
    study_id: Mapped[int | None] = mapped_column(Integer, nullable=True)  # the engine's study
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ControlsPack(Base):
    """An imported Booster Pack: its manifest as the zip held it, verified."""

    __tablename__ = "controls_packs"

    pack_id: Mapped[str] = mapped_column(String(100), primary_key=True)
    display_name: Mapped[str] = mapped_column(String(200))
    compiler: Mapped[str] = mapped_column(String(16))
    version: Mapped[str] = mapped_column(String(16))
    manifest: Mapped[dict[str, Any]] = mapped_column()
    zip_sha256: Mapped[str] = mapped_column(String(64))
    imported_by_name: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ControlsPackFile(Base):
    __tablename__ = "controls_pack_files"

    pack_id: Mapped[str] = mapped_column(ForeignKey("controls_packs.pack_id", ondelete="CASCADE"), primary_key=True)
    filename: Mapped[str] = mapped_column(String(200), primary_key=True)
    sha256: Mapped[str] = mapped_column(ForeignKey("controls_files.sha256"))
    position: Mapped[int] = mapped_column(Integer)  # the manifest's order


class SamplerCheckpoint(Base):
    """A study's search engine state (CompileIQ's checkpoint), written in the same
    transaction as the step that changed it: any replica or scheduler process carries on
    from it. `version` grows with every write."""

    __tablename__ = "sampler_checkpoints"

    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"), primary_key=True)
    version: Mapped[int] = mapped_column(Integer)
    state: Mapped[bytes] = mapped_column(LargeBinary)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Counter(Base):
    """Monotonic counters on SQLite, where there are no sequences (Postgres uses one)."""

    __tablename__ = "counters"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    value: Mapped[int] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"), default=0)

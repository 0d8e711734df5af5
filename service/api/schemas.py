"""Output schemas of the HTTP API (inputs are the study document and the wire contract)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from service.accounts.tokens import MAX_GRACE_S, MAX_LIFETIME_S
from service.store.models import Study, Trial, Worker, as_utc

# every stored time is UTC; SQLite gives them back without a zone, which RFC 3339 needs
Utc = Annotated[datetime, AfterValidator(as_utc)]
# text stored in the database: no NUL characters, which no Postgres text column can hold
Name = Annotated[str, Field(pattern=r"^[^\x00]*$")]


class DocumentedAs:
    """Annotates a raw JSON body that the endpoint validates itself (so that every error
    names its field the same way) to be documented in the OpenAPI as `model`."""

    def __init__(self, model: type[BaseModel]) -> None:
        self.model = model

    def __get_pydantic_json_schema__(self, _: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return handler(self.model.__pydantic_core_schema__)


class FieldError(BaseModel):
    field: str
    message: str


class ErrorBody(BaseModel):
    model_config = ConfigDict(extra="allow")

    code: str = Field(description="invalid, not_found, forbidden, unauthorized, conflict, too_large, ...")
    message: str = Field(description="what was wrong and how to fix it")
    field: str | None = Field(description="the field at fault (dotted path), if one is")
    errors: list[FieldError] | None = Field(default=None, description="every invalid field, for a 422")


class ErrorOut(BaseModel):
    """The one shape of every 4xx and 5xx answer."""

    error: ErrorBody


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorOut, "description": description} for status, description in (
        (401, "no token, or an unknown, revoked or expired one"),
        (403, "the token's role or kind does not allow this"),
        (404, "no such object in the caller's team"),
        (409, "a state conflict"),
        (413, "the request body is over the limit"),
        (422, "a parameter or body that does not validate"),
        (429, "too many failed authentications from this client; see Retry-After"),
    )
}


class ObjectiveOut(BaseModel):
    name: str
    direction: str


class Progress(BaseModel):
    max_trials: int
    created: int
    completed: int
    failed: int
    cancelled: int
    screened_out: int = Field(description="finished at the screening stage: not measured fully")
    in_flight: int
    infeasible: int = Field(default=0, description="failed (among `failed`) because the configuration cannot "
                                                   "launch on the target")
    infeasible_counted: bool = Field(default=True, description="whether infeasible trials count against max_trials")


class StudyOut(BaseModel):
    id: int
    name: str
    state: str
    finish_reason: str | None
    pool: str
    backend: str
    sampler: str
    objectives: list[ObjectiveOut]
    parallelism: int
    progress: Progress
    best: dict[str, float]
    baseline: dict[str, float] | None
    hypervolume: float | None
    front_size: int
    reference_point: dict[str, float]
    created_at: Utc
    updated_at: Utc
    finished_at: Utc | None
    document: dict[str, Any] | None = None

    @classmethod
    def of(cls, study: Study, with_document: bool = False, infeasible: int = 0) -> StudyOut:
        active = study.n_created - study.n_completed - study.n_failed - study.n_cancelled - study.n_screened_out
        return cls(
            id=study.id, name=study.name, state=study.state, finish_reason=study.finish_reason,
            pool=study.pool, backend=study.backend, sampler=study.sampler,
            objectives=[ObjectiveOut(**o) for o in study.objectives], parallelism=study.parallelism,
            progress=Progress(max_trials=study.max_trials, created=study.n_created,
                              completed=study.n_completed, failed=study.n_failed,
                              cancelled=study.n_cancelled, screened_out=study.n_screened_out,
                              in_flight=active, infeasible=infeasible,
                              infeasible_counted=study.document["budget"].get("count_infeasible", True)),
            best=study.best or {}, baseline=study.baseline_values, hypervolume=study.hypervolume,
            front_size=study.front_size,
            reference_point={o["name"]: r for o, r in zip(study.objectives, study.reference_point, strict=True)},
            created_at=study.created_at, updated_at=study.updated_at, finished_at=study.finished_at,
            document=study.document if with_document else None,
        )


class ScreeningOut(BaseModel):
    """A trial's screening stage: measured cheaply before any full measurement. Its values
    are screening values, never objective values (`values` of the trial holds those)."""

    values: dict[str, float] = Field(description="screened metric -> screening value (median)")
    intervals: dict[str, list[float]] = Field(description="screened metric -> [low, high], its confidence interval")
    units: dict[str, str] = Field(default_factory=dict)
    worker_id: int | None = Field(default=None, description="the worker that ran the screen")
    timings: dict[str, float] = Field(default_factory=dict)
    promoted: bool | None = Field(default=None, description="measured fully; null while undecided")
    dominated_by: int | None = Field(default=None, description="screened out: the front trial (number) that beat it")
    told: dict[str, float] | None = Field(default=None, description="screened out: the values the sampler heard")
    reason: str | None = None


class TrialOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    study_id: int
    number: int
    state: str
    stage: str | None = Field(default=None, description="studies that screen: screen or full")
    is_baseline: bool
    config: dict[str, Any]
    values: dict[str, float] | None
    relative: dict[str, float] | None
    feasible: bool | None
    on_front: bool
    screening: ScreeningOut | None = None
    attempt: int
    phase: str | None
    failure_reason: str | None
    message: str | None
    worker_id: int | None
    completed_index: int | None
    created_at: Utc
    started_at: Utc | None
    finished_at: Utc | None


class TrialDetail(TrialOut):
    metrics: dict[str, Any] | None
    constraint_values: list[float] | None
    correctness: dict[str, Any] | None
    compile_report: dict[str, Any] | None
    environment: dict[str, Any] | None
    timings: dict[str, Any] | None
    fingerprint: dict[str, Any] | None
    log: str | None
    hypervolume_after: float | None


class TrialPage(BaseModel):
    items: list[TrialOut]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page; null at the end")


class HistoryPoint(BaseModel):
    completed: int
    hypervolume: float


class FrontOut(BaseModel):
    study_id: int
    objectives: list[ObjectiveOut]
    trials: list[TrialOut]
    baseline: TrialOut | None
    hypervolume: float | None
    reference_point: dict[str, float] = Field(description="per objective, as a ratio to the baseline")
    reference_point_raw: dict[str, float] | None
    history: list[HistoryPoint]
    note: str | None = None


class StudyList(BaseModel):
    items: list[StudyOut]


class TokenOut(BaseModel):
    id: int
    name: str
    kind: str
    role: str
    team: str | None
    pool: str | None
    superuser: bool
    prefix: str
    created_at: Utc
    expires_at: Utc | None = Field(description="when the token stops working; null: never")
    revoked_at: Utc | None = Field(
        description="set while a rotated token's grace period runs: when it stops working")
    replaced_by: int | None = Field(description="the token this one was rotated into")
    token: str | None = Field(default=None, description="the secret, shown only at creation and rotation")


class TokenIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Name = Field(min_length=1, max_length=200)
    kind: Literal["user", "worker"] = "user"
    role: Literal["viewer", "member", "approver", "admin"] = "member"
    team: Name | None = Field(default=None, max_length=100, description="default: the caller's team")
    pool: Name = Field(default="default", min_length=1, max_length=100, description="worker tokens: their pool")
    superuser: bool = Field(default=False, description="an operator token (only the operator creates these)")
    expires_in: int | None = Field(default=None, ge=1, le=MAX_LIFETIME_S,
                                   description="seconds until the token expires; null: never")


class RotateIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    grace_s: int = Field(default=0, ge=0, le=MAX_GRACE_S,
                         description="seconds the old secret keeps working (0: it stops at once)")
    expires_in: int | None = Field(default=None, ge=1, le=MAX_LIFETIME_S,
                                   description="the new token's lifetime; default: the old token's lifetime")


class TeamIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.\-]+$")


class TeamOut(BaseModel):
    id: int
    name: str


class WorkerOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    pool: str
    backends: list[str]
    energy: bool
    fingerprint: dict[str, Any]
    registered_at: Utc
    last_seen_at: Utc
    trials_done: int = Field(description="trials this worker has reported (completed or failed)")

    @classmethod
    def of(cls, worker: Worker, trials_done: int) -> WorkerOut:
        return cls(id=worker.id, name=worker.name, pool=worker.pool, backends=worker.backends, energy=worker.energy,
                   fingerprint=worker.fingerprint, registered_at=worker.registered_at,
                   last_seen_at=worker.last_seen_at, trials_done=trials_done)


class MeOut(BaseModel):
    name: str
    kind: str
    role: str
    team: str | None
    superuser: bool
    expires_at: Utc | None = Field(description="when this token stops working; null: never")


def trial_out(trial: Trial) -> TrialOut:
    return TrialOut.model_validate(trial)

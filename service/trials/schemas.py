"""What the trials API answers: a study's trials, its front and its live events."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from service.api.schemas import Utc
from service.store.models import Trial
from service.studies.schemas import ObjectiveOut
from service.trials.queries import Points


class ScreeningOut(BaseModel):
    """A trial's screening stage: measured cheaply before any full measurement. Its values
    are screening values, never objective values (`values` of the trial holds those)."""

    values: dict[str, float] = Field(description="screened metric -> screening value (median)")
    intervals: dict[str, list[float]] = Field(description="screened metric -> [low, high], its confidence interval")
    units: dict[str, str] = Field(default_factory=dict)
    worker_id: int | None = Field(default=None, description="the worker that ran the screen")
    timings: dict[str, float] = Field(default_factory=dict)
    promoted: bool | None = Field(default=None, description="measured fully; null while undecided")
    deferred: bool = Field(default=False, description="left undecided until the study's first front, whose full "
                                                      "stage was being measured when this screen reported")
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


class PointsOut(BaseModel):
    """A study's completed and screened-out trials as parallel arrays (element i of each is
    one trial), for plotting every trial of a large study: a few bytes a trial instead of its
    whole row."""

    study_id: int
    objectives: list[str]
    cursor: int = Field(description="pass as ?since= to get only the trials changed after this answer")
    numbers: list[int]
    values: dict[str, list[float | None]] = Field(
        description="objective -> each trial's value; null for screened-out trials (not measured fully)")
    on_front: list[bool]
    feasible: list[bool | None] = Field(description="whether it met the study's constraints (null: it has none)")
    screened_out: list[bool]
    baseline: int | None = Field(description="the baseline's trial number, if it is among these trials")


def points_json(study_id: int, objectives: list[str], points: Points) -> str:
    """PointsOut as JSON, put together from the arrays the database wrote (validating and
    writing 100,000 trials' values again would take longer than reading them)."""
    values = ",".join(f"{json.dumps(name)}:{column}" for name, column in zip(objectives, points.values, strict=True))
    return (f'{{"study_id":{study_id},"objectives":{json.dumps(objectives)},"cursor":{points.cursor},'
            f'"numbers":{points.numbers},"values":{{{values}}},"on_front":{points.on_front},'
            f'"feasible":{points.feasible},"screened_out":{points.screened_out},'
            f'"baseline":{json.dumps(points.baseline)}}}')


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


def trial_out(trial: Trial) -> TrialOut:
    return TrialOut.model_validate(trial)

"""What the studies API answers (its input is the study document: service.studies.document)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from service.api.schemas import Utc
from service.store.models import Study
from service.studies.document import LearnedFrom, WarmSource, document_of
from wire.contract import WorkloadShape


class DocumentedAs:
    """Annotates a raw JSON body that the endpoint validates itself (so that every error
    names its field the same way) to be documented in the OpenAPI as `model`."""

    def __init__(self, model: type[BaseModel]) -> None:
        self.model = model

    def __get_pydantic_json_schema__(self, _: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return handler(self.model.__pydantic_core_schema__)


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


class LearnedOut(BaseModel):
    study: int
    team: bool = Field(description="whether that study is of the same team (else its owners share its trials)")
    workload: list[WorkloadShape]
    target: dict[str, str | None]
    distance: float = Field(description="shape and target distance; each trial weighs 2**-distance of the study's own")
    trials: int = Field(description="its completed trials the sampler learns from")

    @classmethod
    def of(cls, learned: LearnedFrom) -> LearnedOut:
        return cls(study=learned.study, team=learned.team, workload=learned.workload, target=learned.target,
                   distance=learned.distance, trials=len(learned.configs))


class WarmStartOut(BaseModel):
    mode: str = Field(description="related | catalog | none (docs/api.md \"Warm start and transfer\")")
    configs: list[dict[str, Any]] = Field(description="what trials 1, 2, ... measure after the baseline")
    sources: list[WarmSource] = Field(description="warm_start related: the related trial each configuration "
                                                  "came from, in the same order")
    learned_from: list[LearnedOut] = Field(default_factory=list, description=(
        "warm_start related with the lfbo sampler: the related studies whose trials its classifier learns from"))


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
    priority: str = "normal"
    weight: float = 1.0
    progress: Progress
    best: dict[str, float]
    baseline: dict[str, float] | None
    hypervolume: float | None
    front_size: int
    reference_point: dict[str, float]
    created_at: Utc
    updated_at: Utc
    finished_at: Utc | None
    warm_start: WarmStartOut
    document: dict[str, Any] | None = None
    queued_reason: str | None = Field(default=None, description="why its queued trials wait although workers "
                                                                "are free: its team's quota in the pool")

    @classmethod
    def of(cls, study: Study, with_document: bool = False, infeasible: int = 0) -> StudyOut:
        document = document_of(study)
        active = study.n_created - study.n_completed - study.n_failed - study.n_cancelled - study.n_screened_out
        return cls(
            id=study.id, name=study.name, state=study.state, finish_reason=study.finish_reason,
            pool=study.pool, backend=study.backend, sampler=study.sampler,
            objectives=[ObjectiveOut(name=o.name, direction=o.direction) for o in document.objectives],
            parallelism=study.parallelism, priority=study.priority, weight=study.weight,
            progress=Progress(max_trials=study.max_trials, created=study.n_created,
                              completed=study.n_completed, failed=study.n_failed,
                              cancelled=study.n_cancelled, screened_out=study.n_screened_out,
                              in_flight=active, infeasible=infeasible,
                              infeasible_counted=document.budget.count_infeasible),
            best=study.best or {}, baseline=study.baseline_values, hypervolume=study.hypervolume,
            front_size=study.front_size,
            reference_point=dict(zip(document.objective_names, study.reference_point, strict=True)),
            created_at=study.created_at, updated_at=study.updated_at, finished_at=study.finished_at,
            warm_start=WarmStartOut(mode=document.warm_start or "none", configs=document.warm_configs,
                                    sources=document.warm_start_sources or [],
                                    learned_from=[LearnedOut.of(s) for s in document.warm_start_learned or []]),
            document=study.document if with_document else None,
        )


class StudyList(BaseModel):
    items: list[StudyOut]

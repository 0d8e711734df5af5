"""What leases and results need of a study, read once per process: a study's document never
changes after creation, so each replica keeps the facts its hot paths read."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from cachetools import LRUCache
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.scheduling import screening
from service.store.models import Study
from service.studies.document import Constraint, Limits, ResolvedDocument
from wire import contract as wire


@dataclass(frozen=True)
class Screen:
    """A study's screening stage: what it measures and how."""

    objectives: list[str]
    measure: wire.MeasureSettings


@dataclass(frozen=True)
class StudySpec:
    """What leases and results need of a study."""

    objectives: list[str]
    constraints: list[Constraint]
    kernel: wire.KernelSpec
    measure: wire.MeasureSettings
    limits: Limits
    screen: Screen | None = None
    compile_only: bool = False

    @classmethod
    def of(cls, stored: dict[str, Any]) -> StudySpec:
        """From a stored document (keys another release added are left aside)."""
        document = ResolvedDocument.model_validate(stored, extra="ignore")
        full, screen = screening.screen_measure(document.measure.model_dump())
        return cls(
            objectives=document.objective_names,
            constraints=document.constraints,
            kernel=document.kernel,
            measure=wire.MeasureSettings.model_validate(full),
            limits=document.limits,
            screen=None if screen is None or document.measure.screen is None else Screen(
                list(document.measure.screen.objectives or []), wire.MeasureSettings.model_validate(screen)),
            compile_only=document.compile_only,
        )


class StudySpecs:
    """A per-process cache of StudySpec by study id (the least recently used go first)."""

    def __init__(self, capacity: int = 1024) -> None:
        self._specs: LRUCache[int, StudySpec] = LRUCache(capacity)
        self._lock = threading.Lock()

    def get(self, session: Session, study_id: int) -> StudySpec:
        with self._lock:
            spec = self._specs.get(study_id)
        if spec is None:
            document = session.execute(select(Study.document).where(Study.id == study_id)).scalar_one()
            spec = StudySpec.of(document)
            with self._lock:
                self._specs[study_id] = spec
        return spec

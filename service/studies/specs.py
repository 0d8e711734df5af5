"""What leases and results need of a study, read once per process: a study's document never
changes after creation, so each replica keeps the facts its hot paths read."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from cachetools import LRUCache
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.scheduling import screening
from service.store.models import Study
from wire import contract as wire


@dataclass(frozen=True)
class Screen:
    """A study's screening stage: what it measures and how."""

    objectives: list[str]
    measure: wire.MeasureSettings


@dataclass(frozen=True)
class StudySpec:
    """What leases and results need of a study."""

    objectives: list[dict[str, str]]
    constraints: list[dict[str, Any]]
    kernel: wire.KernelSpec
    measure: wire.MeasureSettings
    limits: dict[str, Any]
    screen: Screen | None = None
    compile_only: bool = False
    sandbox: wire.SandboxLimits = field(default_factory=wire.SandboxLimits)  # the study's own lower limits

    @classmethod
    def of(cls, document: dict[str, Any]) -> StudySpec:
        full, screen = screening.screen_measure(document["measure"])
        return cls(
            objectives=document["objectives"],
            constraints=document["constraints"],
            kernel=wire.KernelSpec.model_validate(document["kernel"]),
            measure=wire.MeasureSettings.model_validate(full),
            limits=document["limits"],
            screen=None if screen is None else Screen(document["measure"]["screen"]["objectives"],
                                                      wire.MeasureSettings.model_validate(screen)),
            compile_only=bool(document.get("compile_only", False)),
            sandbox=wire.SandboxLimits.model_validate(document["limits"].get("sandbox") or {}),
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

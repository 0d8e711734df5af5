"""Fronts compared across studies: 2 to 6 studies of one kernel and the same objectives, each
front with its values raw and as ratios to its own study's baseline, and what differs between
the studies' targets (device, workload shapes, toolchain, ACF, pool).

A study's target is read from what measured the points compared: the fingerprints the
workers stored with its front's trials and its baseline (service.trials.work), so a study
measured on two GPU models, or across a toolchain upgrade, shows both. Ratios to the
baseline are what make studies of other devices or shapes comparable at all: each study's
baseline is the same default configuration measured where that study ran.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.accounts.tokens import Principal
from service.api.deps import MAX_ID
from service.artifacts.catalog import worker_target
from service.domain.pareto import relative_to_baseline
from service.errors import NotFound, invalid
from service.store.models import Study, Trial
from service.studies.document import ResolvedDocument, document_of
from service.studies.schemas import ObjectiveOut
from service.trials import queries
from wire.artifact_controls import ControlsError, kernel_identity
from wire.contract import Target, WorkloadShape
from wire.modules import module_target

MIN_STUDIES, MAX_STUDIES = 2, 6
ID_TEXT = re.compile(r"[0-9]{1,10}")
DEVICE_FIELDS = ("gpu", "compute_capability", "cpu")
TOOLCHAIN_FIELDS = Target.TOOLCHAIN_FIELDS


class ComparedPoint(BaseModel):
    number: int = Field(description="the trial's number in its study")
    config: dict[str, Any]
    values: dict[str, float]
    normalised: dict[str, float] = Field(description="value / the study's baseline value, per objective "
                                                     "(left out where the baseline has none or 0)")


class ComparedTarget(BaseModel):
    """Where a study's compared points were measured. Device and toolchain fields list every
    value the workers that measured its front and baseline reported (sorted; empty: none
    reported yet)."""

    gpu: list[str] = Field(description="GPU models")
    compute_capability: list[str]
    cpu: list[str] = Field(description="CPU models, where no GPU measured it (the cpu backend's device)")
    workload: list[WorkloadShape] = Field(description="the study's workload shapes")
    toolchain: dict[str, list[str]] = Field(description="driver, cuda, triton, ptxas, nvrtc, cc: the versions "
                                                        "reported (a field none reported is left out)")
    acf: bool = Field(description="whether its space holds a compiler_controls parameter (an ACF)")
    pool: str


class ComparedStudy(BaseModel):
    id: int
    name: str
    state: str
    baseline: dict[str, float] | None = Field(description="its baseline's values; null until it is measured")
    baseline_number: int | None = Field(description="its baseline trial's number")
    points: list[ComparedPoint] = Field(description="its front, by trial number")
    target: ComparedTarget


class Difference(BaseModel):
    field: str = Field(description="gpu, compute_capability, cpu, workload, toolchain.<name>, acf or pool")
    values: list[Any] = Field(description="each study's value of the field, in the order of `studies`")


class ComparisonOut(BaseModel):
    objectives: list[ObjectiveOut]
    studies: list[ComparedStudy]
    differences: list[Difference] = Field(description="the target fields whose values are not the same in "
                                                      "every study")


def parse_ids(text: str) -> list[int]:
    """The study ids of `studies=12,15`: 2 to 6 distinct ids, or one 422 with every problem."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    errors: list[dict[str, str]] = []
    ids: list[int] = []
    for part in parts:
        if not ID_TEXT.fullmatch(part) or not 1 <= int(part) <= MAX_ID:
            errors.append({"field": "studies", "message": f"{part[:20]!r} is not a study id: list study ids (whole "
                                                          "numbers) separated by commas, e.g. studies=12,15"})
        elif int(part) in ids:
            errors.append({"field": "studies", "message": f"study {int(part)} is listed twice: list each study once"})
        else:
            ids.append(int(part))
    if not MIN_STUDIES <= len(parts) <= MAX_STUDIES:
        listed = f"{len(parts)} {'study' if len(parts) == 1 else 'studies'} listed"
        errors.append({"field": "studies", "message": f"{listed}: compare {MIN_STUDIES} to "
                                                      f"{MAX_STUDIES} studies, e.g. studies=12,15"})
    if errors:
        raise invalid(errors)
    return ids


def comparable(session: Session, principal: Principal, ids: Sequence[int]) -> list[Study]:
    """The studies, if the caller's team owns every one (404 naming those it does not) and
    they tuned one kernel for the same objectives (422 saying what differs)."""
    found = {s.id: s for s in session.execute(select(Study).where(Study.id.in_(ids))).scalars()
             if s.team_id == principal.team_id}
    missing = [str(i) for i in ids if i not in found]
    if missing:
        raise NotFound(f"no study {', '.join(missing)} in your team: compare your team's studies", field="studies")
    studies = [found[i] for i in ids]
    documents = [document_of(s) for s in studies]
    errors = []
    kernels = [_kernel(d) for d in documents]
    if len({key for key, _ in kernels}) > 1:
        listed = "; ".join(f"study {s.id} tunes {text}" for s, (_, text) in zip(studies, kernels, strict=True))
        errors.append({"field": "studies", "message": f"the studies tune different kernels ({listed}): compare "
                                                      "studies of one kernel"})
    objectives = [_objectives_text(d) for d in documents]
    if len(set(objectives)) > 1:
        listed = "; ".join(f"study {s.id} has {o}" for s, o in zip(studies, objectives, strict=True))
        errors.append({"field": "studies", "message": f"the studies have different objectives ({listed}): compare "
                                                      "studies of the same objectives"})
    if errors:
        raise invalid(errors)
    return studies


def compare(session: Session, studies: Sequence[Study]) -> ComparisonOut:
    compared = [_study(session, study) for study in studies]
    objectives = document_of(studies[0]).objectives
    return ComparisonOut(objectives=[ObjectiveOut(name=o.name, direction=o.direction) for o in objectives],
                         studies=compared, differences=differences([c.target for c in compared]))


def differences(targets: Sequence[ComparedTarget]) -> list[Difference]:
    """The fields whose values are not the same in every target, in a fixed order."""
    rows: list[tuple[str, list[Any]]] = [(name, [getattr(t, name) for t in targets]) for name in DEVICE_FIELDS]
    rows.append(("workload", [[s.model_dump(mode="json") for s in t.workload] for t in targets]))
    for name in TOOLCHAIN_FIELDS:
        rows.append((f"toolchain.{name}", [t.toolchain.get(name, []) for t in targets]))
    rows += [("acf", [t.acf for t in targets]), ("pool", [t.pool for t in targets])]
    return [Difference(field=name, values=values) for name, values in rows
            if len({json.dumps(v, sort_keys=True) for v in values}) > 1]


def _study(session: Session, study: Study) -> ComparedStudy:
    members, baseline = queries.front(session, study.id)
    base = study.baseline_values or {}
    points = [ComparedPoint(number=t.number, config=t.config, values=t.values,
                            normalised=relative_to_baseline(t.values, base))
              for t in members if t.values]
    measured = [t for t in [*members, baseline] if t is not None and t.values]
    return ComparedStudy(id=study.id, name=study.name, state=study.state, baseline=study.baseline_values,
                         baseline_number=baseline.number if baseline is not None else None, points=points,
                         target=_target(study, document_of(study), measured))


def _target(study: Study, document: ResolvedDocument, measured: Sequence[Trial]) -> ComparedTarget:
    seen: dict[str, set[str]] = {name: set() for name in (*DEVICE_FIELDS, *TOOLCHAIN_FIELDS)}
    for trial in measured:
        fingerprint = trial.fingerprint or {}
        reported: dict[str, Any] = {**worker_target(fingerprint),
                                    "compute_capability": (fingerprint.get("device_limits") or {})
                                    .get("compute_capability")}
        for name, values in seen.items():
            if reported.get(name):
                values.add(str(reported[name]))
    return ComparedTarget(
        gpu=sorted(seen["gpu"]), compute_capability=sorted(seen["compute_capability"]),
        cpu=[] if seen["gpu"] else sorted(seen["cpu"]),  # a GPU's host CPU is not what was measured
        workload=document.kernel.workload,
        toolchain={name: sorted(seen[name]) for name in TOOLCHAIN_FIELDS if seen[name]},
        acf=any(p.type == "compiler_controls" for p in document.space), pool=study.pool)


def _kernel(document: ResolvedDocument) -> tuple[tuple[Any, ...], str]:
    """What identifies the kernel a study tunes (its backend and built-in, module or source by
    the sha256 of its text, and entry), and the same in words."""
    kernel = document.kernel
    try:
        identity = kernel_identity(kernel)
    except ControlsError:  # a built-in this release no longer has: known by its name
        return (kernel.backend, kernel.builtin), f"{kernel.backend} built-in {kernel.builtin}"
    key = (identity.backend, identity.builtin, identity.source_sha256, identity.entry)
    if identity.builtin:
        return key, f"{identity.backend} built-in {identity.builtin}"
    module = module_target(kernel)
    if module is not None:
        return key, f"{identity.backend} module {module} (with harness sha256 {identity.source_sha256[:12]})"
    entry = f", entry {identity.entry}" if identity.entry else ""
    return key, f"{identity.backend} source sha256 {identity.source_sha256[:12]}{entry}"


def _objectives_text(document: ResolvedDocument) -> str:
    return ", ".join(f"{o.name} ({o.direction})" for o in sorted(document.objectives, key=lambda o: o.name))

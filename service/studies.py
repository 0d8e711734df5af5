"""Study lifecycle: create from a document, keep trials queued, pause, resume, cancel, finish."""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter, ValidationError
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from service import scheduler
from service.domain import study_doc as sd
from service.errors import Conflict, Invalid
from service.store.db import lock_study, next_seq
from service.store.models import Study, Trial, as_utc, utcnow

SPACE = TypeAdapter(list[sd.Parameter])


def builtin_kernel(backend: str, name: str) -> Any:
    from workers.kernels import get_builtin

    return get_builtin(backend, name)


def validate_document(raw: Any) -> dict[str, Any]:
    """Parse and check a study document; returns its normalised form or raises Invalid."""
    if not isinstance(raw, dict):
        raise Invalid("a study document is a JSON/YAML object", field=None)
    try:
        doc = sd.StudyDocument.model_validate(raw)
    except ValidationError as exc:
        raise invalid_from_pydantic(exc) from exc
    try:
        return _normalise(doc)
    except sd.DocumentError as exc:
        raise Invalid(exc.message, field=exc.field) from exc


def invalid_from_pydantic(exc: ValidationError) -> Invalid:
    errors = [
        {"field": ".".join(str(p) for p in e["loc"]), "message": _clean(e["msg"])} for e in exc.errors()
    ]
    first = errors[0]
    summary = "; ".join(f"{e['field']}: {e['message']}" for e in errors[:5])
    return Invalid(summary, field=first["field"], errors=errors)


def _clean(message: str) -> str:
    return message.removeprefix("Value error, ")


GPU_BACKENDS = {"triton", "cuda"}
ENERGY_METRICS = {"energy_mj", "power_w"}
# NVML's energy counter advances in ~100 ms steps whose energy varies a lot under the power
# cap, so an energy figure steadies as the hot window grows: ten repeats of three GEMMs spread
# by 0.8-2.1% with 1 s windows and 0.6-1.3% with 1.6 s (bench/results/gpu_energy_window.md).
ENERGY_HOT_WINDOW_S = 1.6


def _normalise(doc: sd.StudyDocument) -> dict[str, Any]:
    objectives = sd.resolve_objectives(doc)
    kernel = doc.kernel
    builtin_default: dict[str, Any] = {}
    space = doc.space
    if kernel.builtin:
        builtin = builtin_kernel(kernel.backend, kernel.builtin)
        if builtin is None:
            raise sd.DocumentError("kernel.builtin", f"no built-in {kernel.backend} kernel named {kernel.builtin!r}")
        builtin_default = dict(builtin.default_config)
        if space is None:
            space = SPACE.validate_python(builtin.space)
        if not kernel.workload and builtin.workload:
            kernel = kernel.model_copy(update={"workload": builtin.workload})
    if space is None:
        raise sd.DocumentError("space", "a kernel given by source needs a search space")
    baseline = sd.resolve_baseline(space, doc.baseline, builtin_default)
    sampler = doc.sampler.name
    sampler = scheduler.resolve_sampler_name(sampler, len(objectives))
    if sampler == "grid" and sd.grid_size(space) is None:
        raise sd.DocumentError("sampler.name", "grid needs a step on every float parameter")
    scheduler.check_sampler_options(sampler, doc.sampler.options)
    reference = _reference_point(doc, objectives)
    normalised = doc.model_dump(mode="json")
    normalised.update(
        kernel=kernel.model_dump(mode="json"),
        space=[p.model_dump(mode="json", exclude_unset=True) for p in space],
        baseline=baseline,
        objectives=objectives,
        reference_point=reference,
    )
    normalised["sampler"]["name"] = sampler
    energy = {o["name"] for o in objectives} & ENERGY_METRICS
    if energy and kernel.backend in GPU_BACKENDS and "hot_window_s" not in doc.measure.model_fields_set:
        normalised["measure"]["hot_window_s"] = ENERGY_HOT_WINDOW_S
    budget = normalised["budget"]
    if budget["max_failed_trials"] is None:
        budget["max_failed_trials"] = budget["max_trials"] // 2 + 5
    if sampler == "grid":  # the whole grid, after the baseline
        budget["max_trials"] = min(budget["max_trials"], (sd.grid_size(space) or 1) + 1)
    return normalised


def _reference_point(doc: sd.StudyDocument, objectives: list[dict[str, str]]) -> dict[str, float]:
    given = doc.reference_point or {}
    names = [o["name"] for o in objectives]
    for key, value in given.items():
        if key not in names:
            raise sd.DocumentError(f"reference_point.{key}", f"{key!r} is not an objective of this study")
        if value <= 1.0:
            raise sd.DocumentError(
                f"reference_point.{key}", "a reference point is a ratio to the baseline and must be > 1"
            )
    return {name: float(given.get(name, 2.0)) for name in names}


def create_study(session: Session, cache: scheduler.MirrorCache, team_id: int, token_id: int | None,
                 document: dict[str, Any]) -> Study:
    objectives = document["objectives"]
    metrics = {o["name"] for o in objectives} | {c["metric"] for c in document["constraints"]}
    study = Study(
        team_id=team_id,
        name=document["name"],
        state="running",
        document=document,
        objectives=objectives,
        pool=document["pool"],
        backend=document["kernel"]["backend"],
        sampler=document["sampler"]["name"],
        requires_energy=bool(metrics & sd.ENERGY_OBJECTIVES),
        max_trials=document["budget"]["max_trials"],
        max_failed_trials=document["budget"]["max_failed_trials"],
        wall_time_s=document["budget"]["wall_time_s"],
        parallelism=document["parallelism"],
        reference_point=[document["reference_point"][o["name"]] for o in objectives],
        created_by=token_id,
        best={},
    )
    session.add(study)
    session.flush()
    refill(session, cache, study)
    return study


def active_count(study: Study) -> int:
    return study.n_created - study.n_completed - study.n_failed - study.n_cancelled


def past_wall_time(study: Study) -> bool:
    if study.wall_time_s is None:
        return False
    return (utcnow() - as_utc(study.created_at)).total_seconds() > study.wall_time_s


def refill(session: Session, cache: scheduler.MirrorCache, study: Study) -> int:
    """Queue trials until `parallelism` are in flight or the budget is spent; then settle
    the study's state. Call with the study row locked. Returns how many were queued."""
    queued = 0
    if study.state == "running" and not past_wall_time(study):
        want = min(study.parallelism - active_count(study), study.max_trials - study.n_created)
        if want > 0:
            mirror = cache.get(session, study)
            for _ in range(want):
                try:
                    params, sampler_state, optuna_id = mirror.ask()
                except scheduler.SpaceExhausted:
                    study.max_trials = study.n_created  # nothing new is left to try
                    study.finish_reason = "search space exhausted"
                    break
                trial = Trial(
                    study_id=study.id,
                    number=study.n_created,
                    state="queued",
                    seq=next_seq(session),
                    pool=study.pool,
                    backend=study.backend,
                    requires_energy=study.requires_energy,
                    is_baseline=study.n_created == 0,
                    config=params,
                    sampler_state=sampler_state,
                    max_attempts=study.document["limits"]["max_attempts"],
                )
                session.add(trial)
                session.flush()
                mirror.adopt(trial, optuna_id)
                study.n_created += 1
                queued += 1
    settle(session, study)
    return queued


def settle(session: Session, study: Study) -> None:
    """Finish the study if its budget is spent, its failures exceed the limit or its wall
    time is over (queued trials are then cancelled; running ones may still report)."""
    if study.state not in ("running", "paused"):
        return
    reason = None
    if study.n_failed > study.max_failed_trials:
        reason, state = f"too many failed trials ({study.n_failed} > {study.max_failed_trials})", "failed"
    elif past_wall_time(study):
        reason, state = "wall time limit reached", "completed"
    elif study.n_created >= study.max_trials and active_count(study) == 0:
        reason, state = study.finish_reason or "budget spent", "completed"
    if reason is None:
        return
    _cancel_waiting(session, study)
    if state == "failed" or active_count(study) == 0:
        study.state, study.finish_reason, study.finished_at = state, reason, utcnow()
    study.updated_at = utcnow()


def _cancel_waiting(session: Session, study: Study) -> None:
    rows = session.execute(
        select(Trial).where(Trial.study_id == study.id, Trial.state.in_(("queued", "paused")))
    ).scalars().all()
    for row in rows:
        row.state, row.failure_reason, row.finished_at = "cancelled", "cancelled", utcnow()
        row.seq = next_seq(session)
        study.n_cancelled += 1


def set_state(session: Session, cache: scheduler.MirrorCache, study_id: int, action: str) -> Study:
    study = lock_study(session, study_id)
    assert study is not None
    if action == "pause":
        if study.state != "running":
            raise Conflict(f"only a running study can be paused; this one is {study.state}", field="state")
        study.state = "paused"
        _move_waiting(session, study, "queued", "paused")
    elif action == "resume":
        if study.state != "paused":
            raise Conflict(f"only a paused study can be resumed; this one is {study.state}", field="state")
        study.state = "running"
        _move_waiting(session, study, "paused", "queued")
        refill(session, cache, study)
    else:
        if study.state in ("completed", "cancelled", "failed"):
            raise Conflict(f"the study is already {study.state}", field="state")
        _cancel_waiting(session, study)
        study.state, study.finish_reason, study.finished_at = "cancelled", "cancelled by user", utcnow()
    study.updated_at = utcnow()
    return study


def _move_waiting(session: Session, study: Study, old: str, new: str) -> None:
    session.execute(
        update(Trial).where(Trial.study_id == study.id, Trial.state == old).values(state=new)
    )

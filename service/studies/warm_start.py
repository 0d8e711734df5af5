"""Warm start: a new study measures configurations found in earlier work first, right after
its baseline, before the sampler proposes.

- `warm_start: related` (the default for built-ins): the best configurations of related
  studies, nearest shape first, and, for the `lfbo` sampler, the related studies' trials to
  learn from (`related`; the mechanism is service.studies.transfer).
- `warm_start: catalog`: the approved configurations of the kernel for the closest targets
  (service.artifacts.catalog.warm_start).
- `sampler.warm_start`: the fronts of the earlier studies it names, and the configurations it
  lists (`named`).

What is found is copied into the new study's document when it is created
(`warm_start_configs`, with `warm_start_sources` saying where each came from, and
`sampler.warm_start.configs`), so the study does not depend on the earlier ones afterwards
and every replica queues the same trials. Their values are not told to the sampler: they
were measured on other shapes or another toolchain, on another scale; the configurations are
measured again here and the sampler hears those measurements like any other.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.artifacts import catalog
from service.domain.states import TrialState
from service.errors import Invalid
from service.store.models import Study, Trial, Worker
from service.studies import transfer
from service.studies.document import LearnedFrom, ResolvedDocument, WarmSource, document_of
from service.studies.space import SearchSpace
from wire.contract import KernelSpec

# the related studies looked at (the newest of the kernel's backend) and their trials (the newest)
MAX_RELATED_STUDIES = 200
MAX_RELATED_TRIALS = 50_000


def resolve(session: Session, team_id: int, document: ResolvedDocument) -> None:
    """What the study document's warm start finds, copied into it."""
    if document.warm_start == "catalog":
        document.warm_start_configs = catalog.warm_start(session, team_id, document)
    elif document.warm_start == "related":
        related(session, team_id, document)
    named(session, team_id, document)


def related(session: Session, team_id: int, document: ResolvedDocument) -> None:
    """The configurations of related trials that the study starts from (transfer.pick) and
    where they came from. A related study tuned the same kernel (built-in, or the same source
    and entry) over the same space, on any shape, device or toolchain; it is the caller's
    team's, or another team's whose document says `share_trials: true`. Another team's study
    that does not share its trials is never read."""
    space = document.model_dump(mode="json")["space"]
    identity = _kernel_identity(document.kernel)
    rows = session.execute(
        select(Study).where(Study.backend == document.kernel.backend).order_by(Study.id.desc())
        .limit(MAX_RELATED_STUDIES)
    ).scalars()
    studies = {study.id: study for study in rows
               if (study.team_id == team_id or study.document.get("share_trials") is True)
               and study.document.get("space") == space and _kernel_identity(document_of(study).kernel) == identity}
    if not studies:
        return
    trials = session.execute(
        select(Trial.study_id, Trial.number, Trial.config, Trial.values, Trial.fingerprint, Trial.on_front)
        .where(Trial.study_id.in_(studies), Trial.state == TrialState.COMPLETED.value)
        .order_by(Trial.id.desc()).limit(MAX_RELATED_TRIALS)
    ).all()
    found = [transfer.RelatedTrial(study=study_id, number=number, team=studies[study_id].team_id == team_id,
                                   workload=document_of(studies[study_id]).kernel.workload,
                                   target=catalog.worker_target(fingerprint or {}), config=config, values=values,
                                   on_front=on_front)
             for study_id, number, config, values, fingerprint, on_front in trials if values]
    first = document.objectives[0]
    listed = document.sampler.warm_start.configs if document.sampler.warm_start else []
    target = _pool_target(session, document.pool)
    picks = transfer.pick(found, document.kernel.workload, target, first.name, first.direction == "minimize",
                          [document.baseline, *listed])
    document.warm_start_configs = [p.trial.config for p in picks]
    document.warm_start_sources = [
        WarmSource(study=p.trial.study, trial=p.trial.number, team=p.trial.team, workload=p.trial.workload,
                   target=_known(p.trial.target), distance=round(p.distance, 4),
                   values=p.trial.values)
        for p in picks]
    if document.sampler.name == "lfbo":
        objectives = [(o.name, o.direction == "minimize") for o in document.objectives]
        document.warm_start_learned = [
            LearnedFrom(study=s.study, team=s.team, workload=s.workload,
                        target=_known(s.target), distance=round(s.distance, 4),
                        configs=s.configs)
            for s in transfer.learning_set(found, document.kernel.workload, target, objectives)] or None


def _known(target: dict[str, str | None]) -> dict[str, str | None]:
    """A target's fields that the worker reported."""
    return {k: v for k, v in target.items() if v is not None}


def _pool_target(session: Session, pool: str) -> dict[str, str | None]:
    """The device and toolchain of the pool's most recently seen worker (none known: empty)."""
    latest = session.execute(select(Worker.fingerprint).where(Worker.pool == pool)
                             .order_by(Worker.last_seen_at.desc()).limit(1)).scalar_one_or_none()
    return catalog.worker_target(latest or {})


def named(session: Session, team_id: int, document: ResolvedDocument) -> None:
    """Add the front of each study named in `sampler.warm_start.studies` to its configs:
    best first by each study's first objective, at most `trials` of them, none twice, none
    the baseline, none outside this study's space, none the study starts from already."""
    warm = document.sampler.warm_start
    if not warm or not warm.studies or warm.trials == 0:
        return
    space = SearchSpace(document.space)
    ranked: list[dict[str, Any]] = []
    for index, study_id in enumerate(warm.studies):
        field = f"sampler.warm_start.studies.{index}"
        earlier = session.get(Study, study_id)
        if earlier is None or earlier.team_id != team_id:
            raise Invalid(f"no study {study_id} in your team to warm-start from", field=field)
        if _kernel_identity(document_of(earlier).kernel) != _kernel_identity(document.kernel):
            raise Invalid(f"study {study_id} tuned another kernel; warm-start from studies of this kernel",
                          field=field)
        ranked += _front_best_first(session, earlier)
    taken = {transfer.config_key(c) for c in [document.baseline, *warm.configs, *(document.warm_start_configs or [])]}
    added = 0
    for config in ranked:
        if added == warm.trials:
            break
        if set(config) - set(space.names) or any(space.value_problem(k, v) for k, v in config.items()):
            continue  # the earlier study's space differed here
        whole = {name: config.get(name, document.baseline[name]) for name in space.names}
        if transfer.config_key(whole) not in taken:
            taken.add(transfer.config_key(whole))
            warm.configs.append(whole)
            added += 1


def _kernel_identity(kernel: KernelSpec) -> tuple[Any, ...]:
    return kernel.backend, kernel.builtin, kernel.source, kernel.entry


def _front_best_first(session: Session, study: Study) -> list[dict[str, Any]]:
    first = document_of(study).objectives[0]
    sign = 1.0 if first.direction == "minimize" else -1.0
    rows = session.execute(
        select(Trial.config, Trial.values).where(Trial.study_id == study.id, Trial.on_front.is_(True))
    ).all()
    measured = [(config, values) for config, values in rows if values and first.name in values]
    measured.sort(key=lambda row: sign * float(row[1][first.name]))
    return [config for config, _ in measured]



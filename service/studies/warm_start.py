"""Warm start: a new study measures the front of earlier studies of the same kernel first.

The earlier studies' configurations are copied into the new study's document when it is
created (`sampler.warm_start.configs`), so the study does not depend on them afterwards and
every replica queues the same trials. Their values are not told to the sampler: they were
measured on other shapes or another toolchain, on another scale; the configurations are
measured again here and the sampler hears those measurements like any other.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.errors import Invalid
from service.store.models import Study, Trial
from service.studies.document import ResolvedDocument, document_of
from service.studies.space import SearchSpace
from wire.contract import KernelSpec


def resolve(session: Session, team_id: int, document: ResolvedDocument) -> None:
    """Add the front of each study named in `sampler.warm_start.studies` to its configs:
    best first by each study's first objective, at most `trials` of them, none twice, none
    the baseline, none outside this study's space."""
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
    taken = {_key(c) for c in warm.configs} | {_key(document.baseline)}
    added = 0
    for config in ranked:
        if added == warm.trials:
            break
        if set(config) - set(space.names) or any(space.value_problem(k, v) for k, v in config.items()):
            continue  # the earlier study's space differed here
        whole = {name: config.get(name, document.baseline[name]) for name in space.names}
        if _key(whole) not in taken:
            taken.add(_key(whole))
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


def _key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True)

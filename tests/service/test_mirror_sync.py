"""A process's sampler mirror follows the trials table (service.scheduling.mirror): a step
reads what another process's step changed, and skips that read when nothing but its own
steps changed the study. Two processes are two mirror caches on one database, their steps
run by hand (the app's background scheduler is off); SQLite and Postgres."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Api, make_api, sent_statements
from optuna.trial import TrialState as OptunaState

from service.scheduling.mirror import Mirror, MirrorCache
from service.scheduling.step import run_step

RESULT = {"status": "completed", "metrics": {"f1": {"value": 0.25}, "f2": {"value": 0.75}}}


@pytest.fixture
def api(database_url: str) -> Iterator[Api]:
    yield from make_api(database_url, scheduler_process=True)  # its steps are the test's


def reads_by_sequence(sent: list[tuple[str, Any]]) -> int:
    return sum("trials.seq >" in " ".join(statement.split()) for statement, _ in sent)


def mirror_of(cache: MirrorCache, study_id: int) -> Mirror:
    mirror = cache._mirrors[study_id]  # what the process holds, without a step's sync
    assert isinstance(mirror, Mirror)
    return mirror


def test_a_step_reads_what_another_process_stepped_and_only_that(api: Api) -> None:
    study_id = api.create_study(budget={"max_trials": 12}, parallelism=2)["id"]  # this process's steps
    state = api.client.app.state.paretune  # type: ignore[attr-defined]
    here, there = state.cache, MirrorCache(catalog=state.cache.catalog)
    worker = api.worker()

    def step(cache: MirrorCache) -> Any:
        with state.db.write() as session:
            return run_step(session, cache, study_id, wait=True)

    def row_id(held: dict[str, Any]) -> int:
        trial = api.client.get(f"/v1/studies/{study_id}/trials/{held['trial']['number']}", headers=api.admin)
        return int(trial.json()["id"])

    held = api.lease(worker)
    assert held is not None
    assert api.post_result(worker, held["token"], RESULT).status_code == 200
    with sent_statements(state.db.engine) as seen:  # the other process tells the result and queues a trial
        report = step(there)
    assert (report.accounted, report.queued) == (1, 1)
    assert reads_by_sequence(seen) == 1  # its mirror is new: it reads the study's trials

    with sent_statements(state.db.engine) as seen:  # this one finds the study changed: it reads what changed
        report = step(here)
    assert (report.accounted, report.queued) == (0, 0) and reads_by_sequence(seen) == 1
    mirror = mirror_of(here, study_id)
    told = mirror.storage.get_trial(mirror.ids[row_id(held)])
    assert told.state == OptunaState.COMPLETE and told.values == [0.25, 0.75]  # the other process's tell
    assert mirror.next_number == 3  # and the trial it queued

    held = api.lease(worker)
    assert held is not None
    assert api.post_result(worker, held["token"], RESULT).status_code == 200
    with sent_statements(state.db.engine) as seen:  # only a result since its own step: no read by sequence
        report = step(here)
    assert (report.accounted, report.queued) == (1, 1) and reads_by_sequence(seen) == 0
    assert mirror.storage.get_trial(mirror.ids[row_id(held)]).state == OptunaState.COMPLETE
    assert mirror.next_number == 4

    with sent_statements(state.db.engine) as seen:  # the other process, behind by a step, reads it
        step(there)
    assert reads_by_sequence(seen) == 1
    behind = mirror_of(there, study_id)
    assert behind.next_number == 4 and row_id(held) in behind.ids

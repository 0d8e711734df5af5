"""What a scheduling step writes (service.scheduling.step): the study's row once, however many
trials it tells and asks, and counts that take in the trials it has just told although the
database has them untold until the step's flush; SQLite and Postgres, steps run by hand."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Api, make_api, sent_statements

from service.scheduling.step import StepReport, run_step
from service.store.models import Study

RESULT = {"status": "completed", "metrics": {"f1": {"value": 0.25}, "f2": {"value": 0.75}}}
INFEASIBLE = {"status": "failed", "failure_reason": "infeasible",
              "message": "out of resource: threads, Required: 2048, Hardware limit: 1024"}


@pytest.fixture
def api(database_url: str) -> Iterator[Api]:
    yield from make_api(database_url, scheduler_process=True)  # its steps are the test's


def stepper(api: Api, study_id: int) -> Any:
    state = api.client.app.state.paretune  # type: ignore[attr-defined]

    def step() -> tuple[StepReport, list[str]]:
        with sent_statements(state.db.engine) as sent, state.db.write() as session:
            report = run_step(session, state.cache, study_id, wait=True)
        assert report is not None
        return report, [" ".join(statement.split()) for statement, _ in sent]

    return step


def study_updates(statements: list[str]) -> int:
    return sum(s.startswith("UPDATE studies") for s in statements)


def test_a_step_writes_its_study_once(api: Api) -> None:
    study_id = api.create_study(budget={"max_trials": 20}, parallelism=3)["id"]
    step = stepper(api, study_id)
    step()  # whatever its creation left to do
    worker = api.worker()
    # the baseline (its completion reads and fills the trials before it), then one result,
    # then two at once: each told, counted and replaced, and the study written once
    for results, writes in ((1, None), (1, 1), (2, 1)):
        for _ in range(results):
            held = api.lease(worker)
            assert held is not None
            assert api.post_result(worker, held["token"], RESULT).status_code == 200
        report, sent = step()
        assert (report.accounted, report.queued) == (results, results)
        assert writes is None or study_updates(sent) == writes, sent
    study = api.client.get(f"/v1/studies/{study_id}", headers=api.admin).json()
    assert study["progress"]["completed"] == 4 and study["progress"]["created"] == 7


def test_infeasible_trials_told_by_a_step_settle_the_study_in_that_step(api: Api) -> None:
    study_id = api.create_study(budget={"max_trials": 20, "max_infeasible_in_a_row": 3}, parallelism=3)["id"]
    step = stepper(api, study_id)
    step()
    worker = api.worker()
    for _ in range(3):
        held = api.lease(worker)
        assert held is not None
        assert api.post_result(worker, held["token"], INFEASIBLE).status_code == 200
    report, _ = step()
    assert report.accounted == 3 and report.queued == 0
    state = api.client.app.state.paretune  # type: ignore[attr-defined]
    with state.db.read() as session:
        study = session.get(Study, study_id)
        assert study is not None
        assert (study.state, study.n_failed) == ("failed", 3)
        assert study.finish_reason == ("3 configurations in a row cannot launch on the target "
                                       "(budget.max_infeasible_in_a_row); narrow the search space")


def test_a_step_reports_how_long_the_trials_it_told_held_their_leases(api: Api) -> None:
    """The pace its next step's hold is judged by (service.scheduling.loop: `_pause`)."""
    study_id = api.create_study(budget={"max_trials": 20}, parallelism=3)["id"]
    step = stepper(api, study_id)
    step()
    worker = api.worker()
    held = [api.lease(worker) for _ in range(2)]
    leased = time.monotonic()
    time.sleep(0.4)
    for lease in held:
        assert lease is not None
        assert api.post_result(worker, lease["token"], RESULT).status_code == 200
    reported = time.monotonic()
    report, _ = step()
    assert report.accounted == 2 and report.trial_s is not None
    assert 0.4 <= report.trial_s <= reported - leased + 0.05
    report, _ = step()  # nothing to tell: no lease times
    assert report.accounted == 0 and report.trial_s is None

"""The study document as stored and as every reader gets it (service.studies.document.
ResolvedDocument), on SQLite and Postgres: the stored JSON reads back typed and dumps as it was
stored, parsed once per study; and a document an earlier release stored, without the keys
added since and with one this release does not know, reads as that release ran it."""

from __future__ import annotations

from typing import Any

from conftest import Api, study_doc
from fake_worker import result_for

from service.store.models import Study
from service.studies import documents, lifecycle
from service.studies.document import ResolvedDocument, ResolvedObjective, document_of

GEMM: dict[str, Any] = {
    "name": "gemm screened", "kernel": {"backend": "triton", "builtin": "gemm_bf16"},
    "objectives": ["runtime_ms", {"name": "energy_mj"}], "measure": {"screen": {}},
    "target": {"compute_capability": "9.0"}, "constraints": [{"metric": "runtime_ms", "op": "<=", "value": 2.0}],
}


def stored_row(api: Api, study_id: int) -> tuple[Study, ResolvedDocument, ResolvedDocument]:
    """The study's row and its typed document read in two sessions."""
    state = api.client.app.state.paretune  # type: ignore[attr-defined]
    with state.db.read() as session:
        first = document_of(session.get(Study, study_id))
    with state.db.read() as session:
        study = session.get(Study, study_id)
        return study, first, document_of(study)


def test_the_stored_document_reads_back_typed_and_dumps_as_stored(api: Api) -> None:
    for sent in (study_doc(), GEMM):
        created = api.client.post("/v1/studies", json=sent, headers=api.admin)
        assert created.status_code == 201, created.text
        study, first, again = stored_row(api, created.json()["id"])
        assert again is first  # parsed once: a document never changes
        assert first.model_dump(mode="json") == study.document == created.json()["document"]
    assert first.objectives == [ResolvedObjective(name="runtime_ms", direction="minimize"),
                                ResolvedObjective(name="energy_mj", direction="minimize")]
    assert first.kernel.workload[0].dims == {"m": 4096, "n": 4096, "k": 4096}  # the built-in's
    assert [p.name for p in first.space][:2] == ["BLOCK_M", "BLOCK_N"]
    assert first.measure.screen is not None and first.measure.screen.objectives == ["runtime_ms"]
    assert first.measure.promote is not None and first.measure.promote.energy_runtime_ratio == 2.5
    assert first.target is not None and first.target.compute_capability == "9.0"
    assert first.requires_gpu and not first.compile_only
    assert first.constraints[0].metric == "runtime_ms" and first.budget.max_failed_trials == 55


def test_a_document_an_earlier_release_stored_reads_as_that_release_ran_it(api: Api) -> None:
    resolved = documents.validate(study_doc(budget={"max_trials": 8}))
    stored = resolved.model_dump(mode="json")
    for key in ("count_infeasible", "max_infeasible", "max_infeasible_in_a_row"):
        del stored["budget"][key]
    del stored["sampler"]["ordered_choices"], stored["compile_only"]
    stored["retired_setting"] = 1  # a key this release does not know
    state = api.client.app.state.paretune  # type: ignore[attr-defined]
    team = api.client.post("/v1/studies", json=study_doc(name="of the team"), headers=api.admin).json()
    with state.db.write() as session:
        team_id = session.get(Study, team["id"]).team_id
        study = lifecycle.create(session, team_id, None, resolved)
        study.document = stored  # as the earlier release wrote it
        study_id = study.id
    state.scheduler.wake(study_id)

    read = api.client.get(f"/v1/studies/{study_id}", headers=api.admin).json()
    assert read["document"] == stored and read["progress"]["infeasible_counted"] is True
    _, typed, _ = stored_row(api, study_id)
    assert typed.budget.count_infeasible and typed.budget.max_infeasible is None
    assert typed.budget.max_infeasible_in_a_row is None and not typed.sampler.ordered_choices
    assert not typed.compile_only and not typed.requires_gpu
    api.quiesce()
    assert api.run_worker(api.worker(), result_for) >= 8  # its steps run it to its budget
    done = api.client.get(f"/v1/studies/{study_id}", headers=api.admin).json()
    assert done["state"] == "completed" and done["progress"]["completed"] == 8

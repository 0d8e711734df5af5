"""Fronts compared across studies (GET /v1/compare), on SQLite and Postgres: the points of each
front with their values normalised to their own study's baseline, checked against the trials'
own values and a front computed here; the target fields that differ; and every refusal."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import Api, study_doc
from fake_worker import result_for

from service.studies.compare import ComparedTarget, differences
from wire.contract import WorkloadShape

H200 = {"hostname": "node-a", "backends": ["python"], "cpu_model": "Xeon 8480+", "gpu_name": "NVIDIA H200",
        "driver_version": "580.95.05", "cuda_version": "13.0", "compilers": {"triton": "3.5.0", "ptxas": "13.0.88"},
        "device_limits": {"compute_capability": "9.0", "shared_memory_per_block": 232448}}
H100 = {**H200, "hostname": "node-b", "gpu_name": "NVIDIA H100 80GB HBM3", "compilers": {"triton": "3.4.0",
                                                                                       "ptxas": "13.0.88"}}


def register(api: Api, pool: str, fingerprint: dict[str, Any]) -> tuple[dict[str, str], int]:
    headers = api.headers(api.token(kind="worker", pool=pool))
    r = api.client.post("/v1/workers/register", headers=headers,
                        json={"name": fingerprint["hostname"], "pool": pool, "fingerprint": fingerprint})
    assert r.status_code == 201, r.text
    return headers, int(r.json()["worker_id"])


def scaled(factor: float) -> Any:
    """The fake objective measured on a device `factor` times slower."""
    def results(trial: dict[str, Any]) -> dict[str, Any]:
        body = result_for(trial)
        body["metrics"] = {k: {"value": m["value"] * factor} for k, m in body["metrics"].items()}
        return body
    return results


def ran(api: Api, worker: tuple[dict[str, str], int], factor: float, **changes: Any) -> int:
    r = api.client.post("/v1/studies", json=study_doc(budget={"max_trials": 14}, **changes), headers=api.admin)
    assert r.status_code == 201, r.text
    api.quiesce()
    api.run_worker(worker, scaled(factor))
    return int(r.json()["id"])


def kernel(n: int) -> dict[str, Any]:
    return {"backend": "python", "source": "tests.fake:objective", "workload": [{"dims": {"n": n}}]}


def get(api: Api, path: str, **params: str) -> Any:
    r = api.client.get(path, params=params, headers=api.admin)
    assert r.status_code == 200, r.text
    return r.json()


def front_by_hand(trials: list[dict[str, Any]], names: list[str]) -> set[int]:
    """The numbers of the completed trials no other completed trial dominates (all minimised)."""
    done = [t for t in trials if t["state"] == "completed" and t["values"]]

    def dominates(a: dict[str, float], b: dict[str, float]) -> bool:
        return all(a[n] <= b[n] for n in names) and any(a[n] < b[n] for n in names)

    return {t["number"] for t in done if not any(dominates(o["values"], t["values"]) for o in done)}


def test_fronts_normalised_to_their_own_baselines_and_the_differences(api: Api) -> None:
    h200, h100 = register(api, "default", H200), register(api, "h100", H100)
    first = ran(api, h200, 1.0, kernel=kernel(64))
    second = ran(api, h100, 1.5, kernel=kernel(128), pool="h100")

    body = get(api, "/v1/compare", studies=f"{first},{second}")
    assert [o["name"] for o in body["objectives"]] == ["f1", "f2"]
    assert [s["id"] for s in body["studies"]] == [first, second]
    for study in body["studies"]:
        trials = get(api, f"/v1/studies/{study['id']}/trials", limit="100")["items"]
        baseline = next(t for t in trials if t["is_baseline"])
        assert study["baseline_number"] == baseline["number"] == 0
        assert study["baseline"] == baseline["values"]
        assert study["state"] == "completed" and study["name"] == "zdt"
        assert {p["number"] for p in study["points"]} == front_by_hand(trials, ["f1", "f2"])
        for point in study["points"]:
            trial = get(api, f"/v1/studies/{study['id']}/trials/{point['number']}")
            assert point["values"] == trial["values"] and point["config"] == trial["config"]
            for name in ("f1", "f2"):
                assert point["normalised"][name] == pytest.approx(trial["values"][name] / baseline["values"][name])
    # the same configuration measured 1.5x slower on the other GPU: the same ratio to its own baseline
    assert body["studies"][1]["baseline"]["f2"] == pytest.approx(1.5 * body["studies"][0]["baseline"]["f2"])
    one, two = ({json.dumps(p["config"], sort_keys=True): p for p in s["points"]} for s in body["studies"])
    assert one.keys() & two.keys()  # one seed: the same configurations
    for config in one.keys() & two.keys():
        assert one[config]["normalised"] == pytest.approx(two[config]["normalised"])
        assert two[config]["values"]["f2"] == pytest.approx(1.5 * one[config]["values"]["f2"])

    targets = [s["target"] for s in body["studies"]]
    assert targets[0]["gpu"] == ["NVIDIA H200"] and targets[1]["gpu"] == ["NVIDIA H100 80GB HBM3"]
    assert targets[0]["compute_capability"] == targets[1]["compute_capability"] == ["9.0"]
    assert targets[0]["cpu"] == targets[1]["cpu"] == []  # the GPU's host CPU is not the device measured
    assert targets[0]["toolchain"] == {"driver": ["580.95.05"], "cuda": ["13.0"], "triton": ["3.5.0"],
                                       "ptxas": ["13.0.88"]}
    assert targets[1]["toolchain"]["triton"] == ["3.4.0"]
    assert targets[0]["workload"] == [{"dims": {"n": 64}, "weight": 1.0}]
    assert [t["pool"] for t in targets] == ["default", "h100"] and [t["acf"] for t in targets] == [False, False]
    assert {d["field"]: d["values"] for d in body["differences"]} == {
        "gpu": [["NVIDIA H200"], ["NVIDIA H100 80GB HBM3"]],
        "workload": [[{"dims": {"n": 64}, "weight": 1.0}], [{"dims": {"n": 128}, "weight": 1.0}]],
        "toolchain.triton": [["3.5.0"], ["3.4.0"]],
        "pool": ["default", "h100"],
    }


def test_the_same_target_has_no_differences(api: Api) -> None:
    worker = register(api, "default", {"hostname": "cpu-node", "backends": ["python"], "cpu_model": "Test CPU",
                                       "compilers": {"cc": "gcc 12.2.0"}})
    first, second = ran(api, worker, 1.0), ran(api, worker, 1.0)
    body = get(api, "/v1/compare", studies=f"{second},{first}")
    assert [s["id"] for s in body["studies"]] == [second, first]
    assert body["differences"] == []
    target = body["studies"][0]["target"]  # no GPU measured it: the CPU is its device
    assert (target["gpu"], target["cpu"], target["toolchain"]) == ([], ["Test CPU"], {"cc": ["gcc 12.2.0"]})


def test_differences_of_targets_include_the_acf() -> None:
    shape = [WorkloadShape(dims={"n": 64})]
    plain = ComparedTarget(gpu=["NVIDIA H200"], compute_capability=["9.0"], cpu=[], workload=shape,
                           toolchain={"ptxas": ["13.3.73"]}, acf=False, pool="h200")
    with_acf = plain.model_copy(update={"acf": True})
    newer = plain.model_copy(update={"toolchain": {"ptxas": ["13.3.73"], "triton": ["3.5.0"]}})
    assert [(d.field, d.values) for d in differences([plain, with_acf, plain])] == [("acf", [False, True, False])]
    assert [(d.field, d.values) for d in differences([plain, newer])] == [("toolchain.triton", [[], ["3.5.0"]])]
    assert differences([plain, plain.model_copy()]) == []


def refused(api: Api, studies: str, status: int, headers: dict[str, str] | None = None) -> dict[str, Any]:
    r = api.client.get("/v1/compare", params={"studies": studies}, headers=headers or api.admin)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["field"] == "studies"
    return error  # type: ignore[no-any-return]


def test_what_cannot_be_compared_is_refused_with_what_differs(api: Api) -> None:
    worker = register(api, "default", H200)
    first, second = ran(api, worker, 1.0), ran(api, worker, 1.0)

    assert "1 study listed: compare 2 to 6 studies" in refused(api, f"{first}", 422)["message"]
    assert "7 studies listed: compare 2 to 6" in refused(api, "1,2,3,4,5,6,7", 422)["message"]
    error = refused(api, f"{first},x,{first}", 422)
    assert [e["message"] for e in error["errors"]] == [
        "'x' is not a study id: list study ids (whole numbers) separated by commas, e.g. studies=12,15",
        f"study {first} is listed twice: list each study once"]

    other_team = api.headers(api.token(role="viewer", team="beta"))
    assert f"no study {first}, {second} in your team" in refused(api, f"{first},{second}", 404, other_team)["message"]
    assert "no study 999 in your team" in refused(api, f"{first},999", 404)["message"]

    r = api.client.post("/v1/studies", headers=api.admin, json=study_doc(
        kernel={"backend": "python", "source": "tests.fake:other"}))
    other_kernel = r.json()["id"]
    error = refused(api, f"{first},{other_kernel}", 422)
    assert "the studies tune different kernels" in error["message"] and f"study {other_kernel} tunes python source" \
        in error["message"]
    r = api.client.post("/v1/studies", headers=api.admin, json=study_doc(
        objectives=[{"name": "f1"}, {"name": "f2", "direction": "maximize"}]))
    other_objectives = r.json()["id"]
    error = refused(api, f"{first},{second},{other_objectives}", 422)
    assert error["message"] == (
        f"studies: the studies have different objectives (study {first} has f1 (minimize), f2 (minimize); "
        f"study {second} has f1 (minimize), f2 (minimize); study {other_objectives} has f1 (minimize), f2 (maximize)): "
        "compare studies of the same objectives")
    both = refused(api, f"{other_kernel},{other_objectives}", 422)
    assert len(both["errors"]) == 2  # every difference at once

    worker_headers = api.headers(api.token(kind="worker"))
    r = api.client.get("/v1/compare", params={"studies": f"{first},{second}"}, headers=worker_headers)
    assert r.status_code == 403, r.text

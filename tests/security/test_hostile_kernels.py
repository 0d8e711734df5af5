"""Hostile kernels against real workers (`python -m workers` in its own process) and a real
embedded service (SQLite in its data directory): each attack fails only its own trial with
a clear reason, or finds nothing to steal; afterwards the worker is healthy, no trial
process is left, the database and another team's results are untouched."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

from helpers import wait_for
from hostile import GOOD_MATMUL, POISONED_MATMUL, c_source, python_source, reports
from plant import (
    Plant,
    cpu_study,
    create,
    finished_trial,
    of_uids,
    python_study,
    sandbox_uids,
    superusers,
    with_marker,
)


def _victim_results(client: Any, study_ids: list[int]) -> dict[int, Any]:
    """What another team sees of its studies: trials (values, state) and fronts."""
    seen = {}
    for study_id in study_ids:
        trials = client.get(f"/v1/studies/{study_id}/trials").json()["items"]
        front = client.get(f"/v1/studies/{study_id}/front").json()
        seen[study_id] = {"trials": [(t["number"], t["state"], t["values"]) for t in trials],
                          "front": [t["number"] for t in front["trials"]], "hv": front["hypervolume"]}
    return seen


def _team_clients(plant: Plant) -> tuple[Any, Any]:
    victims = plant.service.client(plant.service.make_user_token("member", team="victims"))
    attackers = plant.service.client(plant.service.make_user_token("member", team="attackers"))
    return victims, attackers


def _everything_said(trial: dict[str, Any]) -> str:
    return json.dumps(trial)


def test_hostile_kernels_in_namespaces_find_nothing_and_fail_alone(plant: Plant) -> None:
    marker = f"escape-{uuid.uuid4().hex}"
    victims, attackers = _team_clients(plant)
    worker = plant.start_worker("namespaces")
    targets = {"token_file": str(worker.token_file), "cache": str(worker.cache_dir), "work": str(worker.work_dir),
               "data": str(plant.data_dir), "db": str(plant.db_path), "port": int(plant.service.url.rsplit(":", 1)[1]),
               "marker": marker}
    source = python_source(**targets)
    victim_ids = [create(victims, python_study("victim objective", source, "honest")),
                  create(victims, cpu_study("victim kernel", GOOD_MATMUL))]
    for study_id in victim_ids:
        assert finished_trial(victims, study_id)["state"] == "completed"
    before = _victim_results(victims, victim_ids)
    tokens_before = superusers(plant.db_path)

    small = {"processes": 64, "file_size_mb": 64, "disk_mb": 200}
    attacks = {
        "steal": python_study("steal", source, "steal"),
        "database": python_study("database", source, "database"),
        "poison": python_study("poison", source, "poison"),
        "network": python_study("network", source, "network"),
        "fork_bomb": python_study("fork bomb", source, "fork_bomb", sandbox=small),
        "allocate": python_study("20 GB", source, "allocate"),
        "big_file": python_study("5 GB file", source, "big_file", sandbox=small),
        "fill_disk": python_study("5 GB of files", source, "fill_disk", sandbox=small),
        "escape": python_study("escape", source, "escape"),
        "c_steal": cpu_study("C steal", c_source(1, token_file=str(worker.token_file))),
        "c_poison": cpu_study("C poison", c_source(2, cache_dir=str(worker.cache_dir))),
        "c_escape": cpu_study("C escape", c_source(3, marker=marker)),
        "c_allocate": cpu_study("C 20 GB", c_source(4)),
    }
    ids = {name: create(attackers, document) for name, document in attacks.items()}
    honest = create(victims, python_study("after the attacks", source, "honest"))
    trials = {name: finished_trial(attackers, study_id) for name, study_id in ids.items()}
    assert finished_trial(victims, honest)["state"] == "completed"  # the worker is healthy

    found = {name: reports(trial["log"] or "") for name, trial in trials.items()}
    steal = found["steal"][0]
    assert steal["hits"] == {} and steal["token_file"].startswith("<")
    assert steal["dirs_visible"] == [] and steal["processes"] <= 3 and steal["uid"] != 0
    assert not [k for k in steal["env_keys"] if "TOKEN" in k or "DATABASE" in k]
    database = found["database"][0]
    assert database["update"].startswith("<") and database["scribble"].startswith("<"), database
    assert superusers(plant.db_path) == tokens_before
    assert found["poison"][0] == {"overwritten": [], "refused": [], "cache_visible": False}
    assert "ConnectionRefusedError" in found["network"][0]["reply"]
    assert found["escape"][0] == {"escaped": True}
    assert "REPORT-C read" in trials["c_steal"]["log"] and "token in" not in trials["c_steal"]["log"]
    assert "cannot list" in trials["c_poison"]["log"] and "poisoned" not in trials["c_poison"]["log"]

    for name in ("steal", "database", "poison", "network", "escape", "c_steal", "c_poison", "c_escape"):
        assert trials[name]["state"] == "completed", (name, trials[name]["message"])
    failures = {name: (trials[name]["failure_reason"], trials[name]["message"])
                for name in ("fork_bomb", "allocate", "big_file", "fill_disk", "c_allocate")}
    assert failures["fork_bomb"][0] == "error"
    assert "processes limit of 64 (limits.sandbox.processes)" in failures["fork_bomb"][1]
    assert failures["allocate"][0] == "error"
    assert "exceeded its memory limit of 8192 MiB (limits.sandbox.memory_mb; the worker's cap" in failures["allocate"][
        1]
    assert failures["big_file"][0] == "error"
    assert "exceeded its file size limit of 64 MiB (limits.sandbox.file_size_mb)" in failures["big_file"][1]
    assert failures["fill_disk"][0] == "crash"
    assert "exceeded its disk limit of 200 MiB (limits.sandbox.disk_mb)" in failures["fill_disk"][1]
    assert failures["c_allocate"][0] == "crash" and "SIGSEGV" in failures["c_allocate"][1]
    assert "memory limit of 8192 MiB" in failures["c_allocate"][1]

    for name, trial in trials.items():
        assert worker.token not in _everything_said(trial), name
    assert _victim_results(victims, victim_ids) == before
    uids = sandbox_uids(plant.client(), worker.name)
    assert len(uids) == 2 and 0 not in uids
    wait_for(lambda: not of_uids(uids) and not with_marker(marker), 5, "every trial process to be gone")
    assert worker.process.poll() is None
    assert not list(worker.work_dir.glob("run-*")) and not list(worker.work_dir.glob("compile-*"))


def test_limits_still_hold_at_the_none_level(plant: Plant) -> None:
    """Without namespaces or a sandbox uid (forced here; a host without both gets it): the
    environment is scrubbed, rlimits and the disk watch hold, an escaping child is killed
    (the agent is its subreaper), and a cache entry a kernel overwrote is rebuilt."""
    marker = f"escape-{uuid.uuid4().hex}"
    victims, attackers = _team_clients(plant)
    worker = plant.start_worker("none")
    assert "ISOLATION IS NONE" in worker.log()  # said loudly at start
    targets = {"token_file": str(worker.token_file), "cache": str(worker.cache_dir), "work": str(worker.work_dir),
               "data": str(plant.data_dir), "db": str(plant.db_path), "port": 0, "marker": marker}
    source = python_source(**targets)
    victim = create(victims, cpu_study("victim kernel", GOOD_MATMUL))
    first = finished_trial(victims, victim)
    assert first["state"] == "completed" and first["compile_report"]["cached"] is False

    small = {"file_size_mb": 128, "disk_mb": 200, "memory_mb": 2048}
    attacks = {
        "steal": python_study("environment", source, "steal"),
        "poison": python_study("poison", source, "poison"),
        "allocate": python_study("20 GB", source, "allocate", sandbox=small),
        "big_file": python_study("5 GB file", source, "big_file", sandbox=small),
        "fill_disk": python_study("5 GB of files", source, "fill_disk", sandbox=small),
        "escape": python_study("escape", source, "escape"),
        "c_escape": cpu_study("C escape", c_source(3, marker=marker), config={"opt": "-O2"}),
    }
    ids = {name: create(attackers, document) for name, document in attacks.items()}
    trials = {name: finished_trial(attackers, study_id) for name, study_id in ids.items()}
    again = create(victims, cpu_study("victim kernel again", GOOD_MATMUL))  # the same cache key as `victim`
    second = finished_trial(victims, again)

    assert "env" not in reports(trials["steal"]["log"])[0]["hits"]  # nothing in its own environment
    overwritten = reports(trials["poison"]["log"])[0]["overwritten"]
    assert any(path.endswith("kernel.so") for path in overwritten)  # same user: it could write the cache
    assert second["state"] == "completed" and second["compile_report"]["cached"] is False  # rebuilt, not run
    assert second["correctness"]["passed"] is True
    assert f"artifact {second['compile_report']['cache_key']} discarded" in worker.log()
    assert trials["allocate"]["failure_reason"] == "error"
    assert "exceeded its memory limit of 2048 MiB (limits.sandbox.memory_mb)" in trials["allocate"]["message"]
    assert "exceeded its file size limit of 128 MiB" in trials["big_file"]["message"]
    assert trials["fill_disk"]["failure_reason"] == "crash"
    assert "exceeded its disk limit of 200 MiB" in trials["fill_disk"]["message"]
    assert trials["escape"]["state"] == trials["c_escape"]["state"] == "completed"
    wait_for(lambda: not with_marker(marker), 5, "the escaped children to be gone")
    assert worker.process.poll() is None


def test_a_tampered_cache_entry_is_rebuilt_never_run(plant: Plant) -> None:
    """As if a kernel had written the cache: the library of an entry is replaced by one
    that returns zeros and says so, first with the manifest left alone, then with its
    sha256 rewritten (without the cache's key). Each time the next trial with that cache
    key (another study, another team) rebuilds and runs the real code."""
    victims, attackers = _team_clients(plant)
    worker = plant.start_worker("namespaces")
    first = finished_trial(attackers, create(attackers, cpu_study("first", GOOD_MATMUL)))
    key = first["compile_report"]["cache_key"]
    entry = worker.cache_dir / key[:2] / key
    poisoned = _poisoned_library(plant.tmp)
    for forge_manifest in (False, True):
        shutil.copy(poisoned, entry / "kernel.so")
        if forge_manifest:
            manifest = json.loads((entry / "artifact.json").read_text())
            manifest["sha256"]["kernel.so"] = hashlib.sha256(poisoned.read_bytes()).hexdigest()
            (entry / "artifact.json").write_text(json.dumps(manifest))
        trial = finished_trial(victims, create(victims, cpu_study(f"victim {forge_manifest}", GOOD_MATMUL)))
        assert trial["compile_report"]["cache_key"] == key
        assert trial["state"] == "completed" and trial["correctness"]["passed"] is True
        assert trial["compile_report"]["cached"] is False  # rebuilt
        assert "POISON RAN" not in (trial["log"] or "")
        assert (entry / "kernel.so").read_bytes() != poisoned.read_bytes()
    log = worker.log()
    assert "does not match its sha256" in log and "not signed with this cache's key" in log


def _poisoned_library(tmp: Path) -> Path:
    source = tmp / "poison.c"
    source.write_text(POISONED_MATMUL)
    library = tmp / "poison.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return library

"""Compiler controls over the API: the operator's catalog, Booster Pack imports (every
problem named at once), pack parameters searched by any sampler, and the 422s of study
documents that cannot search ACFs where they ask to."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest
from acf_support import CATALOG, engine_acfs, needs_catalog
from conftest import Api, make_api

from service.controls import packs

TOOLCHAIN = {"package": "nvidia-cuda-nvcc", "version": "13.3.73", "release": "13.3", "ptxas": "13.3.73"}


@pytest.fixture
def controls_api(tmp_path: Path) -> Any:
    yield from make_api(f"sqlite:///{tmp_path / 'paretune.db'}", controls_catalog=CATALOG)


def register(api: Api, toolchain: dict[str, str] | None = TOOLCHAIN, pool: str = "default",
             backends: tuple[str, ...] = ("triton", "ptx")) -> tuple[dict[str, str], int]:
    headers = api.headers(api.token(kind="worker", pool=pool))
    fingerprint: dict[str, Any] = {"backends": list(backends), **({"toolchain": toolchain} if toolchain else {})}
    r = api.client.post("/v1/workers/register", headers=headers,
                        json={"name": "w", "pool": pool, "fingerprint": fingerprint})
    assert r.status_code == 201, r.text
    return headers, int(r.json()["worker_id"])


def pack_zip(files: dict[str, bytes], pack_id: str = "engine-pack") -> bytes:
    return packs.build(pack_id, files, compiler="ptxas", version="13.3")


def compile_study(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": "acf", "kernel": {"backend": "triton", "builtin": "gemm_bf16"},
        "space": [{"name": "BLOCK_M", "type": "categorical", "choices": [64, 128]},
                  {"name": "acf", "type": "compiler_controls", "version": "13.3"}],
        "objectives": ["registers"], "target": {"compute_capability": "9.0"},
        "sampler": {"name": "compileiq", "options": {"pool_size": 8}}, "budget": {"max_trials": 10},
    }
    doc.update(changes)
    return doc


@needs_catalog
def test_the_catalog_lists_its_search_spaces(controls_api: Api, tmp_path: Path) -> None:
    body = controls_api.client.get("/v1/controls/catalog", headers=controls_api.admin).json()
    assert body["configured"] and body["problem"] is None
    manifest = json.loads((CATALOG / "manifest.json").read_text())
    listed = {(e["compiler"], e["version"], e["variant"], e["sha256"]) for e in body["entries"]}
    assert listed == {(e["compiler"], e["compiler_version"], e["variant"], e["sha256"]) for e in manifest["entries"]}
    assert all(e["usable"] for e in body["entries"])
    # a mirror whose file does not match its manifest is listed unusable, naming why
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "fake.bin").write_bytes(b"not the listed file")
    (mirror / "manifest.json").write_text(json.dumps({"tag": "t", "generated_at": "now", "entries": [{
        "compiler": "ptxas", "compiler_version": "13.3", "variant": "default", "filename": "fake.bin",
        "sha256": "0" * 64, "size_bytes": 19}]}))
    for app in make_api(f"sqlite:///{tmp_path / 'other.db'}", controls_catalog=mirror):
        (entry,) = app.client.get("/v1/controls/catalog", headers=app.admin).json()["entries"]
        assert not entry["usable"] and "sha256" in entry["problem"]
        register(app)
        r = app.client.post("/v1/studies", json=compile_study(), headers=app.admin)
        assert r.status_code == 422 and r.json()["error"]["field"] == "space.1.version"
        assert "cannot be used" in r.json()["error"]["message"]


@needs_catalog
def test_documents_that_cannot_search_acfs_are_refused(controls_api: Api) -> None:
    api = controls_api

    def refused(doc: dict[str, Any]) -> tuple[str, str]:
        r = api.client.post("/v1/studies", json=doc, headers=api.admin)
        assert r.status_code == 422, r.text
        return r.json()["error"]["field"], r.json()["error"]["message"]

    field, message = refused(compile_study())
    assert field == "space.1.version" and "no worker of pool 'default'" in message and "--toolchain 13.3" in message
    register(api, {**TOOLCHAIN, "version": "13.5.37", "release": "13.5"})
    field, message = refused(compile_study())
    assert "13.5 on 1" in message  # what the pool's workers have
    register(api)
    assert api.client.post("/v1/studies", json=compile_study(), headers=api.admin).status_code == 201
    assert refused(compile_study(sampler={"name": "nsga2"}))[0] == "sampler.name"
    space = compile_study()["space"]
    space[1]["version"] = "12.9"
    field, message = refused(compile_study(space=space))
    assert field == "space.1.version" and "has no ptxas 12.9" in message and "ptxas 13.3 (default)" in message
    field, message = refused(compile_study(objectives=["registers", "runtime_ms"]))
    assert field == "objectives.0.name" and "compiles and never runs" in message
    assert refused(compile_study(target=None))[0] == "target.compute_capability"
    cpu = compile_study(kernel={"backend": "cpu", "builtin": "matmul"}, baseline={"BLOCK_M": 64, "acf": "none"})
    assert refused(cpu)[0] == "space.1.type"


@needs_catalog
def test_a_pack_is_imported_checked_and_searched(controls_api: Api) -> None:
    api = controls_api
    acfs = {f"a{i}.acf": content for i, content in enumerate(engine_acfs(4))}
    member = api.headers(api.token(role="member"))
    data = pack_zip(acfs)
    assert api.client.post("/v1/controls/packs", content=data, headers=member).status_code == 403
    r = api.client.post("/v1/controls/packs", content=data, headers={**api.admin, "Content-Type": "application/zip"},
                        params={"sha256": hashlib.sha256(data).hexdigest()})
    assert r.status_code == 201, r.text
    assert [f["sha256"] for f in r.json()["files"]] == [hashlib.sha256(c).hexdigest() for c in acfs.values()]
    again = api.client.post("/v1/controls/packs", content=data, headers=api.admin)
    assert again.status_code == 200  # the same zip: nothing changes
    other = api.client.post("/v1/controls/packs", content=pack_zip({"b.acf": b"other"}), headers=api.admin)
    assert other.status_code == 409  # another zip under the same pack_id

    register(api)
    doc = compile_study(sampler={"name": "random", "seed": 3}, budget={"max_trials": 6})
    doc["space"][1] = {"name": "acf", "type": "compiler_controls", "version": "13.3", "pack": "engine-pack"}
    study = api.client.post("/v1/studies", json=doc, headers=api.admin)
    assert study.status_code == 201, study.text
    choices = study.json()["document"]["space"][1]["choices"]
    assert choices == ["none", *(hashlib.sha256(c).hexdigest() for c in acfs.values())]
    assert study.json()["document"]["baseline"]["acf"] == "none"
    wrong = compile_study()
    wrong["space"][1] = {"name": "acf", "type": "compiler_controls", "version": "13.3", "pack": "nonesuch"}
    r = api.client.post("/v1/studies", json=wrong, headers=api.admin)
    assert r.status_code == 422 and r.json()["error"]["field"] == "space.1.pack" and "engine-pack" in r.text


def test_every_problem_of_a_pack_is_named() -> None:
    good = pack_zip({"a.acf": b"alpha", "b.acf": b"beta"}, "p")
    archive = zipfile.ZipFile(io.BytesIO(good))
    members = {name: archive.read(name) for name in archive.namelist()}
    members["p/a.acf"] = b"changed"  # wrong sha256 and size in the manifest and SHA256SUMS.txt
    members["p/extra.acf"] = b"not listed"
    manifest = json.loads(members["p/booster-pack-manifest.json"])
    manifest["cuda_version"] = "thirteen"
    members["p/booster-pack-manifest.json"] = json.dumps(manifest).encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as out:
        for name, content in members.items():
            out.writestr(name, content)
    with pytest.raises(packs.PackProblems) as refused:
        packs.parse(buffer.getvalue(), zip_sha256=hashlib.sha256(good).hexdigest())
    fields = {e["field"] for e in refused.value.extra["errors"]}
    assert {"zip", "booster-pack-manifest.json.cuda_version", "booster-pack-manifest.json.acfs.0.sha256",
            "booster-pack-manifest.json.acfs.0.size_bytes", "SHA256SUMS.txt.a.acf", "extra.acf"} <= fields
    parsed = packs.parse(good)
    assert (parsed.pack_id, parsed.compiler, parsed.version) == ("p", "ptxas", "13.3")
    assert {f.filename: f.content for f in parsed.files} == {"a.acf": b"alpha", "b.acf": b"beta"}
    with pytest.raises(packs.PackProblems):
        packs.parse(b"not a zip")


def test_a_pool_that_requires_a_toolchain_refuses_other_workers(controls_api: Api) -> None:
    api = controls_api
    r = api.client.put("/v1/pools/acf", json={"toolchain": "13.3"}, headers=api.admin)
    assert r.status_code == 200 and r.json()["toolchain"] == "13.3"
    register(api, pool="acf")
    headers = api.headers(api.token(kind="worker", pool="acf"))
    r = api.client.post("/v1/workers/register", headers=headers, json={"name": "old", "pool": "acf", "fingerprint": {
        "backends": ["triton"], "toolchain": {**TOOLCHAIN, "version": "13.5.37", "release": "13.5"}}})
    assert r.status_code == 403 and r.json()["error"]["field"] == "fingerprint.toolchain"
    assert "13.5.37" in r.json()["error"]["message"] and "--toolchain 13.3" in r.json()["error"]["message"]

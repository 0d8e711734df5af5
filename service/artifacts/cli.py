"""`paretune artifact verify|flags|pull|bundle|status`: approved configurations from a build
script, and how their validations are coming along.

Works on a worker-only install (`pip install paretune`, no service extras): it imports the
artifact format and runtime from the workers package and talks HTTP with httpx.
"""

from __future__ import annotations

import json
import os
import shlex
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import httpx
import typer

from service.cli_options import DEFAULT_SERVER, ServerOpt, TokenOpt
from wire.artifact import (
    ArtifactDocument,
    ArtifactVerificationError,
    SignedArtifact,
    check_integrity,
    load_public_keys,
    verify_envelope,
)

if TYPE_CHECKING:
    from service.artifacts.exports import Export
    from service.workloads.mix import TrafficMix
    from workers.runtime.bundle import LoadedArtifact

artifact_app = typer.Typer(help="Verify, inspect and fetch approved configuration artifacts.", no_args_is_help=True)

PublicKeyOpt = Annotated[
    Path | None,
    typer.Option("--public-key", envvar="PARETUNE_PUBLIC_KEY", help="trusted public key (PEM file)"),
]
KeyServerOpt = Annotated[
    str | None, typer.Option("--server", help="fetch the trusted key from this service (GET /v1/artifacts/public-key)")
]
TOOLS = ("nvcc", "nvrtc", "ptxas", "cc")
DEFAULT_TOOL = {"cuda": "nvcc", "triton": "ptxas", "cpu": "cc"}


def _fail(message: str, code: int = 1) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _get(server: str, path: str, token: str = "", **params: str) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        response = httpx.get(server.rstrip("/") + path, params=params, headers=headers, timeout=60)
    except httpx.HTTPError as exc:
        _fail(f"cannot reach {server}: {exc}")
    if response.status_code >= 400:
        _fail(error_message(response))
    return response


def error_message(response: httpx.Response) -> str:
    """The API's error body: the status, the message and the field it names; where the body
    lists several errors, each on a line of its own."""
    try:
        error = response.json()["error"]
        listed = error.get("errors") or []
        if len(listed) > 1:
            lines = "".join(f"\n  - {e.get('field') or 'body'}: {e.get('message')}" for e in listed)
            return f"{response.status_code} {len(listed)} errors:{lines}"
        where = f" (field {error['field']})" if error.get("field") else ""
        return f"{response.status_code} {error['message']}{where}"
    except (ValueError, KeyError, TypeError, AttributeError):
        return f"{response.status_code} {response.text[:500]}"


def trusted_keys(public_key: Path | None, server: str | None, token: str = "") -> dict[str, Any] | None:
    """The keys to verify with: a PEM file, or the service's key fetched from it."""
    try:
        if public_key is not None:
            return load_public_keys(public_key)
        if server:
            return load_public_keys(_get(server, "/v1/artifacts/public-key", token).content)
    except ValueError as exc:
        _fail(str(exc))
    return None


def _verified(file: Path, keys: dict[str, Any]) -> SignedArtifact:
    try:
        return verify_envelope(file, keys)
    except ArtifactVerificationError as exc:
        _fail(f"{file}: verification failed ({exc.reason.value}): {exc.message}", code=2)
        raise  # unreachable: _fail exits


def _checked(file: Path, keys: dict[str, Any] | None) -> SignedArtifact:
    """Verified with `keys`; without keys only the sha256 and the file's form are checked,
    which catches damage but not forgery (said on stderr)."""
    if keys is not None:
        return _verified(file, keys)
    try:
        signed = check_integrity(file)
    except ArtifactVerificationError as exc:
        _fail(f"{file}: verification failed ({exc.reason.value}): {exc.message}", code=2)
        raise
    typer.echo("note: signature not checked (pass --public-key or --server); sha256 verified", err=True)
    return signed


def summary(doc: ArtifactDocument) -> str:
    device = ", ".join(f"{k} {v}" for k, v in doc.target.device().items() if v)
    toolchain = ", ".join(f"{k} {v}" for k, v in doc.target.toolchain().items())
    gains = ", ".join(
        f"{m.objective} x{m.gain:.3f}{'' if m.significant else ' (not significant)'}"
        for m in doc.metrics
        if m.gain is not None
    )
    return (
        f"{doc.kernel.name} ({doc.kernel.backend}) v{doc.version} for {device or 'any device'}"
        f" [{toolchain or 'no toolchain recorded'}]; approved by {doc.provenance.approved_by} "
        f"at {doc.provenance.approved_at.isoformat()}" + (f"; gains {gains}" if gains else "")
    )


@artifact_app.command("verify")
def verify(
    file: Annotated[Path, typer.Argument(help="a signed artifact, or a file exported from artifacts")],
    artifacts: Annotated[list[Path] | None, typer.Argument(
        help="for an exported file: the signed artifacts it names (files, directories or bundles)")] = None,
    public_key: PublicKeyOpt = None,
    server: KeyServerOpt = None,
    token: TokenOpt = "",
    show: Annotated[bool, typer.Option(help="print the verified document as JSON")] = False,
) -> None:
    """Check an artifact's sha256 and signature offline, or an exported file (a vLLM tuned
    config, a triton.Config module) against the artifact ids and sha256 it carries and the
    signed artifacts it names; exit status 2 when it fails."""
    if _is_export(file):
        _verify_export(file, artifacts or [], public_key, server, token)
        return
    if artifacts:
        _fail(f"{file} is a signed artifact, not an exported file: verify it alone")
    keys = trusted_keys(public_key, server, token)
    if keys is None:
        _fail("pass --public-key FILE (the service's key) or --server URL to fetch it")
    assert keys is not None
    signed = _verified(file, keys)
    if show:
        typer.echo(json.dumps(signed.document.model_dump(mode="json"), indent=2))
        return
    typer.echo(f"OK {file}: sha256 {signed.sha256}, signed by key {signed.signature.key_id}")
    typer.echo(summary(signed.document))


@artifact_app.command("flags")
def flags(
    file: Annotated[Path, typer.Argument(help="the signed artifact file")],
    tool: Annotated[str | None, typer.Option(help=f"one of {', '.join(TOOLS)} (default: by backend)")] = None,
    output_format: Annotated[str, typer.Option("--format", help="line or json")] = "line",
    acf_dir: Annotated[
        Path | None, typer.Option(help="where to write a carried ACF file (default: next to FILE)")
    ] = None,
    ptxas: Annotated[
        Path | None, typer.Option(help="the ptxas that applies a carried ACF (default: the installed toolchain's, "
                                  "else ptxas on PATH): it must be of the release the ACF is bound to")
    ] = None,
    public_key: PublicKeyOpt = None,
    server: KeyServerOpt = None,
    token: TokenOpt = "",
) -> None:
    """The compiler flags an artifact stands for, one line ready for a build script. A carried
    ACF is written beside it and named in the flags only for a ptxas of the release it is
    bound to; another release's is refused (exit status 3), naming both."""
    from workers.runtime.apply import ControlsRefused, flags_for, write_acf

    if output_format not in ("line", "json"):
        _fail(f"--format must be line or json, not {output_format!r}")
    if tool is not None and tool not in TOOLS:
        _fail(f"--tool must be one of {', '.join(TOOLS)}, not {tool!r}")
    doc = _checked(file, trusted_keys(public_key, server, token)).document
    controls = doc.controls
    directory = acf_dir or file.resolve().parent
    chosen = tool or DEFAULT_TOOL.get(doc.kernel.backend, "nvcc")
    version = _ptxas_version(ptxas) if controls.acf is not None else None
    try:
        flags_of = {name: flags_for(controls, name, directory, version) for name in {chosen, *controls.flags}}
    except ControlsRefused as exc:
        _fail(f"refused: {exc}", code=3)
    if output_format == "line":
        typer.echo(shlex.join(flags_of[chosen]))
        return
    acf = None
    if controls.acf is not None:
        acf = {
            "name": controls.acf.name,
            "sha256": controls.acf.sha256,
            "path": str(write_acf(controls.acf, directory)),
            "compiler": controls.acf.compiler,
            "compiler_version": controls.acf.compiler_version,
            "measured_with": controls.acf.measured_with,
            "applied_with": version,
            "notice": controls.acf.notice,
        }
    body = {
        "kernel": doc.kernel.name,
        "version": doc.version,
        "backend": doc.kernel.backend,
        "flags": {name: flags_of[name] for name in controls.flags},
        "defines": controls.meta_parameters if doc.kernel.backend != "triton" else {},
        "meta_parameters": controls.meta_parameters,
        "triton_options": controls.triton_options,
        "arch": controls.arch,
        "acf": acf,
    }
    typer.echo(json.dumps(body, indent=2))


def _ptxas_version(path: Path | None) -> str | None:
    """The exact version of the ptxas that would apply an ACF: `path`, else the installed
    toolchain's, else the one on PATH; None when there is none."""
    import shutil

    from workers.compilers import toolchains

    if path is None:
        selected = toolchains.selected()
        if selected is not None:
            return selected.version
        found = shutil.which("ptxas")
        path = Path(found) if found else None
    return toolchains.ptxas_version(str(path)) if path is not None else None


@artifact_app.command("pull")
def pull(
    kernel: Annotated[str, typer.Argument(help="the kernel's name")],
    gpu: Annotated[str, typer.Option(help='GPU model, e.g. "NVIDIA H200" (or the CPU model for cpu kernels)')],
    output: Annotated[Path, typer.Option("-o", "--output", help="where to write the signed file")],
    toolchain: Annotated[str, typer.Option(help='versions to match, e.g. "triton=3.4.0,ptxas=13.0"')] = "",
    compute_capability: Annotated[str | None, typer.Option(help='e.g. "9.0"')] = None,
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = "",
    public_key: PublicKeyOpt = None,
) -> None:
    """Fetch the current approved artifact of KERNEL for a GPU and toolchain
    (GET /v1/artifacts/resolve), verify it and write it to -o."""
    from wire.targets import parse_toolchain

    try:
        parse_toolchain(toolchain)
    except ValueError as exc:
        _fail(f"--toolchain: {exc}")
    params = {"kernel": kernel, "gpu": gpu, "toolchain": toolchain}
    if compute_capability:
        params["compute_capability"] = compute_capability
    answer = _get(server, "/v1/artifacts/resolve", token, **params).json()
    data = str(answer["file"]).encode("utf-8")
    keys = trusted_keys(public_key, None if public_key else server, token)
    assert keys is not None
    with tempfile.NamedTemporaryFile(dir=output.resolve().parent, delete=False, suffix=".part") as part:
        part.write(data)
    try:
        signed = _verified(Path(part.name), keys)
        os.replace(part.name, output)
    finally:
        if os.path.exists(part.name):
            os.unlink(part.name)
    match = answer.get("match") or {}
    how = "exact match" if match.get("exact") else "nearest match: " + json.dumps(match.get("differences", {}))
    typer.echo(f"wrote {output}: {summary(signed.document)} ({how})")
    if answer.get("stale"):
        typer.echo("warning: the service marks this artifact stale (the fleet's toolchain changed)", err=True)


@artifact_app.command("bundle")
def bundle(
    files: Annotated[list[Path], typer.Argument(help="signed artifact files")],
    output: Annotated[Path, typer.Option("-o", "--output", help="the bundle to write (.json or .tar)")],
    public_key: PublicKeyOpt = None,
    server: KeyServerOpt = None,
    token: TokenOpt = "",
    embed_key: Annotated[bool, typer.Option(help="carry the trusted key in the bundle")] = True,
) -> None:
    """Verify artifacts and put them in one bundle file for the runtime module."""
    from workers.runtime.bundle import write_bundle, write_tar_bundle

    keys = trusted_keys(public_key, server, token)
    if keys is None:
        _fail("pass --public-key FILE or --server URL: a bundle holds verified artifacts only")
    assert keys is not None
    contents = []
    for file in files:
        _verified(file, keys)
        contents.append((file.name, file.read_bytes()))
    pem = None
    if embed_key:
        pem = (
            public_key.read_text() if public_key else _get(str(server), "/v1/artifacts/public-key", token).json()["pem"]
        )
    if output.suffix == ".tar":
        output.write_bytes(write_tar_bundle(contents, pem))
    else:
        output.write_bytes(write_bundle((data for _, data in contents), pem))
    typer.echo(f"wrote {output}: {len(contents)} artifacts{' and the public key' if pem else ''}")


FINISHED = ("completed", "failed")


@artifact_app.command("status")
def status(
    artifact_id: Annotated[int | None, typer.Argument(help="an artifact: its latest re-validations")] = None,
    candidate: Annotated[int | None, typer.Option(help="a candidate's validation instead")] = None,
    validation: Annotated[int | None, typer.Option(help="a validation, by its id, instead")] = None,
    watch: Annotated[bool, typer.Option(help="follow with progress bars until every validation shown has finished")
                     ] = False,
    interval: Annotated[float, typer.Option(min=0.2, help="seconds between looks, with --watch")] = 2.0,
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = "",
) -> None:
    """Rounds done and left of an artifact's re-validations (or of a candidate's validation,
    or of one validation), with an ETA from the rounds' own durations so far; then each
    verdict."""
    named = [given for given in (artifact_id, candidate, validation) if given is not None]
    if len(named) != 1:
        _fail("name one of: an ARTIFACT_ID, --candidate ID or --validation ID")
    look = _Look(server, token, artifact_id, candidate, validation)
    if watch:
        _watch(look, interval)
    for line in look.lines():
        typer.echo(line)


class _Look:
    """The validations one `status` follows, read again at each look."""

    def __init__(self, server: str, token: str, artifact_id: int | None, candidate: int | None,
                 validation: int | None) -> None:
        self.server, self.token = server, token
        self.artifact_id, self.candidate, self.validation = artifact_id, candidate, validation
        self.artifact: dict[str, Any] | None = None
        self.tracked: list[tuple[dict[str, Any], dict[str, Any] | None]] = []  # validation, its candidate
        self.refresh()

    def refresh(self) -> None:
        if self.artifact_id is not None:
            self.artifact = _get(self.server, f"/v1/artifacts/{self.artifact_id}", self.token).json()
            self.tracked = [(c["validation"], c) for c in self.artifact["revalidations"] if c["validation"]]
        elif self.candidate is not None:
            found = _get(self.server, f"/v1/candidates/{self.candidate}", self.token).json()
            if found["validation"] is None:
                _fail(f"candidate {self.candidate} has no validation")
            self.tracked = [(found["validation"], found)]
        else:
            self.tracked = [(_get(self.server, f"/v1/validations/{self.validation}", self.token).json(), None)]

    @property
    def settled(self) -> bool:
        return all(v["state"] in FINISHED for v, _ in self.tracked)

    def lines(self) -> list[str]:
        lines = []
        if self.artifact is not None:
            lines.append(_artifact_line(self.artifact))
            if not self.tracked:
                lines.append("  no re-validation yet")
        for validation, candidate in self.tracked:
            lines.append(_validation_line(validation, candidate))
            if validation["state"] not in FINISHED:
                lines += [f"  {_job_line(job)}" for job in validation["jobs"]]
            elif candidate is not None:
                lines.append(f"  {_verdict_line(candidate)}")
        return lines


def _watch(look: _Look, interval: float) -> None:
    """A bar per validation, refreshed every `interval` seconds until all have finished."""
    import time

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    bars = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[eta]}"), auto_refresh=False)
    tasks: dict[int, Any] = {}
    with bars:
        while True:
            for validation, candidate in look.tracked:
                p = validation["progress"]
                fields = {"description": _label(validation, candidate) + f" {validation['state']}",
                          "completed": p["done"], "total": (p["done"] + p["left"]) or p["rounds"], "eta": _eta(p)}
                if validation["id"] not in tasks:
                    tasks[validation["id"]] = bars.add_task(**fields)
                else:
                    bars.update(tasks[validation["id"]], **fields)
            bars.refresh()
            if look.settled:
                return
            time.sleep(interval)
            look.refresh()


def _artifact_line(artifact: dict[str, Any]) -> str:
    target = artifact["target"]
    device = target.get("gpu") or " ".join(filter(None, [target.get("cpu"), target.get("machine")])) or "any device"
    current = f"v{artifact['current_version']} current" if artifact["current_version"] else "no version current"
    stale = f"; stale: {artifact['stale_reason']}" if artifact["stale"] else ""
    return f"artifact {artifact['id']}: {artifact['kernel']} on {device}, {current}{stale}"


def _label(validation: dict[str, Any], candidate: dict[str, Any] | None) -> str:
    return f"validation {validation['id']}" + (f" (candidate {candidate['id']})" if candidate else "")


def _validation_line(validation: dict[str, Any], candidate: dict[str, Any] | None) -> str:
    p = validation["progress"]
    pace = f", {p['round_s']:.3g} s a round" if p["round_s"] is not None else ""
    left = f", {p['left']} left{pace}, {_eta(p)}" if validation["state"] not in FINISHED else pace
    return f"{_label(validation, candidate)} {validation['state']}: {p['done']}/{p['rounds']} rounds done{left}"


def _job_line(job: dict[str, Any]) -> str:
    worker = f" on worker {job['worker_id']}" if job["worker_id"] is not None and job["state"] == "running" else ""
    phase = f" ({job['phase']})" if job["phase"] and job["state"] == "running" else ""
    return f"job {job['id']} {job['state']}{worker}: {job['rounds_done']}/{job['rounds']} rounds{phase}"


def _verdict_line(candidate: dict[str, Any]) -> str:
    result = candidate.get("result") or {}
    return f"candidate {candidate['id']} {candidate['state']}" + (f": {result['message']}" if result.get("message")
                                                                  else "")


def _eta(progress: dict[str, Any]) -> str:
    if progress["eta_s"] is None:
        return "ETA unknown until a round is timed" if progress["left"] else ""
    return f"ETA {_duration(progress['eta_s'])} (at {progress['eta_at'][11:19]} UTC)"


def _duration(seconds: float) -> str:
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


export_app = typer.Typer(help="Export approved artifacts to what serving stacks read (vLLM, triton.autotune), "
                              "each with a record of the artifacts behind it.", no_args_is_help=True)
artifact_app.add_typer(export_app, name="export")
ArtifactsArg = Annotated[list[Path], typer.Argument(help="signed artifacts: files, directories or bundles")]


def _loaded(sources: list[Path], public_key: Path | None, server: str | None, token: str) -> list[LoadedArtifact]:
    """The artifacts, each verified (a bundle's embedded key is used, with a warning, when no key is given)."""
    from workers.runtime.bundle import read_artifacts

    try:
        return read_artifacts(sources, trusted_keys(public_key, server, token))
    except ArtifactVerificationError as exc:
        _fail(f"verification failed ({exc.reason.value}): {exc.message}", code=2)
    except ValueError as exc:
        _fail(str(exc))
    raise AssertionError  # unreachable: _fail exits


def _write_export(export: Export, path: Path) -> None:
    from service.artifacts.exports import record_path

    path.write_bytes(export.content)
    record_path(path).write_bytes(export.record_bytes())
    used = ", ".join(f"{ref.kernel} v{ref.version}" for ref in export.record.artifacts)
    typer.echo(f"wrote {path} and {record_path(path).name}: from {used}")


@export_app.command("vllm-moe")
def export_vllm_moe(
    artifacts: ArtifactsArg,
    output: Annotated[Path, typer.Option("-o", "--output", help="the directory (VLLM_TUNED_CONFIG_FOLDER)")],
    experts: Annotated[int | None, typer.Option("-E", "--experts", help="E (or --preset)")] = None,
    n: Annotated[int | None, typer.Option("-N", help="N: an expert's intermediate size per GPU (or --preset)")] = None,
    preset: Annotated[str | None, typer.Option(help="E and N from a model preset at --tp")] = None,
    tp: Annotated[int, typer.Option(min=1, help="tensor-parallel degree, with --preset")] = 1,
    dtype: Annotated[str | None, typer.Option(help="vLLM's dtype selector: fp8_w8a8, int8_w8a16, ...")] = None,
    block_shape: Annotated[str | None, typer.Option(help="block-wise quantization, e.g. 128,128")] = None,
    workload: Annotated[Path | None, typer.Option(help="the buckets of a `workload import --json` result")] = None,
    buckets: Annotated[str | None, typer.Option(help="the M buckets, e.g. 1,2,4,8 (or --workload)")] = None,
    fixed: Annotated[list[str] | None, typer.Option(help="KEY=VALUE the kernel held fixed: GROUP_SIZE_M=8")] = None,
    device_name: Annotated[str | None, typer.Option(help="vLLM's device name, for artifacts without a GPU")] = None,
    public_key: PublicKeyOpt = None,
    server: KeyServerOpt = None,
    token: TokenOpt = "",
) -> None:
    """vLLM's tuned fused-MoE configuration file, every bucket of the traffic from its approved artifact."""
    from service.artifacts.exports import ExportError, VllmMoeParameters, vllm_fused_moe
    from service.workloads.mix import TrafficMix, parse_buckets
    from service.workloads.presets import PresetError, layer_kernels
    from service.workloads.presets import preset as model_preset

    try:
        if preset is not None:
            moe = [k for k in layer_kernels(model_preset(preset).config, tp) if k.kind == "fused_moe"]
            if not moe:
                _fail(f"{preset} has no MoE layer")
            experts, n = moe[0].vllm["E"], moe[0].vllm["N"]
        if experts is None or n is None or (workload is None) == (buckets is None):
            _fail("give -E and -N (or --preset), and --workload or --buckets")
        grid = _traffic_buckets(TrafficMix.model_validate_json(workload.read_text())) if workload else (
            parse_buckets(str(buckets)))
        parameters = VllmMoeParameters.model_validate({
            "experts": experts, "n": n, "dtype": dtype, "device_name": device_name, "buckets": list(grid),
            "block_shape": block_shape.split(",") if block_shape else None,
            "fixed": dict(_key_value(item) for item in fixed or [])})
        export = vllm_fused_moe(_loaded(artifacts, public_key, server, token), parameters)
    except (ExportError, PresetError, ValueError) as exc:
        _fail(str(exc))
    output.mkdir(parents=True, exist_ok=True)
    _write_export(export, output / export.file_name)


def _traffic_buckets(mix: TrafficMix) -> list[int]:
    """The buckets a traffic mix puts steps in (a study measures only those)."""
    return [shape.dims[mix.dim] for shape in mix.workload]


def _key_value(text: str) -> tuple[str, int]:
    key, _, value = text.partition("=")
    if not key or not value.strip().isdigit():
        raise ValueError(f"--fixed {text!r}: write KEY=INTEGER, e.g. GROUP_SIZE_M=8")
    return key, int(value)


@export_app.command("triton")
def export_triton(
    artifacts: ArtifactsArg,
    output: Annotated[Path, typer.Option("-o", "--output", help="the Python file to write")],
    public_key: PublicKeyOpt = None,
    server: KeyServerOpt = None,
    token: TokenOpt = "",
) -> None:
    """A Python module whose CONFIGS are the approved configurations as triton.Config."""
    from service.artifacts.exports import triton_configs
    from workers.runtime.apply import triton_config_arguments

    export = triton_configs(_loaded(artifacts, public_key, server, token), triton_config_arguments, output.name)
    _write_export(export, output)


@export_app.command("check")
def export_check(
    file: Annotated[Path, typer.Argument(help="an exported file (its record beside it)")],
    artifacts: ArtifactsArg,
    public_key: PublicKeyOpt = None,
    server: KeyServerOpt = None,
    token: TokenOpt = "",
) -> None:
    """Check an exported file against its record and the signed artifacts (as `paretune artifact
    verify FILE ARTIFACTS...`); exit status 2 when it fails."""
    _verify_export(file, artifacts, public_key, server, token)


def _is_export(file: Path) -> bool:
    """Whether `file` was exported from artifacts: its record is beside it, or it is a module
    naming them."""
    from service.artifacts.exports import carried_artifacts, record_path

    if record_path(file).exists():
        return True
    try:
        return carried_artifacts(file.read_bytes()) is not None
    except OSError:
        return False


def _verify_export(file: Path, artifacts: list[Path], public_key: Path | None, server: str | None,
                   token: str) -> None:
    import hashlib

    from service.artifacts.exports import ExportError, ExportRecord, record_path
    from service.artifacts.exports import verify as verify_export
    from workers.runtime.apply import triton_config_arguments

    record = None
    if record_path(file).exists():
        try:
            record = ExportRecord.model_validate_json(record_path(file).read_bytes())
        except (OSError, ValueError) as exc:
            _fail(f"{record_path(file)}: not an export record: {exc}", code=2)
    if not artifacts:
        _fail(f"{file} is an exported file: pass the signed artifacts it names (files, directories or bundles) "
              "after it, with --public-key or --server to verify them")
    content = file.read_bytes()
    try:
        checked = verify_export(content, file.name, record, _loaded(artifacts, public_key, server, token),
                                triton_config_arguments)
    except ExportError as exc:
        _fail(f"{file}: {exc}", code=2)
    typer.echo(f"OK {file}: sha256 {hashlib.sha256(content).hexdigest()}, made from "
               + ", ".join(f"{kernel} v{version} ({str(sha)[:12]})" for kernel, version, sha in checked))

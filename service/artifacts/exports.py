"""Approved artifacts exported to what serving stacks read, each with a record of the signed
artifacts behind it.

- vLLM's fused-MoE tuned configuration: a JSON file named as vLLM's `get_config_file_name`
  names it (`E=8,N=7168,device_name=NVIDIA_H200[,dtype=fp8_w8a8][,block_shape=[128,128]].json`,
  vllm/model_executor/layers/fused_moe/fused_moe.py) mapping each batch size M to
  `{BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M, num_warps, num_stages}`, with
  `triton_version` beside them as vLLM's own tuner writes it (its loader drops that key and
  reads the others as integers). vLLM picks the key nearest a call's M, so the file holds
  every bucket of the traffic: an export refuses to leave one out;
- a `triton.Config` list, as Python source, for `triton.autotune(configs=CONFIGS, ...)`.

vLLM's loader reads every key of its file as a batch size, so the provenance cannot go inside
it: every export writes a record beside the file (`<file>.paretune.json`) naming the
artifacts (kernel, version, sha256, signing key, where they came from), which bucket each
serves, the file's sha256 and the parameters it was made with. `check` verifies a file
against that record and the signed artifacts: the file is unchanged and the artifacts give
exactly its bytes again.

Pure: the caller reads and verifies the artifacts (workers.runtime.read_artifacts).
"""

from __future__ import annotations

import ast
import hashlib
import json
import pprint
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from wire.artifact import ArtifactDocument, Controls
from wire.contract import Target

RECORD_SUFFIX = ".paretune.json"
# vLLM's keys and the names a paretune kernel may give the same parameter (the built-in GEMM's
# BLOCK_M, ...; a cpu stand-in spells the Triton options as macros)
VLLM_MOE_KEYS = {
    "BLOCK_SIZE_M": ("BLOCK_SIZE_M", "BLOCK_M"),
    "BLOCK_SIZE_N": ("BLOCK_SIZE_N", "BLOCK_N"),
    "BLOCK_SIZE_K": ("BLOCK_SIZE_K", "BLOCK_K"),
    "GROUP_SIZE_M": ("GROUP_SIZE_M", "GROUP_M"),
    "num_warps": ("num_warps", "NUM_WARPS"),
    "num_stages": ("num_stages", "NUM_STAGES"),
}
ConfigArguments = Callable[[Controls], dict[str, Any]]  # triton.Config's arguments (workers.runtime.apply)


class ExportError(ValueError):
    """The artifacts cannot make this export, or a file does not match its record."""


class Signed(Protocol):
    """A verified artifact (workers.runtime.LoadedArtifact)."""

    @property
    def document(self) -> ArtifactDocument: ...

    @property
    def sha256(self) -> str: ...

    @property
    def key_id(self) -> str: ...


class ArtifactRef(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kernel: str
    version: int
    sha256: str
    key_id: str
    target: Target
    study_id: int
    trial_id: int
    candidate_id: int | None
    approved_by: str
    approved_at: AwareDatetime

    @classmethod
    def of(cls, artifact: Signed) -> ArtifactRef:
        doc = artifact.document
        return cls(kernel=doc.kernel.name, version=doc.version, sha256=artifact.sha256, key_id=artifact.key_id,
                   target=doc.target, study_id=doc.provenance.study_id, trial_id=doc.provenance.trial_id,
                   candidate_id=doc.provenance.candidate_id, approved_by=doc.provenance.approved_by,
                   approved_at=doc.provenance.approved_at)


class VllmMoeParameters(BaseModel):
    """What names a vLLM fused-MoE file and which M keys it holds."""

    model_config = ConfigDict(extra="forbid")

    experts: int = Field(ge=1)  # E
    n: int = Field(ge=1)  # N: an expert's intermediate size per GPU (w2's last dim)
    dtype: str | None = Field(default=None, pattern=r"^[a-z0-9_]+$")  # fp8_w8a8, int8_w8a16, ...; None: bf16/fp16
    block_shape: tuple[int, int] | None = None  # block-wise quantization [block_n, block_k]
    device_name: str | None = Field(default=None, pattern=r"^[^,=/\s]+$")  # None: from the artifacts' GPU
    buckets: list[int] = Field(min_length=1)
    dim: str = "m"  # the workload dim that holds M
    fixed: dict[str, int] = Field(default_factory=dict)  # values of keys the kernel held constant


class ExportRecord(BaseModel):
    """The record written beside an export."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["paretune-export"] = "paretune-export"
    format_version: Literal[1] = 1
    kind: Literal["vllm_fused_moe", "triton_configs"]
    file: str
    sha256: str  # of the file's bytes
    parameters: dict[str, Any]
    artifacts: list[ArtifactRef]
    buckets: dict[str, str] = Field(default_factory=dict)  # M -> the sha256 of the artifact serving it


@dataclass(frozen=True)
class Export:
    file_name: str
    content: bytes
    record: ExportRecord

    def record_bytes(self) -> bytes:
        return (self.record.model_dump_json(indent=2) + "\n").encode()


def _export(kind: Literal["vllm_fused_moe", "triton_configs"], file_name: str, content: bytes,
            parameters: BaseModel | dict[str, Any], artifacts: Sequence[Signed],
            buckets: dict[str, str] | None = None) -> Export:
    values = parameters.model_dump(mode="json") if isinstance(parameters, BaseModel) else parameters
    record = ExportRecord(kind=kind, file=file_name, sha256=hashlib.sha256(content).hexdigest(), parameters=values,
                          artifacts=[ArtifactRef.of(a) for a in artifacts], buckets=buckets or {})
    return Export(file_name, content, record)


def _name(artifact: Signed) -> str:
    return f"{artifact.document.kernel.name} v{artifact.document.version} ({artifact.sha256[:12]})"


# -- vLLM -----------------------------------------------------------------------------------


def vllm_device_name(gpu: str) -> str:
    """The device name in vLLM's file names: runs of blanks and slashes become "_", and any
    H200 is NVIDIA_H200."""
    name = re.sub(r"[\s/]+", "_", gpu)
    return "NVIDIA_H200" if "H200" in name.split("_") else name


def vllm_moe_file_name(experts: int, n: int, device_name: str, dtype: str | None = None,
                       block_shape: Sequence[int] | None = None) -> str:
    name = f"E={experts},N={n},device_name={device_name}" + (f",dtype={dtype}" if dtype else "")
    if block_shape and all(block_shape):
        name += f",block_shape=[{','.join(map(str, block_shape))}]"
    return name + ".json"


def assign_buckets(artifacts: Sequence[Signed], buckets: Sequence[int], dim: str = "m") -> dict[int, Signed]:
    """The artifact serving each bucket: the one whose workload has a shape of that M. Every
    bucket needs exactly one."""
    covering = {b: [a for a in artifacts if any(s.dims.get(dim) == b for s in a.document.workload)]
                for b in buckets}
    problems = []
    missing = [str(b) for b, found in covering.items() if not found]
    if missing:
        covered = sorted({s.dims[dim] for a in artifacts for s in a.document.workload if dim in s.dims})
        problems.append(f"no artifact was measured at {dim} = {', '.join(missing)} (they cover "
                        f"{', '.join(map(str, covered)) or 'none'}): approve configurations for those buckets, "
                        "or export fewer buckets; vLLM would serve them with the nearest key's")
    for bucket, found in covering.items():
        if len(found) > 1:
            problems.append(f"{dim} = {bucket} is served by {len(found)} artifacts "
                            f"({', '.join(map(_name, found))}): pass one of them")
    if problems:
        raise ExportError("; ".join(problems))
    return {b: found[0] for b, found in covering.items()}


def _vllm_config(artifact: Signed, fixed: dict[str, int]) -> dict[str, int]:
    config = artifact.document.controls.config
    values = {}
    for key, names in VLLM_MOE_KEYS.items():
        value = next((config[name] for name in names if name in config), fixed.get(key))
        if value is None:
            raise ExportError(f"{_name(artifact)}: its configuration ({', '.join(sorted(config))}) has no {key}; "
                              f"pass --fixed {key}=VALUE if the kernel holds it constant")
        if isinstance(value, bool) or not isinstance(value, int):
            raise ExportError(f"{_name(artifact)}: {key} is {value!r}, not an integer")
        values[key] = value
    return values


def _device_name(artifacts: Sequence[Signed], given: str | None) -> str:
    devices = {json.dumps(a.document.target.device(), sort_keys=True) for a in artifacts}
    if len(devices) > 1:
        raise ExportError("the artifacts were validated on different devices; one vLLM file serves one")
    gpus = {a.document.target.gpu for a in artifacts}
    gpu = gpus.pop() if len(gpus) == 1 else None
    if gpu is None:
        if given is None:
            raise ExportError("the artifacts name no GPU (cpu stand-ins): pass --device-name as vLLM names the GPU")
        return given
    if given is not None and given != vllm_device_name(gpu):
        raise ExportError(f"the artifacts were validated on {gpu} ({vllm_device_name(gpu)} to vLLM), not {given}")
    return vllm_device_name(gpu)


def vllm_fused_moe(artifacts: Sequence[Signed], parameters: VllmMoeParameters) -> Export:
    """vLLM's tuned fused-MoE configuration file for every bucket of `parameters`."""
    buckets = sorted(set(parameters.buckets))  # ascending: vLLM's nearest-key lookup then breaks ties downward
    chosen = assign_buckets(artifacts, buckets, parameters.dim)
    used = list({a.sha256: a for a in chosen.values()}.values())
    resolved = parameters.model_copy(update={"device_name": _device_name(used, parameters.device_name),
                                             "buckets": buckets})
    tritons = {a.document.target.triton for a in used}
    body: dict[str, Any] = {"triton_version": tritons.pop()} if len(tritons) == 1 and None not in tritons else {}
    body.update({str(b): _vllm_config(chosen[b], parameters.fixed) for b in buckets})
    content = (json.dumps(body, indent=4) + "\n").encode()
    name = vllm_moe_file_name(resolved.experts, resolved.n, str(resolved.device_name), resolved.dtype,
                              resolved.block_shape)
    return _export("vllm_fused_moe", name, content, resolved, used, {str(b): chosen[b].sha256 for b in buckets})


# -- triton.autotune ------------------------------------------------------------------------


def _config_call(arguments: dict[str, Any]) -> str:
    options = "".join(f", {key}={value!r}" for key, value in arguments.items() if key != "kwargs")
    return f"triton.Config({arguments['kwargs']!r}{options})"


def triton_configs(artifacts: Sequence[Signed], config_arguments: ConfigArguments,
                   file_name: str = "paretune_configs.py") -> Export:
    """Python source defining CONFIGS, the artifacts' configurations as triton.Config (each
    once, in the artifacts' order), and PARETUNE_ARTIFACTS, where they came from."""
    used = list({a.sha256: a for a in artifacts}.values())
    calls: list[str] = []
    notes = []
    for artifact in used:
        controls, arguments = artifact.document.controls, config_arguments(artifact.document.controls)
        if _config_call(arguments) not in calls:
            calls.append(_config_call(arguments))
        launch = {k: v for k, v in controls.triton_options.items() if k not in arguments and v is not None}
        if launch or controls.acf:
            notes.append(f"# {_name(artifact)}: also pass at launch what triton.Config cannot carry: "
                         f"{', '.join(f'{k}={v!r}' for k, v in launch.items()) or 'its ACF'} "
                         "(workers.runtime.ArtifactStore.launch_options)")
    provenance = [{"kernel": a.document.kernel.name, "version": a.document.version, "sha256": a.sha256,
                   "key_id": a.key_id, "device": a.document.target.device(),
                   "shapes": [s.dims for s in a.document.workload]} for a in used]
    source = "\n".join([
        f'"""triton.Config list of {len(used)} approved paretune artifacts, generated: check it with',
        f'`paretune artifact export check {file_name} ARTIFACTS...`."""',
        "",
        "import triton",
        "",
        *notes,
        f"PARETUNE_ARTIFACTS = {pprint.pformat(provenance, sort_dicts=False, width=110)}",
        "",
        "CONFIGS = [",
        *(f"    {call}," for call in calls),
        "]",
        "",
    ])
    return _export("triton_configs", file_name, source.encode(), {"file_name": file_name}, used)


# -- checking -------------------------------------------------------------------------------


def record_path(file: Path) -> Path:
    return file.with_name(file.name + RECORD_SUFFIX)


def rebuild(record: ExportRecord, artifacts: Sequence[Signed], config_arguments: ConfigArguments) -> Export:
    """The export `record` describes, made again from `artifacts` (those it names, in its order)."""
    given = {a.sha256: a for a in artifacts}
    missing = [f"{ref.kernel} v{ref.version} ({ref.sha256[:12]})" for ref in record.artifacts
               if ref.sha256 not in given]
    if missing:
        raise ExportError(f"the export was made from artifacts not given here: {', '.join(missing)}")
    named = [given[ref.sha256] for ref in record.artifacts]
    if record.kind == "vllm_fused_moe":
        return vllm_fused_moe(named, VllmMoeParameters.model_validate(record.parameters))
    return triton_configs(named, config_arguments, **record.parameters)


def check(content: bytes, record: ExportRecord, artifacts: Sequence[Signed], config_arguments: ConfigArguments) -> None:
    """ExportError unless `content` is the file the record describes and the artifacts give it."""
    if hashlib.sha256(content).hexdigest() != record.sha256:
        raise ExportError(f"{record.file} changed after it was exported (its sha256 is not the record's)")
    _carried_agree(content, record)
    if rebuild(record, artifacts, config_arguments).content != content:
        raise ExportError(f"the artifacts named by the record do not give {record.file}'s content")


def carried_artifacts(content: bytes) -> list[dict[str, Any]] | None:
    """The artifacts a triton.Config module names (its PARETUNE_ARTIFACTS), None for a file that
    names none (a vLLM file: its record holds them)."""
    try:
        tree = ast.parse(content)
    except (SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "PARETUNE_ARTIFACTS" for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return None
            return value if isinstance(value, list) and all(isinstance(v, dict) for v in value) else None
    return None


def _ids(refs: Sequence[dict[str, Any] | ArtifactRef]) -> list[tuple[Any, Any, Any]]:
    return [(r["kernel"], r["version"], r["sha256"]) if isinstance(r, dict) else (r.kernel, r.version, r.sha256)
            for r in refs]


def _carried_agree(content: bytes, record: ExportRecord) -> None:
    """What the file itself carries agrees with its record: a module's artifact ids, a vLLM
    file's M keys."""
    carried = carried_artifacts(content)
    if carried is not None and _ids(carried) != _ids(record.artifacts):
        raise ExportError(f"{record.file} names artifacts other than its record's")
    if record.kind == "vllm_fused_moe":
        keys = sorted(json.loads(content).keys() - {"triton_version"}, key=int)
        if keys != sorted(record.buckets, key=int):
            raise ExportError(f"{record.file} holds M keys {', '.join(keys)}, its record {', '.join(record.buckets)}")


def verify(content: bytes, file_name: str, record: ExportRecord | None, artifacts: Sequence[Signed],
           config_arguments: ConfigArguments) -> list[tuple[Any, Any, Any]]:
    """Check an exported file against the artifact ids and sha256 it carries (in itself, or in
    its record: vLLM's loader reads every key of its file as a batch size) and against the signed
    artifacts: they are those named and give exactly its bytes. Returns the (kernel, version,
    sha256) checked; ExportError says what does not hold."""
    if record is not None:
        check(content, record, artifacts, config_arguments)
        return _ids(record.artifacts)
    carried = carried_artifacts(content)
    if carried is None:
        raise ExportError(f"{file_name} names no artifacts and has no record beside it ({file_name}{RECORD_SUFFIX}): "
                          "a vLLM file's artifacts are in its record; keep the two together")
    given = {a.sha256: a for a in artifacts}
    missing = [f"{k} v{v} ({str(sha)[:12]})" for k, v, sha in _ids(carried) if sha not in given]
    if missing:
        raise ExportError(f"{file_name} was made from artifacts not given here: {', '.join(missing)}")
    rebuilt = triton_configs([given[str(sha)] for _, _, sha in _ids(carried)], config_arguments, file_name)
    if _ids(rebuilt.record.artifacts) != _ids(carried) or rebuilt.content != content:
        raise ExportError(f"{file_name} is not what the artifacts it names give: it changed after it was exported")
    return _ids(carried)

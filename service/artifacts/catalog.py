"""The catalog of approved artifacts: search, resolve (the nearest target), staleness, and
the approved configurations a new study may start from (warm_start: catalog).

Resolving follows the runtime module's rules (wire.targets): the device must match,
then the fewest weighted toolchain differences, then the highest version, then the latest
approval. Only current versions are served.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from service.artifacts import audit
from service.artifacts.versions import kernel_name
from service.errors import NotFound
from service.store.models import Artifact, ArtifactVersion, Pool, Worker, as_utc, utcnow
from service.studies.document import ResolvedDocument
from service.studies.space import SearchSpace
from wire.contract import Target
from wire.targets import WEIGHTS, toolchain_differences


@dataclass(frozen=True)
class Resolved:
    artifact: Artifact
    version: ArtifactVersion
    differences: dict[str, tuple[str, str | None]]

    @property
    def exact(self) -> bool:
        return not self.differences


def _current_rows(session: Session, team_id: int | None, kernel: str | None = None) -> list[tuple[Artifact,
                                                                                                   ArtifactVersion]]:
    stmt = (select(Artifact, ArtifactVersion)
            .join(ArtifactVersion, (ArtifactVersion.artifact_id == Artifact.id)
                  & (ArtifactVersion.version == Artifact.current_version))
            .where(Artifact.team_id == team_id).order_by(Artifact.id))
    if kernel is not None:
        stmt = stmt.where(Artifact.kernel == kernel)
    return [(a, v) for a, v in session.execute(stmt).all()]


@dataclass(frozen=True)
class Search:
    kernel: str | None = None  # a part of the kernel's name
    gpu: str | None = None  # a part of the device's name (GPU or CPU model)
    toolchain: dict[str, str] | None = None  # versions that must equal the target's
    workload: dict[str, int] | None = None  # dims one of its workload's shapes has
    stale: bool | None = None


def search(session: Session, team_id: int | None, where: Search, limit: int = 200) -> list[Artifact]:
    stmt = select(Artifact).where(Artifact.team_id == team_id).order_by(Artifact.kernel, Artifact.id)
    if where.kernel:
        stmt = stmt.where(func.lower(Artifact.kernel).contains(where.kernel.lower(), autoescape=True))
    if where.gpu:
        stmt = stmt.where(func.lower(Artifact.gpu).contains(where.gpu.lower(), autoescape=True))
    if where.stale is not None:
        stmt = stmt.where(Artifact.stale.is_(where.stale))
    found = []
    for artifact in session.execute(stmt).scalars():
        if where.toolchain and any(artifact.target.get(k) != v for k, v in where.toolchain.items()):
            continue
        if where.workload and not _has_shape(session, artifact, where.workload):
            continue
        found.append(artifact)
        if len(found) >= limit:
            break
    return found


def _has_shape(session: Session, artifact: Artifact, dims: dict[str, int]) -> bool:
    documents = session.execute(select(ArtifactVersion.document).where(
        ArtifactVersion.artifact_id == artifact.id)).scalars()
    return any(all(shape["dims"].get(k) == v for k, v in dims.items())
               for document in documents for shape in document.get("workload", []))


def device_matches(target: dict[str, Any], gpu: str, compute_capability: str | None, machine: str | None) -> bool:
    """`gpu` names the GPU model, or the CPU model for cpu-backend artifacts."""
    if target.get("gpu") is not None:
        return target["gpu"] == gpu and (compute_capability is None
                                         or target.get("compute_capability") == compute_capability)
    return target.get("cpu") == gpu and (machine is None or target.get("machine") == machine)


def resolve(session: Session, team_id: int | None, kernel: str, gpu: str, compute_capability: str | None,
            toolchain: dict[str, str], machine: str | None = None) -> Resolved:
    ranked = []
    for artifact, version in _current_rows(session, team_id, kernel):
        if not device_matches(artifact.target, gpu, compute_capability, machine):
            continue
        target = Target.model_validate(artifact.target)
        here = Target.model_validate({**target.model_dump(), **{k: None for k in Target.TOOLCHAIN_FIELDS},
                                      **toolchain})
        differences = toolchain_differences(target, here)
        distance = sum(WEIGHTS.get(name, 1) for name in differences)
        ranked.append(((distance, -version.version, -as_utc(version.approved_at).timestamp(), artifact.id),
                       Resolved(artifact, version, differences)))
    if not ranked:
        known = sorted({a.gpu or "?" for a, _ in _current_rows(session, team_id, kernel)})
        detail = f"; it has current versions for: {', '.join(known)}" if known else ""
        raise NotFound(f"no current approved artifact of kernel {kernel!r} for {gpu!r}"
                       f"{' compute capability ' + compute_capability if compute_capability else ''}{detail}",
                       field="gpu" if known else "kernel")
    ranked.sort(key=lambda item: item[0])
    return ranked[0][1]


# -- staleness -------------------------------------------------------------------------------


def worker_target(fingerprint: dict[str, Any]) -> dict[str, str | None]:
    """What a registering worker's fingerprint says about the target fields."""
    compilers = fingerprint.get("compilers") or {}
    return {
        "gpu": fingerprint.get("gpu_name"), "cpu": fingerprint.get("cpu_model"), "machine": fingerprint.get("machine"),
        "driver": fingerprint.get("driver_version"), "cuda": fingerprint.get("cuda_version"),
        "triton": compilers.get("triton"), "ptxas": compilers.get("ptxas"), "nvrtc": compilers.get("nvrtc"),
        "cc": compilers.get("cc"),
    }


def toolchain_changes(target: dict[str, Any], worker: dict[str, str | None]) -> dict[str, tuple[str, str]]:
    """The toolchain fields the worker knows that differ from the artifact's target, when
    the worker has the target's device; empty otherwise."""
    if target.get("gpu") is not None:
        same_device = worker["gpu"] == target["gpu"]
    elif target.get("cpu") is None and target.get("compute_capability") is not None:
        same_device = True  # a compile-only build's target: any worker of the pool builds it
    else:
        same_device = worker["cpu"] == target.get("cpu") and worker["machine"] in (None, target.get("machine"))
    if not same_device:
        return {}
    return {name: (str(target[name]), str(worker[name])) for name in Target.TOOLCHAIN_FIELDS
            if target.get(name) is not None and worker.get(name) is not None and worker[name] != target[name]}


def mark_stale(session: Session, worker: Worker) -> list[Artifact]:
    """Artifacts of the worker's pool whose target the worker's toolchain differs from:
    marked stale (still served, flagged). Returns those newly marked."""
    seen = worker_target(worker.fingerprint or {})
    newly = []
    rows = session.execute(select(Artifact).where(Artifact.pool == worker.pool, Artifact.stale.is_(False),
                                                  Artifact.current_version.is_not(None))).scalars()
    for artifact in rows:
        changes = toolchain_changes(artifact.target, seen)
        if not changes:
            continue
        why = (f"worker {worker.name!r} of pool {worker.pool!r} registered with "
               + ", ".join(f"{name} {new!r} (artifact: {old!r})" for name, (old, new) in changes.items()))
        artifact.stale, artifact.stale_reason, artifact.updated_at = True, why[:2000], utcnow()
        session.execute(update(ArtifactVersion).where(ArtifactVersion.artifact_id == artifact.id,
                                                      ArtifactVersion.version == artifact.current_version)
                        .values(stale=True))
        audit.record(session, artifact.team_id, audit.Actor(audit.SERVICE_ACTOR, None), "stale", "artifact",
                     artifact.id, why, worker_id=worker.id, changes={k: list(v) for k, v in changes.items()})
        newly.append(artifact)
    return newly


def auto_revalidates(session: Session, pool: str) -> bool:
    row = session.get(Pool, pool)
    return bool(row is not None and row.auto_revalidate)


# -- warm start ------------------------------------------------------------------------------


def warm_start_configs(session: Session, team_id: int, kernel: str, pool: str, limit: int = 8) -> list[dict[str, Any]]:
    """The approved configurations of `kernel`, closest targets first: the device of the
    pool's most recently seen worker and its toolchain, then the newest approval."""
    rows = _current_rows(session, team_id, kernel)
    if not rows:
        return []
    latest = session.execute(select(Worker.fingerprint).where(Worker.pool == pool)
                             .order_by(Worker.last_seen_at.desc()).limit(1)).scalar_one_or_none()
    seen = worker_target(latest or {})

    def distance(artifact: Artifact) -> int:
        target = artifact.target
        device = target.get("gpu") or target.get("cpu")
        if device is None or device not in (seen["gpu"], seen["cpu"]):
            return 1000
        return sum(WEIGHTS.get(name, 1) for name in Target.TOOLCHAIN_FIELDS
                   if target.get(name) is not None and target.get(name) != seen.get(name))

    ordered = sorted(rows, key=lambda row: (distance(row[0]), -as_utc(row[1].approved_at).timestamp()))
    configs: list[dict[str, Any]] = []
    for _, version in ordered:
        config = dict(version.document["controls"]["config"])
        if config not in configs:
            configs.append(config)
    return configs[:limit]


def warm_start(session: Session, team_id: int, document: ResolvedDocument) -> list[dict[str, Any]]:
    """For a study document with `warm_start: catalog`, the approved configurations its
    first trials take: those of its kernel whose every value fits the study's space (values
    of parameters the space does not have are left out; parameters it adds are sampled)."""
    name = kernel_name(document.kernel, document.name)
    space = SearchSpace(document.space)
    names = set(space.names)
    fitting = []
    for config in warm_start_configs(session, team_id, name, document.pool):
        params = {k: v for k, v in config.items() if k in names}
        if params and all(space.value_problem(k, v) is None for k, v in params.items()) and params not in fitting:
            fitting.append(params)
    return fitting

"""Artifact versions: approval signs a validated candidate into an immutable version of
(kernel, target); one version per artifact is current; supersede, rollback, revoke and
re-validation, each recorded in the audit log.

A version's signed content (document, file, sha256, signature) is written once: the
database refuses any later change (the trigger of migration 0006), and so does the API.
"""

from __future__ import annotations

import hashlib
from typing import Any, NoReturn

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.artifacts import audit, validations
from service.artifacts.signing import SigningKey
from service.artifacts.states import CANDIDATE, VERSION, CandidateState, VersionState
from service.artifacts.transitions import transition_candidate, transition_version
from service.controls import files as controls_files
from service.errors import Conflict, Forbidden, NotFound
from service.store.db import is_postgres
from service.store.models import (
    Artifact,
    ArtifactVersion,
    Candidate,
    ControlsFile,
    Study,
    Validation,
    as_utc,
    utcnow,
)
from service.store.storable import storable_text
from service.studies.document import document_of
from wire import canonical_json, paretune_version
from wire.artifact import (
    NVIDIA_NOTICE,
    AcfFile,
    ArtifactDocument,
    CorrectnessSummary,
    Provenance,
    SignedArtifact,
    ValidatedMetric,
    sign,
)
from wire.artifact_controls import controls_for, kernel_identity
from wire.contract import KernelSpec, ShapeCorrectness, Target

MEASUREMENT_METHOD = "paretune-measure/1"  # docs/measurement.md


def kernel_name(kernel: KernelSpec, study_name: str) -> str:
    """An artifact's kernel name: the built-in's, else the kernel's entry symbol, else the
    name of the study that tuned it."""
    if kernel.builtin:
        return kernel_identity(kernel).name
    return kernel.entry or study_name


def target_key(target: Target) -> str:
    return hashlib.sha256(canonical_json.dumps(target.model_dump(mode="json"))).hexdigest()


def visible_artifact(session: Session, team_id: int | None, artifact_id: int, *, lock: bool = False) -> Artifact:
    stmt = select(Artifact).where(Artifact.id == artifact_id)
    if lock and is_postgres(session):
        stmt = stmt.with_for_update()
    artifact = session.execute(stmt).scalar_one_or_none()
    if artifact is None or artifact.team_id != team_id:
        raise NotFound(f"no artifact {artifact_id} in your team", field="artifact_id")
    return artifact


def version_of(session: Session, artifact: Artifact, version: int) -> ArtifactVersion:
    row = session.execute(select(ArtifactVersion).where(
        ArtifactVersion.artifact_id == artifact.id, ArtifactVersion.version == version)).scalar_one_or_none()
    if row is None:
        raise NotFound(f"artifact {artifact.id} has no version {version}", field="version")
    return row


def current_of(session: Session, artifact: Artifact) -> ArtifactVersion | None:
    return None if artifact.current_version is None else version_of(session, artifact, artifact.current_version)


# -- approval --------------------------------------------------------------------------------


def carried_files(session: Session, kernel: KernelSpec, config: dict[str, Any],
                  target: Target) -> dict[str, AcfFile]:
    """The controls files `config` names, as an artifact carries them: bound to the compiler
    release they were generated for, with the exact version the validation measured with and
    NVIDIA's notice (files of CompileIQ and of Booster Packs are NVIDIA's outputs)."""
    shas = controls_files.named(kernel.controls, [config])
    if not shas:
        return {}
    names = {str(config[n]): n for n in kernel.controls if config.get(n) in shas}
    rows = session.execute(select(ControlsFile).where(ControlsFile.sha256.in_(shas))).scalars()
    return {row.sha256: AcfFile.of(f"{names[row.sha256]}-{row.sha256[:12]}", row.content, compiler=row.compiler,
                                   compiler_version=row.version, measured_with=target.ptxas, notice=NVIDIA_NOTICE)
            for row in rows}


def approve(session: Session, candidate: Candidate, actor: audit.Actor, key: SigningKey, why: str) -> ArtifactVersion:
    """Sign a validated candidate into the next version of its (kernel, target)."""
    if candidate.promoted_by is not None and candidate.promoted_by == actor.token_id:
        raise Forbidden(f"you promoted candidate {candidate.id}; approval needs a second person: another "
                        "approver of the team must approve it", field="candidate_id")
    _require_validated(candidate)
    validation = session.get(Validation, candidate.validation_id)
    study = session.get(Study, candidate.study_id)
    assert validation is not None and study is not None and validation.results is not None
    if validation.target is None:
        raise Conflict(f"validation {validation.id} recorded no target; re-validate", field="candidate_id")
    result = validation.results[str(candidate.id)]
    target = Target.model_validate(validation.target)
    tuned = document_of(study)
    kernel = tuned.kernel
    identity = kernel_identity(kernel, kernel_name(kernel, study.name))
    artifact = _artifact_for(session, study, identity.name, kernel.backend, target)
    previous = current_of(session, artifact)
    number = 1 + int(session.execute(select(func.coalesce(func.max(ArtifactVersion.version), 0)).where(
        ArtifactVersion.artifact_id == artifact.id)).scalar_one())
    now = utcnow()
    arch = f"sm_{target.compute_capability.replace('.', '')}" if target.compute_capability else None
    document = ArtifactDocument(
        version=number,
        supersedes=previous.version if previous is not None else None,
        kernel=identity,
        target=target,
        workload=kernel.workload,
        controls=controls_for(kernel, candidate.config, arch=arch, acfs=carried_files(session, kernel, candidate.config,
                                                                                      target)),
        metrics=[ValidatedMetric.model_validate(m) for m in result["metrics"]],
        correctness=CorrectnessSummary(passed=True,
                                       shapes=[ShapeCorrectness.model_validate(s) for s in result["correctness"]],
                                       scope="compiled" if tuned.compile_only else "run"),
        provenance=Provenance(
            study_id=study.id, trial_id=candidate.trial_id, trial_number=candidate.trial_number,
            candidate_id=candidate.id, validation_id=validation.id,
            worker_fingerprints=list(validation.fingerprints or []), measurement_method=MEASUREMENT_METHOD,
            promoted_by=candidate.promoted_by_name, promoted_at=as_utc(candidate.created_at),
            validated_at=as_utc(validation.finished_at or now), approved_by=actor.name, approved_at=now,
            service_version=paretune_version(),
        ),
    )
    signed = sign(document, key.private_key)
    if previous is not None:
        transition_version(session, previous, VersionState.SUPERSEDED, artifact)
        audit.record(session, study.team_id, actor, "supersede", "artifact", artifact.id, why,
                     version=previous.version, by_version=number)
    row = _insert(session, artifact, signed, candidate, actor, now)
    artifact.current_version, artifact.stale, artifact.stale_reason, artifact.updated_at = number, False, None, now
    audit.record(session, study.team_id, actor, "approve", "artifact", artifact.id, why, version=number,
                 candidate_id=candidate.id, sha256=signed.sha256, kernel=identity.name)
    transition_candidate(session, candidate, CandidateState.APPROVED, actor, why,
                         {"artifact_id": artifact.id, "version": number}, version_id=row.id)
    return row


def _require_validated(candidate: Candidate) -> None:
    if CANDIDATE.allows(candidate.state, CandidateState.APPROVED):
        return
    hints = {
        CandidateState.VALIDATING.value: "its validation has not finished; wait for its result",
        CandidateState.FAILED.value: "it failed validation (a wrong result on a shape, or it could not be "
                                     "measured), so it cannot be approved",
        CandidateState.APPROVED.value: "it is approved already",
        CandidateState.REJECTED.value: "it was rejected; promote the trial again to start over",
    }
    raise Conflict(f"candidate {candidate.id} is {candidate.state}: {hints.get(candidate.state, '')}",
                   field="candidate_id")


def _artifact_for(session: Session, study: Study, kernel: str, backend: str, target: Target) -> Artifact:
    key = target_key(target)
    stmt = select(Artifact).where(Artifact.team_id == study.team_id, Artifact.kernel == kernel,
                                  Artifact.target_key == key)
    if is_postgres(session):
        stmt = stmt.with_for_update()
    artifact = session.execute(stmt).scalar_one_or_none()
    if artifact is None:
        now = utcnow()
        artifact = Artifact(team_id=study.team_id, kernel=kernel, backend=backend, pool=study.pool,
                            target=target.model_dump(mode="json"), target_key=key, gpu=target.gpu or target.cpu,
                            stale=False, created_at=now, updated_at=now)
        session.add(artifact)
        session.flush()
    return artifact


def _insert(session: Session, artifact: Artifact, signed: SignedArtifact, candidate: Candidate | None,
            actor: audit.Actor, now: Any) -> ArtifactVersion:
    row = ArtifactVersion(
        artifact_id=artifact.id, version=signed.document.version, candidate_id=candidate.id if candidate else None,
        validation_id=candidate.validation_id if candidate else None,
        document=signed.document.model_dump(mode="json"), file=signed.file_bytes().decode("utf-8"),
        sha256=signed.sha256, signature=signed.signature.model_dump(mode="json"),
        state=VERSION.initial.value, stale=False, approved_by_name=actor.name, approved_at=now,
    )
    session.add(row)
    session.flush()
    return row


# -- after approval --------------------------------------------------------------------------


def rollback(session: Session, artifact: Artifact, version: int, actor: audit.Actor, why: str) -> ArtifactVersion:
    """Make an earlier (superseded) version current again; no document changes."""
    row = version_of(session, artifact, version)
    if not VERSION.allows(row.state, VersionState.CURRENT):
        raise Conflict(f"version {version} is {row.state}; only a superseded version can be made current again",
                       field="version")
    current = current_of(session, artifact)
    if current is not None:
        transition_version(session, current, VersionState.SUPERSEDED, artifact)
    transition_version(session, row, VersionState.CURRENT, artifact)
    audit.record(session, artifact.team_id, actor, "rollback", "artifact", artifact.id, why, version=version,
                 from_version=current.version if current is not None else None)
    return row


def revoke(session: Session, artifact: Artifact, version: int, actor: audit.Actor, why: str) -> ArtifactVersion:
    """A revoked version is never served again; revoking the current one leaves no version
    current until an approval or a rollback names one."""
    row = version_of(session, artifact, version)
    if not VERSION.allows(row.state, VersionState.REVOKED):
        raise Conflict(f"version {version} is {row.state} already", field="version")
    was_current = row.state == VersionState.CURRENT
    transition_version(session, row, VersionState.REVOKED, artifact)
    audit.record(session, artifact.team_id, actor, "revoke", "artifact", artifact.id, why, version=version,
                 was_current=was_current)
    return row


def refuse_edit(session: Session, artifact: Artifact, version: int) -> NoReturn:
    """Any change to an approved version is refused (the database refuses it too)."""
    row = version_of(session, artifact, version)
    raise Conflict(f"version {row.version} of artifact {artifact.id} is approved and immutable: nothing is edited "
                   "after approval. Promote and approve a new candidate (it supersedes this version), roll back "
                   "to another version, or revoke this one", field="version")


def revalidate(session: Session, artifact: Artifact, actor: audit.Actor, note: str,
               rounds: int) -> tuple[Candidate, Validation]:
    """Validate the current version's configuration again on the pool as it is now."""
    current = current_of(session, artifact)
    if current is None:
        raise Conflict(f"artifact {artifact.id} has no current version to re-validate; roll back to one first",
                       field="artifact_id")
    provenance = current.document["provenance"]
    study = session.get(Study, provenance["study_id"])
    if study is None or study.team_id != artifact.team_id:
        raise Conflict(f"the study {provenance['study_id']} this artifact came from is gone", field="artifact_id")
    now = utcnow()
    candidate = Candidate(
        study_id=study.id, team_id=study.team_id, trial_id=provenance["trial_id"],
        trial_number=provenance.get("trial_number") or 0, config=dict(current.document["controls"]["config"]),
        note=storable_text(note), state=CANDIDATE.initial.value, promoted_by=actor.token_id,
        promoted_by_name=actor.name, artifact_id=artifact.id, created_at=now, updated_at=now,
    )
    session.add(candidate)
    session.flush()
    validation = validations.start(session, study, [candidate], rounds=rounds, requested_by=actor.name)
    audit.record(session, artifact.team_id, actor, "revalidate", "artifact", artifact.id, note,
                 version=current.version, candidate_id=candidate.id, validation_id=validation.id)
    return candidate, validation

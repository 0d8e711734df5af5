"""Reading artifacts from disk and verifying every one: a signed file, a directory of them,
or a bundle holding several.

A bundle is either a tar file whose members are signed artifact files (`*.json`, verified
byte for byte) and optionally `public-key.pem`, or one JSON file:

    {"format": "paretune-artifact-bundle", "format_version": 1,
     "artifacts": [<artifact envelope>, ...], "public_key": {"key_id": ..., "pem": ...} | null}

whose entries are verified by content (sha256 and signature). A key embedded in a bundle
travelled with the artifacts it vouches for: it proves they were not damaged in transit, not
that the service signed them. It is used only when no trusted key is given, with a warning.
"""

from __future__ import annotations

import io
import json
import tarfile
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wire import canonical_json
from wire.artifact import (
    ArtifactDocument,
    ArtifactVerificationError,
    SignedArtifact,
    TrustedKeys,
    VerificationFailure,
    load_public_keys,
    verify_envelope,
    verify_value,
)

BUNDLE_FORMAT = "paretune-artifact-bundle"
BUNDLE_KEY_MEMBER = "public-key.pem"


class EmbeddedKeyWarning(UserWarning):
    """Artifacts were verified with the key their bundle carries: integrity only."""


@dataclass(frozen=True)
class LoadedArtifact:
    document: ArtifactDocument
    sha256: str
    key_id: str
    source: str  # the file (and entry) it came from


@dataclass
class _Entry:
    source: str
    file_bytes: bytes | None = None  # a whole signed file: verified byte for byte
    envelope: Any = None  # a parsed bundle entry: verified by content


def read_artifacts(
    source: str | Path | Iterable[str | Path], public_keys: TrustedKeys | None = None
) -> list[LoadedArtifact]:
    """Every artifact under `source` (files, directories, bundles), each verified;
    ArtifactVerificationError names the first that fails."""
    sources = [source] if isinstance(source, str | Path) else list(source)
    entries: list[_Entry] = []
    embedded: list[str] = []
    for item in sources:
        path = Path(item)
        files = sorted(p for p in path.iterdir() if p.suffix in (".json", ".tar")) if path.is_dir() else [path]
        for file in files:
            found, key = _entries(file)
            entries += found
            if key:
                embedded.append(key)
    keys = _trusted(public_keys, embedded)
    return [_verified(entry, keys) for entry in entries]


def _trusted(public_keys: TrustedKeys | None, embedded: list[str]) -> TrustedKeys:
    if public_keys is not None:
        return load_public_keys(public_keys)
    if not embedded:
        raise ValueError(
            "no trusted public key: pass public_keys (the service's key, GET /v1/artifacts/public-key) "
            "or use a bundle that embeds one"
        )
    warnings.warn(
        "artifacts verified with the public key embedded in their bundle: this proves they are "
        "intact, not that your service signed them; pass the service's key to check that",
        EmbeddedKeyWarning,
        stacklevel=3,
    )
    return load_public_keys([pem.encode() for pem in embedded])


def _entries(path: Path) -> tuple[list[_Entry], str | None]:
    """The artifacts in one file and the public key it embeds, if any."""
    try:
        if tarfile.is_tarfile(path):
            return _tar_entries(path)
        data = path.read_bytes()
    except OSError as exc:
        raise ArtifactVerificationError(VerificationFailure.MALFORMED, f"cannot read {path}: {exc}") from None
    try:
        value = canonical_json.loads(data)
    except ValueError as exc:
        raise ArtifactVerificationError(VerificationFailure.MALFORMED, f"{path}: not JSON: {exc}") from None
    if isinstance(value, dict) and value.get("format") == BUNDLE_FORMAT:
        artifacts = value.get("artifacts")
        if not isinstance(artifacts, list):
            raise ArtifactVerificationError(VerificationFailure.MALFORMED, f"{path}: a bundle without artifacts")
        key = (value.get("public_key") or {}).get("pem")
        return [_Entry(f"{path}#{i}", envelope=e) for i, e in enumerate(artifacts)], key
    return [_Entry(str(path), file_bytes=data)], None


def _tar_entries(path: Path) -> tuple[list[_Entry], str | None]:
    entries, key = [], None
    with tarfile.open(path) as archive:
        for member in archive.getmembers():
            if not member.isfile():
                continue
            handle = archive.extractfile(member)
            data = handle.read() if handle is not None else b""
            if Path(member.name).name == BUNDLE_KEY_MEMBER:
                key = data.decode("utf-8", "replace")
            elif member.name.endswith(".json"):
                entries.append(_Entry(f"{path}:{member.name}", file_bytes=data))
    return entries, key


def _verified(entry: _Entry, keys: TrustedKeys) -> LoadedArtifact:
    try:
        if entry.file_bytes is not None:
            signed: SignedArtifact = verify_envelope(entry.file_bytes, keys)
        else:
            signed = verify_value(entry.envelope, keys)
    except ArtifactVerificationError as exc:
        raise ArtifactVerificationError(exc.reason, f"{entry.source}: {exc.message}") from None
    return LoadedArtifact(signed.document, signed.sha256, signed.signature.key_id, entry.source)


def write_bundle(files: Iterable[bytes], public_key_pem: str | None = None) -> bytes:
    """A JSON bundle of signed artifact files (their bytes), optionally embedding a key."""
    artifacts = [canonical_json.loads(data) for data in files]
    bundle: dict[str, Any] = {"format": BUNDLE_FORMAT, "format_version": 1, "artifacts": artifacts}
    if public_key_pem:
        (key_id,) = load_public_keys(public_key_pem.encode())
        bundle["public_key"] = {"key_id": key_id, "pem": public_key_pem}
    return json.dumps(bundle, indent=1).encode() + b"\n"


def write_tar_bundle(files: Iterable[tuple[str, bytes]], public_key_pem: str | None = None) -> bytes:
    """A tar bundle: each (name, signed file bytes) as a member, and the key if given."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        members = list(files)
        if public_key_pem:
            members.append((BUNDLE_KEY_MEMBER, public_key_pem.encode()))
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()

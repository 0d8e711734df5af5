"""The approved-configuration artifact: its document, its sha256 and its Ed25519 signature.

An artifact file is one JSON object in canonical form (wire.canonical_json, RFC 8785)
followed by a newline:

    {"document":{...},"sha256":"<hex>","signature":{"algorithm":"ed25519","key_id":"<id>","value":"<base64>"}}

`sha256` is the SHA-256 of the canonical bytes of `document`, and `signature.value` the
Ed25519 signature of those same bytes by the service key `key_id` (the first 16 hex digits of
the SHA-256 of the key's 32 raw public bytes). Because the whole file is canonical, the
document's signed bytes appear in it verbatim, between `{"document":` and the last
`,"sha256":"`: a build can check them with sha256sum and openssl alone (docs/artifacts.md).

This module needs neither the service nor the network: a worker-only install verifies
artifacts offline with `verify`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Iterable, Mapping
from enum import StrEnum
from pathlib import Path
from typing import IO, Any, Final, Literal

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, model_validator

from wire import canonical_json
from wire.contract import ShapeCorrectness, Target, WorkloadShape

FORMAT: Final = "paretune-artifact"
FORMAT_VERSION: Final = 1
ALGORITHM: Final = "ed25519"
SHA256_HEX = r"^[0-9a-f]{64}$"
ACF_PLACEHOLDER = "{acf}"  # in a flag, stands for the path the carried ACF file is written to


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class KernelIdentity(_Strict):
    """Which kernel the configuration is for. `source_sha256` is the kernel source hash of
    the provenance: the SHA-256 of the source text (UTF-8) the candidate was compiled from."""

    name: str = Field(min_length=1, max_length=200)
    backend: str = Field(min_length=1)
    source_sha256: str = Field(pattern=SHA256_HEX)
    entry: str | None = None
    builtin: str | None = None


NVIDIA_NOTICE: Final = "© NVIDIA Corporation, 2026."  # what CompileIQ's licence asks of its outputs


class AcfFile(_Strict):
    """An NVIDIA Advanced Controls File the configuration applies, carried as opaque bytes.

    `compiler` and `compiler_version` say what it is bound to: the compiler release it was
    generated for (ptxas 13.3 refuses any other release's files, and another release's ptxas
    refuses it); `measured_with` the exact compiler version the validation measured it with.
    A file CompileIQ generated, or a Booster Pack's, carries NVIDIA's notice."""

    name: str = Field(min_length=1, max_length=200)
    sha256: str = Field(pattern=SHA256_HEX)
    content_base64: str
    compiler: str | None = None  # ptxas | nvcc
    compiler_version: str | None = None  # the release it is bound to: "13.3"
    measured_with: str | None = None  # "13.3.73"
    notice: str | None = None

    @classmethod
    def of(cls, name: str, content: bytes, **binding: str | None) -> AcfFile:
        return cls(
            name=name,
            sha256=hashlib.sha256(content).hexdigest(),
            content_base64=base64.b64encode(content).decode("ascii"),
            **binding,
        )

    def refusal(self, compiler_version: str | None) -> str | None:
        """Why a compiler of `compiler_version` (its exact version, None: unknown) must not
        apply this file, or None."""
        if self.compiler_version is None:
            return None
        bound = f"{self.compiler or 'ptxas'} {self.compiler_version}"
        measured = f", measured with {self.measured_with}" if self.measured_with else ""
        if compiler_version is None:
            return (f"the ACF {self.sha256[:12]} is bound to {bound}{measured}, and which {self.compiler or 'ptxas'} "
                    "applies it is not known: name it (--ptxas PATH)")
        if ".".join(compiler_version.split(".")[:2]) != self.compiler_version:
            install = self.measured_with or self.compiler_version + ".X"
            return (f"the ACF {self.sha256[:12]} is bound to {bound}{measured}; this {self.compiler or 'ptxas'} is "
                    f"{compiler_version}, which refuses it: apply it with a {self.compiler_version} "
                    f"{self.compiler or 'ptxas'} (paretune toolchain install nvidia-cuda-nvcc=={install}) "
                    "or use an artifact validated with this one")
        return None

    def content(self) -> bytes:
        return strict_b64decode(self.content_base64, "acf.content_base64")

    @model_validator(mode="after")
    def _hash_matches(self) -> AcfFile:
        if hashlib.sha256(self.content()).hexdigest() != self.sha256:
            raise ValueError(f"ACF {self.name!r}: sha256 does not match its bytes")
        return self


class Controls(_Strict):
    """What the configuration sets. `config` is the configuration exactly as tuned and
    validated; the other fields are the same configuration split the way tools take it.

    flags: tool -> its arguments, for the tools that apply: "cc" (host C compiler, cpu
    backend), "nvcc", "nvrtc", "ptxas". A flag holding `{acf}` refers to the carried ACF
    file: whoever applies the flags writes `acf` to a file and puts its path there.
    """

    config: dict[str, Any]
    meta_parameters: dict[str, Any] = Field(default_factory=dict)  # Triton constexprs, C/CUDA macros
    triton_options: dict[str, Any] = Field(default_factory=dict)  # num_warps, num_stages, ...
    arch: str | None = None  # "sm_90" for CUDA builds
    flags: dict[str, list[str]] = Field(default_factory=dict)
    acf: AcfFile | None = None


class ValidatedMetric(_Strict):
    """One objective of the candidate against the baseline, from interleaved paired rounds.

    ratio = candidate / baseline (geometric means over the rounds), with its confidence
    interval; gain is the improvement factor whatever the direction (>1 is better:
    baseline/candidate when minimised, candidate/baseline when maximised); significant when
    the ratio's interval excludes 1.
    """

    objective: str
    direction: Literal["minimize", "maximize"]
    unit: str = ""
    baseline: float | None  # None: no usable round
    candidate: float | None
    ratio: float | None
    ci_low: float | None  # None: too few rounds for an interval
    ci_high: float | None
    gain: float | None
    gain_ci_low: float | None
    gain_ci_high: float | None
    significant: bool
    verdict: Literal["better", "worse", "no_difference", "insufficient"]
    confidence: float = Field(gt=0, lt=1)
    rounds: int = Field(ge=0)  # paired rounds used
    jobs: int = Field(ge=0)  # validation jobs (GPUs) they came from
    excluded: int = 0  # rounds left out (a non-positive or non-finite value)


class CorrectnessSummary(_Strict):
    passed: bool
    shapes: list[ShapeCorrectness] = Field(default_factory=list)
    # "run": checked against the reference on every shape; "compiled": a compile-only study's
    # candidate compiled for every shape and never ran (check it on a GPU before serving it)
    scope: Literal["run", "compiled"] = "run"


class Provenance(_Strict):
    study_id: int
    trial_id: int
    trial_number: int | None = None
    candidate_id: int | None = None
    validation_id: int
    worker_fingerprints: list[dict[str, Any]] = Field(default_factory=list)
    measurement_method: str  # e.g. "paretune-measure/1": see docs/measurement.md
    promoted_by: str
    promoted_at: AwareDatetime
    validated_at: AwareDatetime
    approved_by: str
    approved_at: AwareDatetime
    service_version: str = ""


class ArtifactDocument(_Strict):
    """The signed content of one artifact version of (kernel, target)."""

    format: Literal["paretune-artifact"] = FORMAT
    format_version: Literal[1] = FORMAT_VERSION
    version: int = Field(ge=1)  # of this (kernel, target), 1, 2, ...
    supersedes: int | None = None  # the version that was current when this one was approved
    kernel: KernelIdentity
    target: Target
    workload: list[WorkloadShape] = Field(default_factory=list)  # the shapes it was measured on
    controls: Controls
    metrics: list[ValidatedMetric] = Field(default_factory=list)
    correctness: CorrectnessSummary
    provenance: Provenance

    @model_validator(mode="after")
    def _only_correct(self) -> ArtifactDocument:
        if not self.correctness.passed:
            raise ValueError("an artifact needs a candidate that passed correctness")
        return self


class Signature(_Strict):
    algorithm: Literal["ed25519"] = ALGORITHM
    key_id: str = Field(min_length=1)
    value: str  # base64 of the 64-byte Ed25519 signature


class SignedArtifact(_Strict):
    """The envelope: the document, its sha256 and the signature, as one file holds them."""

    document: ArtifactDocument
    sha256: str = Field(pattern=SHA256_HEX)
    signature: Signature

    def file_bytes(self) -> bytes:
        """The file: the canonical JSON of the envelope and a newline."""
        return canonical_json.dumps(self.model_dump(mode="json")) + b"\n"


class VerificationFailure(StrEnum):
    MALFORMED = "malformed"  # not JSON, or not an artifact envelope
    CONTENT_CHANGED = "content_changed"  # the document does not hash to the recorded sha256
    UNKNOWN_KEY = "unknown_key"  # signed by a key that is not trusted here
    BAD_SIGNATURE = "bad_signature"  # the signature does not verify under that key
    NOT_CANONICAL = "not_canonical"  # the bytes were changed without changing the content
    UNSUPPORTED_FORMAT = "unsupported_format"  # a format this paretune does not read


class ArtifactVerificationError(ValueError):
    """Verification failed; `reason` says which check, the message what to do."""

    def __init__(self, reason: VerificationFailure, message: str) -> None:
        super().__init__(f"{reason.value}: {message}")
        self.reason = reason
        self.message = message


# -- hashing and signing --------------------------------------------------------------------


def _document_value(doc: ArtifactDocument | Mapping[str, Any]) -> Any:
    return doc.model_dump(mode="json") if isinstance(doc, ArtifactDocument) else doc


def canonical_bytes(doc: ArtifactDocument | Mapping[str, Any]) -> bytes:
    """The bytes that are hashed and signed: the canonical JSON of the document."""
    return canonical_json.dumps(_document_value(doc))


def digest(doc: ArtifactDocument | Mapping[str, Any]) -> str:
    """The document's sha256, lower-case hex."""
    return hashlib.sha256(canonical_bytes(doc)).hexdigest()


def key_id(public_key: Ed25519PublicKey) -> str:
    """A key's id: the first 16 hex digits of the SHA-256 of its 32 raw bytes."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def sign(doc: ArtifactDocument, private_key: Ed25519PrivateKey) -> SignedArtifact:
    """Hash and sign a document (the service does this when an approver approves)."""
    payload = canonical_bytes(doc)
    signature = private_key.sign(payload)
    return SignedArtifact(
        document=doc,
        sha256=hashlib.sha256(payload).hexdigest(),
        signature=Signature(
            key_id=key_id(private_key.public_key()),
            value=base64.b64encode(signature).decode("ascii"),
        ),
    )


def strict_b64decode(text: str, what: str) -> bytes:
    """Base64 that re-encodes to exactly `text`: no other spelling of the same bytes."""
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{what} is not base64") from None
    if base64.b64encode(data).decode("ascii") != text:
        raise ValueError(f"{what} is not in canonical base64")
    return data


# -- trusted keys --------------------------------------------------------------------------

KeySource = Ed25519PublicKey | bytes | str | Path
TrustedKeys = Mapping[str, Ed25519PublicKey] | Iterable[KeySource] | KeySource


def load_public_keys(source: TrustedKeys) -> dict[str, Ed25519PublicKey]:
    """Trusted keys by id from: a key, PEM text or bytes (one or several PEM blocks), a
    file of them, the JSON of `GET /v1/artifacts/public-key`, a mapping id -> key, or a
    list of any of these."""
    if isinstance(source, Mapping):
        return {key_id(k): k for k in source.values()}
    if isinstance(source, Ed25519PublicKey):
        return {key_id(source): source}
    if isinstance(source, Path):
        return load_public_keys(str(source))
    if isinstance(source, str):
        if "-----BEGIN" in source or source.lstrip().startswith("{"):
            return _keys_from_bytes(source.encode())
        try:
            return _keys_from_bytes(Path(source).read_bytes())
        except OSError as exc:
            raise ValueError(f"cannot read the public key file {source}: {exc}") from None
    if isinstance(source, bytes):
        return _keys_from_bytes(source)
    keys: dict[str, Ed25519PublicKey] = {}
    for item in source:
        keys.update(load_public_keys(item))
    return keys


def _keys_from_bytes(data: bytes) -> dict[str, Ed25519PublicKey]:
    text = data.decode("utf-8", "replace")
    if text.lstrip().startswith("{"):
        try:
            info = canonical_json.loads(data)
            pem = info["pem"]
        except (ValueError, KeyError, TypeError):
            raise ValueError("a JSON key file must be the public-key endpoint's answer (with 'pem')") from None
        return _keys_from_bytes(str(pem).encode())
    blocks = text.split("-----BEGIN ")[1:]
    if not blocks:
        raise ValueError("no PEM public key found (expected -----BEGIN PUBLIC KEY-----)")
    keys = {}
    for block in blocks:
        key = serialization.load_pem_public_key(("-----BEGIN " + block).encode())
        if not isinstance(key, Ed25519PublicKey):
            raise ValueError(f"a {type(key).__name__} is not an Ed25519 public key")
        keys[key_id(key)] = key
    return keys


# -- verification --------------------------------------------------------------------------


def _read(source: bytes | str | Path | IO[bytes]) -> bytes:
    if isinstance(source, bytes):
        return source
    if isinstance(source, str | Path):
        try:
            return Path(source).read_bytes()
        except OSError as exc:
            raise ArtifactVerificationError(VerificationFailure.MALFORMED, f"cannot read {source}: {exc}") from None
    return source.read()


def verify(source: bytes | str | Path | IO[bytes], public_keys: TrustedKeys) -> ArtifactDocument:
    """The document of a signed artifact file (its bytes, a path or a binary file) once its
    sha256 and signature check out against `public_keys`; ArtifactVerificationError
    saying which check failed otherwise."""
    return verify_envelope(source, public_keys).document


def verify_envelope(source: bytes | str | Path | IO[bytes], public_keys: TrustedKeys) -> SignedArtifact:
    """As `verify`, returning the whole envelope (document, sha256 and signature)."""
    data = _read(source)
    envelope = _parse(data)
    signed = verify_value(envelope, public_keys)
    _require_canonical(data, envelope)
    return signed


def verify_value(envelope: Any, public_keys: TrustedKeys) -> SignedArtifact:
    """Verify a parsed envelope (an entry of a bundle): sha256, key and signature."""
    document, payload, signature = _hashed(envelope)
    keys = load_public_keys(public_keys)
    key = keys.get(signature["key_id"])
    if key is None:
        raise ArtifactVerificationError(
            VerificationFailure.UNKNOWN_KEY,
            f"signed with key {signature['key_id']}, which is not trusted here "
            f"(trusted: {', '.join(sorted(keys)) or 'none'}); get the service's key from "
            "GET /v1/artifacts/public-key",
        )
    try:
        raw_signature = strict_b64decode(signature["value"], "signature.value")
        key.verify(raw_signature, payload)
    except (ValueError, InvalidSignature):
        raise ArtifactVerificationError(
            VerificationFailure.BAD_SIGNATURE,
            f"the signature does not verify under key {signature['key_id']}",
        ) from None
    return _model(envelope, document)


def check_integrity(source: bytes | str | Path | IO[bytes]) -> SignedArtifact:
    """The sha256 and the file's canonical form, without the signature: this catches damage
    but not forgery (anyone can recompute a sha256). For tools that have no key at hand."""
    data = _read(source)
    envelope = _parse(data)
    document, _, _ = _hashed(envelope)
    signed = _model(envelope, document)
    _require_canonical(data, envelope)
    return signed


def _parse(data: bytes) -> Any:
    try:
        return canonical_json.loads(data)
    except ValueError as exc:
        raise ArtifactVerificationError(VerificationFailure.MALFORMED, f"not an artifact file: {exc}") from None


def _require_canonical(data: bytes, envelope: Any) -> None:
    canonical = canonical_json.dumps(envelope)
    if data not in (canonical, canonical + b"\n"):
        raise ArtifactVerificationError(
            VerificationFailure.NOT_CANONICAL,
            "the signed content is intact, but the file's bytes were changed after it was "
            "written (re-formatted or edited); use the file exactly as pulled",
        )


def _hashed(envelope: Any) -> tuple[dict[str, Any], bytes, dict[str, str]]:
    """(document, its canonical bytes, signature) once the recorded sha256 checks out."""
    document, recorded, signature = _envelope_parts(envelope)
    payload = canonical_bytes(document)
    actual = hashlib.sha256(payload).hexdigest()
    if actual != recorded:
        raise ArtifactVerificationError(
            VerificationFailure.CONTENT_CHANGED,
            f"the document hashes to {actual} but the file records {recorded}: it was changed after signing",
        )
    return document, payload, signature


def _model(envelope: dict[str, Any], document: dict[str, Any]) -> SignedArtifact:
    if document.get("format") != FORMAT or document.get("format_version") != FORMAT_VERSION:
        raise ArtifactVerificationError(
            VerificationFailure.UNSUPPORTED_FORMAT,
            f"format {document.get('format')!r} version {document.get('format_version')!r}; "
            f"this paretune reads {FORMAT!r} version {FORMAT_VERSION}: upgrade paretune",
        )
    try:
        return SignedArtifact.model_validate(envelope)
    except ValidationError as exc:
        raise ArtifactVerificationError(
            VerificationFailure.MALFORMED, f"signed, but not a valid artifact document: {exc}"
        ) from None


def _envelope_parts(envelope: Any) -> tuple[dict[str, Any], str, dict[str, str]]:
    def malformed(what: str) -> ArtifactVerificationError:
        return ArtifactVerificationError(VerificationFailure.MALFORMED, f"not an artifact envelope: {what}")

    if not isinstance(envelope, dict) or set(envelope) != {"document", "sha256", "signature"}:
        raise malformed("expected exactly the members document, sha256 and signature")
    document, recorded, signature = envelope["document"], envelope["sha256"], envelope["signature"]
    if not isinstance(document, dict):
        raise malformed("document is not an object")
    if not isinstance(recorded, str):
        raise malformed("sha256 is not a string")
    if (
        not isinstance(signature, dict)
        or set(signature) != {"algorithm", "key_id", "value"}
        or not all(isinstance(v, str) for v in signature.values())
    ):
        raise malformed("signature must hold the strings algorithm, key_id and value")
    if signature["algorithm"] != ALGORITHM:
        raise ArtifactVerificationError(
            VerificationFailure.UNSUPPORTED_FORMAT, f"signature algorithm {signature['algorithm']!r} (expected ed25519)"
        )
    return document, recorded, signature

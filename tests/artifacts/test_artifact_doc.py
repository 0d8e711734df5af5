"""The signed artifact file: round trip, every single-byte change refused with the right
reason, and the offline recipe of docs/artifacts.md (plain sha256sum and openssl)."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wire import canonical_json
from wire.artifact import (
    AcfFile,
    ArtifactDocument,
    ArtifactVerificationError,
    CorrectnessSummary,
    VerificationFailure,
    canonical_bytes,
    check_integrity,
    digest,
    key_id,
    load_public_keys,
    sign,
    verify,
    verify_envelope,
)
from wire.contract import KernelSpec


def public_pem(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


@pytest.fixture(scope="module")
def signing_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture(scope="module")
def signed_file(signing_key: Ed25519PrivateKey) -> bytes:
    from artifact_factory import make_document

    kernel = KernelSpec(backend="cuda", builtin="rmsnorm", options={"acf_files": {"wide": "controls\n\u00e9\x01"}})
    config = {"THREADS": 512, "VEC": 8, "use_fast_math": True, "fma": False, "acf": "wide"}
    return sign(make_document(kernel=kernel, config=config), signing_key).file_bytes()


def test_round_trip(signing_key: Ed25519PrivateKey, document_factory) -> None:
    doc = document_factory()
    signed = sign(doc, signing_key)
    data = signed.file_bytes()
    assert verify(data, [signing_key.public_key()]) == doc
    assert verify_envelope(data, signing_key.public_key()) == signed
    assert signed.sha256 == digest(doc) == hashlib.sha256(canonical_bytes(doc)).hexdigest()
    assert data.endswith(b"}\n") and data.count(b"\n") == 1
    # the file is its own canonical form: what verification recomputes is what was written
    assert canonical_json.dumps(json.loads(data)) + b"\n" == data


def test_acf_bytes_travel_intact(signed_file: bytes, signing_key: Ed25519PrivateKey) -> None:
    doc = verify(signed_file, [signing_key.public_key()])
    assert doc.controls.acf is not None
    assert doc.controls.acf.content() == "controls\n\u00e9\x01".encode()
    assert doc.controls.flags["ptxas"] == ["--apply-controls", "{acf}"]


@settings(max_examples=400, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_changed_byte_fails_verification(signed_file: bytes, signing_key: Ed25519PrivateKey, data) -> None:
    position = data.draw(st.integers(min_value=0, max_value=len(signed_file) - 1))
    replacement = data.draw(st.integers(min_value=0, max_value=255).filter(lambda b: b != signed_file[position]))
    changed = signed_file[:position] + bytes([replacement]) + signed_file[position + 1 :]
    with pytest.raises(ArtifactVerificationError):
        verify(changed, [signing_key.public_key()])


def test_every_position_of_a_small_file(signing_key: Ed25519PrivateKey, document_factory) -> None:
    """Exhaustive over positions (each with a neighbouring byte), so no region of the file
    (keys, numbers, base64, the trailing newline) escapes."""
    data = sign(document_factory(), signing_key).file_bytes()
    keys = [signing_key.public_key()]
    for position in range(len(data)):
        changed = bytearray(data)
        changed[position] ^= 0x01
        with pytest.raises(ArtifactVerificationError):
            verify(bytes(changed), keys)


def _envelope(data: bytes) -> dict:
    return json.loads(data)


def _write(envelope: dict) -> bytes:
    return canonical_json.dumps(envelope) + b"\n"


def test_reasons(signed_file: bytes, signing_key: Ed25519PrivateKey) -> None:
    keys = [signing_key.public_key()]

    def reason(data: bytes, trusted=keys) -> VerificationFailure:
        with pytest.raises(ArtifactVerificationError) as caught:
            verify(data, trusted)
        return caught.value.reason

    edited = _envelope(signed_file)
    edited["document"]["controls"]["config"]["THREADS"] = 1024
    assert reason(_write(edited)) is VerificationFailure.CONTENT_CHANGED

    edited["sha256"] = hashlib.sha256(canonical_json.dumps(edited["document"])).hexdigest()
    assert reason(_write(edited)) is VerificationFailure.BAD_SIGNATURE  # rehashed, but not re-signed

    assert reason(signed_file, [Ed25519PrivateKey.generate().public_key()]) is VerificationFailure.UNKNOWN_KEY

    pretty = json.dumps(_envelope(signed_file), indent=2).encode()
    assert reason(pretty) is VerificationFailure.NOT_CANONICAL
    assert check_integrity(signed_file).document == verify(signed_file, keys)

    assert reason(b"not json") is VerificationFailure.MALFORMED
    assert reason(b'{"document": {}, "sha256": "00"}') is VerificationFailure.MALFORMED

    future = _envelope(signed_file)
    future["document"]["format_version"] = 2
    payload = canonical_json.dumps(future["document"])
    future["sha256"] = hashlib.sha256(payload).hexdigest()
    future["signature"]["value"] = base64.b64encode(signing_key.sign(payload)).decode()
    assert reason(_write(future)) is VerificationFailure.UNSUPPORTED_FORMAT


def test_error_messages_say_what_failed(signed_file: bytes, signing_key: Ed25519PrivateKey) -> None:
    edited = _envelope(signed_file)
    edited["document"]["version"] = 9
    with pytest.raises(ArtifactVerificationError, match="changed after signing"):
        verify(_write(edited), [signing_key.public_key()])
    other = Ed25519PrivateKey.generate().public_key()
    with pytest.raises(ArtifactVerificationError, match=f"trusted: {key_id(other)}"):
        verify(signed_file, [other])


def test_key_ids_and_key_files(tmp_path: Path, signing_key: Ed25519PrivateKey) -> None:
    raw = signing_key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    expected = hashlib.sha256(raw).hexdigest()[:16]
    assert key_id(signing_key.public_key()) == expected
    other = Ed25519PrivateKey.generate()
    both = tmp_path / "keys.pem"
    both.write_bytes(public_pem(signing_key) + public_pem(other))
    assert set(load_public_keys(both)) == {expected, key_id(other.public_key())}
    assert set(load_public_keys(str(both))) == set(load_public_keys(both))
    endpoint = json.dumps({"key_id": expected, "pem": public_pem(signing_key).decode(), "raw_base64": "x"})
    assert set(load_public_keys(endpoint)) == {expected}
    with pytest.raises(ValueError, match="cannot read"):
        load_public_keys(str(tmp_path / "missing.pem"))


def test_acf_hash_must_match_its_bytes() -> None:
    acf = AcfFile.of("x", b"abc")
    with pytest.raises(ValueError, match="sha256"):
        AcfFile(name="x", sha256=hashlib.sha256(b"abd").hexdigest(), content_base64=acf.content_base64)
    two = AcfFile.of("x", b"ab")
    assert two.content_base64 == "YWI="
    with pytest.raises(ValueError, match="canonical base64"):  # "YWJ=" decodes to b"ab" too
        AcfFile(name="x", sha256=two.sha256, content_base64="YWJ=")


def test_a_document_needs_a_correct_candidate(document_factory) -> None:
    doc = document_factory().model_dump()
    doc["correctness"] = CorrectnessSummary(passed=False).model_dump()
    with pytest.raises(ValueError, match="passed correctness"):
        ArtifactDocument.model_validate(doc)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_documented_shell_recipe(tmp_path: Path, signed_file: bytes, signing_key: Ed25519PrivateKey) -> None:
    """docs/artifacts.md's verification with sha256sum, grep, head, tail, base64 and openssl."""
    (tmp_path / "artifact.json").write_bytes(signed_file)
    (tmp_path / "paretune-public.pem").write_bytes(public_pem(signing_key))
    script = Path(__file__).parents[2] / "docs" / "verify-artifact.sh"
    done = subprocess.run(
        ["sh", str(script), "artifact.json", "paretune-public.pem"], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Signature Verified Successfully" in done.stdout
    tampered = bytearray(signed_file)
    tampered[signed_file.index(b'"THREADS":512') + 10] = ord("6")
    (tmp_path / "artifact.json").write_bytes(bytes(tampered))
    done = subprocess.run(
        ["sh", str(script), "artifact.json", "paretune-public.pem"], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode != 0
    assert "sha256 mismatch" in done.stdout + done.stderr


def test_documented_python_recipe(tmp_path: Path, signed_file: bytes, signing_key: Ed25519PrivateKey) -> None:
    """docs/artifacts.md's Python verification (cryptography and the standard library only)."""
    text = (Path(__file__).parents[2] / "docs" / "artifacts.md").read_text()
    start = text.index("# offline verification of a paretune artifact file")
    (tmp_path / "verify.py").write_text(text[start : text.index("```", start)])
    (tmp_path / "artifact.json").write_bytes(signed_file)
    (tmp_path / "key.pem").write_bytes(public_pem(signing_key))
    command = [sys.executable, "verify.py", "artifact.json", "key.pem"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("verified: {"), done.stderr
    edited = signed_file.replace(b'"THREADS":512', b'"THREADS":256')
    (tmp_path / "artifact.json").write_bytes(edited)
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 1 and "sha256 mismatch" in done.stderr

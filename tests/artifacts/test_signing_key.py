"""The service's signing key: configured file, generated-once default, concurrent first use."""

from __future__ import annotations

import base64
import multiprocessing
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from service.artifacts.signing import (
    DEFAULT_KEY_NAME,
    SigningKeyError,
    load_signing_key,
)
from wire.artifact import key_id, sign, verify


def test_generated_once_under_the_data_dir_with_mode_0600(tmp_path: Path) -> None:
    key = load_signing_key(tmp_path / "data")
    path = tmp_path / "data" / DEFAULT_KEY_NAME
    assert key.path == path
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = load_signing_key(tmp_path / "data")
    assert again.key_id == key.key_id
    assert sorted(p.name for p in path.parent.iterdir()) == [DEFAULT_KEY_NAME]


def test_public_key_forms_agree(tmp_path: Path, document_factory) -> None:
    key = load_signing_key(tmp_path)
    info = key.public_info()
    public = serialization.load_pem_public_key(info.pem.encode())
    raw = base64.b64decode(info.raw_base64)
    assert len(raw) == 32
    assert public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw) == raw
    assert info.key_id == key_id(key.private_key.public_key()) == key.key_id
    signed = sign(document_factory(), key.private_key).file_bytes()
    assert verify(signed, info.pem).version == 1  # the published PEM verifies what the key signs


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_configured_key_file_made_by_openssl(tmp_path: Path) -> None:
    path = tmp_path / "secret" / "signing.pem"
    path.parent.mkdir()
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(path)], check=True)
    public = subprocess.run(["openssl", "pkey", "-in", str(path), "-pubout"], check=True, capture_output=True).stdout
    key = load_signing_key(tmp_path / "data", path)
    assert key.path == path
    assert key.public_info().pem.encode() == public
    assert not (tmp_path / "data").exists()  # nothing generated when a key is configured


def test_configured_key_must_exist_and_be_ed25519(tmp_path: Path) -> None:
    missing = tmp_path / "missing.pem"
    with pytest.raises(SigningKeyError, match="does not exist"):
        load_signing_key(tmp_path, missing)
    other = tmp_path / "ec.pem"
    other.write_bytes(
        ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    with pytest.raises(SigningKeyError, match="Ed25519"):
        load_signing_key(tmp_path, other)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a key")
    with pytest.raises(SigningKeyError, match="cannot read"):
        load_signing_key(tmp_path, garbage)


def _key_id_of(data_dir: str) -> str:
    return load_signing_key(Path(data_dir)).key_id


def test_concurrent_first_use_agrees_on_one_key(tmp_path: Path) -> None:
    data_dir = tmp_path / "shared"
    context = multiprocessing.get_context("spawn")
    with context.Pool(6) as pool:
        ids = pool.map(_key_id_of, [str(data_dir)] * 12)
    assert len(set(ids)) == 1
    assert os.listdir(data_dir) == [DEFAULT_KEY_NAME]  # no temporary file left behind

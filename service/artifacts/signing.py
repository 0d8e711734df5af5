"""The service's Ed25519 signing key: read from a file, or made once under the data dir.

PARETUNE_SIGNING_KEY_FILE names a PEM (PKCS#8) private key; a deployment with several
replicas must give them all the same one (on Kubernetes, a Secret mounted into every
replica, see docs/artifacts.md), or each would sign with its own key and builds would
trust only some artifacts. Without it, the key is `<data dir>/signing-key.pem`, generated on
first use with mode 0600, which fits one process or replicas sharing that directory.

Nothing here touches the database: the key is a file, and the public half is derived.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import BaseModel

from wire.artifact import ALGORITHM, key_id

KEY_FILE_ENV = "PARETUNE_SIGNING_KEY_FILE"
DEFAULT_KEY_NAME = "signing-key.pem"

log = logging.getLogger(__name__)


class SigningKeyError(Exception):
    """The configured key cannot be used (missing, unreadable, not Ed25519)."""


class PublicKeyInfo(BaseModel):
    """The body of `GET /v1/artifacts/public-key`: what builds trust."""

    algorithm: str = ALGORITHM
    key_id: str
    pem: str  # SubjectPublicKeyInfo PEM, for `openssl pkeyutl -verify -pubin -inkey`
    raw_base64: str  # the 32 raw public bytes, base64


@dataclass(frozen=True)
class SigningKey:
    private_key: Ed25519PrivateKey
    path: Path

    @property
    def key_id(self) -> str:
        return key_id(self.private_key.public_key())

    def public_info(self) -> PublicKeyInfo:
        public = self.private_key.public_key()
        pem = public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return PublicKeyInfo(key_id=self.key_id, pem=pem.decode("ascii"), raw_base64=base64.b64encode(raw).decode())


def load_signing_key(data_dir: Path, configured: Path | None = None) -> SigningKey:
    """The service's key: the configured file (PARETUNE_SIGNING_KEY_FILE; it must exist), else
    the data dir's key file, created on first use."""
    if configured is not None:
        if not configured.is_file():
            raise SigningKeyError(
                f"{KEY_FILE_ENV}={configured} does not exist; create a key with "
                f"`openssl genpkey -algorithm ed25519 -out {configured}` or unset {KEY_FILE_ENV}"
            )
        return SigningKey(read_private_key(configured), configured)
    path = Path(data_dir) / DEFAULT_KEY_NAME
    if not path.exists():
        create_key_file(path)
    return SigningKey(read_private_key(path), path)


def read_private_key(path: Path) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise SigningKeyError(f"cannot read the signing key {path}: {exc}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningKeyError(f"{path} holds a {type(key).__name__}; artifacts are signed with Ed25519")
    return key


def create_key_file(path: Path) -> bool:
    """Write a new key to `path` with mode 0600, unless a key is there already; True if
    this call created it. Safe against a concurrent first use: the key is written to a
    private temporary file and linked into place, so exactly one writer wins and nobody
    reads half a key."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    handle, temporary = tempfile.mkstemp(prefix=".signing-key-", dir=path.parent)  # mode 0600
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(pem)
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(temporary, path)
        except FileExistsError:
            return False
        log.warning("generated the artifact signing key %s: replicas must share it (set %s)", path, KEY_FILE_ENV)
        return True
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temporary)

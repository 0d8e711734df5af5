"""On-disk cache of compiled artifacts, keyed by Backend.cache_key (source hash,
configuration, compiler version), written by the agent alone and verified before every use.

An entry is a directory <root>/<key[:2]>/<key>/ holding the files of one build and
`artifact.json`, its manifest: the key, each file's sha256, the compile report and log,
authenticated with an HMAC-SHA256 under the cache's secret key (<root>/.key, readable by
the agent only). A build is never trusted where it was made: a sandbox builds into a
staging directory, and `commit` copies its regular files into a new entry (links and
special files refused), hashing them as it goes; the entry is renamed into place, so a
reader never sees half an artifact and two agents sharing the directory may build the
same key at once (the first rename wins).

`checkout` copies an entry for one trial, checking every byte it copies against the
manifest; `lookup` checks an entry in place. An entry whose manifest does not verify (a
file changed, missing or added to the list, a manifest edited or written without the key)
is deleted: the trial then compiles again, and the tampered code never runs.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from workers.backends.base import CompiledKernel
from workers.sandbox.files import UnsafeFile, copy_tree_hashed, copy_verified, read_untrusted

log = logging.getLogger(__name__)

META = "artifact.json"
KEY_FILE = ".key"
MAX_ARTIFACT_BYTES = 1 << 30
_SAFE_KEY = re.compile(r"^[A-Za-z0-9_.-]{8,128}$")


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "paretune"


class ArtifactCache:
    def __init__(self, root: Path) -> None:
        self.root = Path(root).absolute()  # sandboxes run in other working directories
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)  # the agent's alone: no sandbox user may look inside
        (self.root / "staging").mkdir(mode=0o700, exist_ok=True)
        self._secret = self._load_secret()

    def _load_secret(self) -> bytes:
        path = self.root / KEY_FILE
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            secret = read_untrusted(path, 4096)
            if len(secret) < 32:
                raise RuntimeError(f"the cache key {path} is damaged; delete the cache directory") from None
            return secret
        secret = secrets.token_bytes(32)
        with os.fdopen(fd, "wb") as handle:
            handle.write(secret)
        return secret

    def path_for(self, key: str) -> Path:
        if not _SAFE_KEY.match(key):
            raise ValueError(f"cache key {key!r} is not a safe file name (use a hex digest)")
        return self.root / key[:2] / key

    # -- the manifest ------------------------------------------------------------------------

    def _sign(self, manifest: dict[str, Any]) -> str:
        body = json.dumps({k: v for k, v in manifest.items() if k != "hmac"}, sort_keys=True, default=str)
        return hmac.new(self._secret, body.encode(), hashlib.sha256).hexdigest()

    def _manifest(self, key: str) -> dict[str, Any] | None:
        """The entry's manifest if it is authentic and names this key; None for a miss.
        A present but forged, damaged or foreign manifest discards the entry."""
        directory = self.path_for(key)
        if not os.path.lexists(directory / META):
            return None
        try:
            manifest = json.loads(read_untrusted(directory / META))
        except (UnsafeFile, ValueError) as exc:
            self._reject(key, f"unreadable manifest ({exc})")
            return None
        if not isinstance(manifest, dict) or not hmac.compare_digest(str(manifest.get("hmac", "")),
                                                                     self._sign(manifest)):
            self._reject(key, "its manifest is not signed with this cache's key")
            return None
        if manifest.get("key") != key:
            self._reject(key, f"its manifest is for another key ({manifest.get('key')!r})")
            return None
        return manifest

    def _reject(self, key: str, why: str) -> None:
        log.warning("artifact %s discarded: %s; it will be rebuilt", key, why)
        self.discard(self.path_for(key))

    # -- reading -----------------------------------------------------------------------------

    def lookup(self, key: str) -> CompiledKernel | None:
        """The entry in place after checking every file against its manifest, or None (a
        miss, or an entry that failed the check and was deleted)."""
        manifest = self._manifest(key)
        if manifest is None:
            return None
        directory = self.path_for(key)
        for relative, expected in manifest["sha256"].items():
            if _file_sha256(directory / relative) != expected:
                self._reject(key, f"{relative} does not match its sha256")
                return None
        return self._used(key, manifest)

    def checkout(self, key: str, destination: Path) -> CompiledKernel | None:
        """A verified copy of the entry in the new directory `destination` (for one
        trial), or None: a miss, or an entry that failed the check (deleted)."""
        manifest = self._manifest(key)
        if manifest is None:
            return None
        problem = copy_verified(self.path_for(key), destination, manifest["sha256"])
        if problem:
            shutil.rmtree(destination, ignore_errors=True)
            self._reject(key, problem)
            return None
        self._used(key, manifest)
        return CompiledKernel(destination, manifest["files"], manifest["report"], manifest["log"])

    def _used(self, key: str, manifest: dict[str, Any]) -> CompiledKernel:
        directory = self.path_for(key)
        os.utime(directory)  # recently used: kept longest by prune()
        return CompiledKernel(directory, manifest["files"], manifest["report"], manifest["log"])

    # -- writing -----------------------------------------------------------------------------

    def staging(self) -> Path:
        """A fresh empty directory to build into in this process; pass it to `commit`
        (which copies from it) and then to `discard`."""
        return Path(tempfile.mkdtemp(prefix="build-", dir=self.root / "staging"))

    def commit(self, key: str, built: CompiledKernel) -> CompiledKernel:
        """Copy a build into the cache as the entry for `key`; returns the entry. A build
        made in `staging()` is removed afterwards; any other build directory is left to its
        owner. UnsafeFile if the build holds links or special files."""
        try:
            return self._commit(key, built)
        finally:
            if built.directory.parent == self.root / "staging":
                self.discard(built.directory)

    def _commit(self, key: str, built: CompiledKernel) -> CompiledKernel:
        final = self.path_for(key)
        existing = self.lookup(key)
        if existing is not None:
            return existing  # someone committed the same key first
        entry = Path(tempfile.mkdtemp(prefix="entry-", dir=self.root / "staging"))
        try:
            content = entry / "content"
            digests = copy_tree_hashed(built.directory, content, max_bytes=MAX_ARTIFACT_BYTES)
            missing = [name for name in built.files.values() if name not in digests]
            if missing:
                raise UnsafeFile(f"the build lists files it did not write: {missing}")
            manifest = {
                "key": key,
                "files": built.files,
                "report": built.report,
                "log": built.log,
                "sha256": digests,
                "created": time.time(),
            }
            manifest["hmac"] = self._sign(json.loads(json.dumps(manifest, default=str)))
            (content / META).write_text(json.dumps(manifest, default=str))
            final.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.rename(content, final)
            except OSError:  # someone else committed the same key first
                found = self.lookup(key)
                if found is None:
                    raise
                return found
        finally:
            shutil.rmtree(entry, ignore_errors=True)
        return CompiledKernel(final, built.files, built.report, built.log)

    def discard(self, path: Path) -> None:
        shutil.rmtree(path, ignore_errors=True)

    # -- housekeeping ------------------------------------------------------------------------

    def entries(self) -> list[Path]:
        return [p for p in self.root.glob("??/*") if (p / META).exists()]

    def size_bytes(self) -> int:
        return sum(_tree_bytes(e) for e in self.entries())

    def prune(self, max_bytes: int) -> int:
        """Remove least recently used entries until the cache fits; returns entries removed."""
        entries = sorted(self.entries(), key=lambda p: p.stat().st_mtime)
        sizes = {e: _tree_bytes(e) for e in entries}
        total, removed = sum(sizes.values()), 0
        for entry in entries:
            if total <= max_bytes:
                break
            shutil.rmtree(entry, ignore_errors=True)
            total -= sizes[entry]
            removed += 1
        return removed


def _file_sha256(path: Path) -> str | None:
    digest = hashlib.sha256()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())

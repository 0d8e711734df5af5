"""Reading and copying files that a sandbox could have written, without following what it
planted there: a symbolic link to the agent's token, a hard link, a FIFO that never ends,
a million empty files. Every open is O_NOFOLLOW relative to a directory descriptor, only
regular files are read, and sizes are bounded.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import time
from collections.abc import Iterator
from pathlib import Path

_CHUNK = 1 << 20


class UnsafeFile(Exception):
    """A file a sandbox left is not a plain regular file, or is too large."""


def read_untrusted(path: Path, limit: int = 16 << 20) -> bytes:
    """The bytes of a regular file (not a link, FIFO or device) of at most `limit` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise UnsafeFile(f"{path.name}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeFile(f"{path.name} is not a regular file")
        if info.st_size > limit:
            raise UnsafeFile(f"{path.name} is larger than {limit} bytes")
        return handle.read(limit + 1)[:limit]


def write_whole(path: Path, text: str) -> None:
    """Replace a sandbox's progress file at once: the agent reading it after a kill never sees it half written."""
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def read_untrusted_tail(path: Path, offset: int, limit: int) -> str:
    """What was written to `path` after `offset`, at most its last `limit` bytes (after
    "[...]" where cut); empty when the file is not a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            return ""
        start = max(offset, info.st_size - limit)
        handle.seek(start)
        text = handle.read(limit).decode("utf-8", "replace")
        return "[...]\n" + text if start > offset else text


def walk_files(root: Path) -> Iterator[tuple[str, int, os.stat_result]]:
    """(relative path, directory fd, stat) of each entry under `root`, without following
    links; directories are yielded as well (their stat says so). The fds are valid only
    until the next item."""
    for dirpath, dirnames, filenames, dirfd in os.fwalk(root, follow_symlinks=False):
        relative = os.path.relpath(dirpath, root)
        for name in [*dirnames, *filenames]:
            info = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
            yield (name if relative == "." else os.path.join(relative, name)), dirfd, info


def copy_tree_hashed(source: Path, destination: Path, *, max_bytes: int, max_files: int = 10_000) -> dict[str, str]:
    """Copy the regular files and directories under `source` into the new directory
    `destination` (written by this process, so owned by it), returning each file's sha256
    by relative path. Links and special files are refused, as are trees over the limits."""
    destination.mkdir(mode=0o755)
    digests: dict[str, str] = {}
    total = 0
    for relative, dirfd, info in walk_files(source):
        if len(digests) >= max_files:
            raise UnsafeFile(f"more than {max_files} files")
        target = destination / relative
        if stat.S_ISDIR(info.st_mode):
            target.mkdir(mode=0o755)
            continue
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeFile(f"{relative} is not a regular file or directory")
        total += info.st_size
        if total > max_bytes:
            raise UnsafeFile(f"the build is larger than {max_bytes >> 20} MiB")
        name = os.path.basename(relative)
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dirfd)
        with os.fdopen(fd, "rb") as reader:
            if not stat.S_ISREG(os.fstat(reader.fileno()).st_mode):
                raise UnsafeFile(f"{relative} changed while it was copied")
            digests[relative] = _copy_hashed(reader, target, mode=0o755 if info.st_mode & 0o111 else 0o644)
    return digests


def _copy_hashed(reader: object, target: Path, mode: int) -> str:
    digest = hashlib.sha256()
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    with os.fdopen(fd, "wb") as writer:
        while chunk := reader.read(_CHUNK):  # type: ignore[attr-defined]
            digest.update(chunk)
            writer.write(chunk)
    return digest.hexdigest()


def copy_verified(source: Path, destination: Path, digests: dict[str, str]) -> str | None:
    """Copy the files named in `digests` from `source` into the new directory
    `destination`, checking each one's sha256 as it is read; the first mismatch or missing
    file as a message (the copy is then incomplete), else None."""
    destination.mkdir(mode=0o755, parents=True, exist_ok=True)
    for relative, expected in sorted(digests.items()):
        if os.path.isabs(relative) or ".." in Path(relative).parts:
            return f"{relative!r} is not a path inside the artifact"
        target = destination / relative
        target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        try:
            fd = os.open(source / relative, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            return f"{relative}: {exc.strerror}"
        with os.fdopen(fd, "rb") as reader:
            if not stat.S_ISREG(os.fstat(reader.fileno()).st_mode):
                return f"{relative} is not a regular file"
            mode = 0o755 if os.fstat(reader.fileno()).st_mode & 0o111 else 0o644
            if _copy_hashed(reader, target, mode) != expected:
                return f"{relative} does not match its sha256 in the manifest"
    return None


def tree_usage(root: Path, max_entries: int = 200_000) -> tuple[int, int]:
    """(bytes allocated, entries) under `root`, not following links; stops counting
    entries at `max_entries` (a trial with that many files is over any sane limit)."""
    used = entries = 0
    stack = [str(root)]
    while stack and entries < max_entries:
        try:
            with os.scandir(stack.pop()) as listing:
                for entry in listing:
                    entries += 1
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    used += info.st_blocks * 512
                    if stat.S_ISDIR(info.st_mode):
                        stack.append(entry.path)
        except OSError:
            continue
    return used, entries


REMOVE_RETRIES_S = (0.05, 0.2, 1.0)


def remove_tree(path: Path) -> bool:
    """Remove a directory a sandbox wrote in. A process of the trial that was killed a moment
    ago may still be writing into it as it is removed (the removal then finds it not empty):
    it is removed again after a pause, a few times. Returns whether it is gone."""
    for pause in (0.0, *REMOVE_RETRIES_S):
        time.sleep(pause)
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            return True
    return False

"""Finding and killing what a trial left running, by the means each isolation level gives
(Linux /proc): a process group, a PID namespace, a sandbox uid, or the orphans the agent
inherits as their subreaper. Kills repeat until nothing is found, so that a fork bomb
cannot outrun them.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_DUMPABLE = 4


def _status(pid: str) -> dict[str, str]:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


def _pids() -> list[str]:
    try:
        return [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def _alive(status: dict[str, str]) -> bool:
    return bool(status) and not status.get("State", "").startswith(("Z", "X"))


def processes_of_uid(uid: int) -> list[int]:
    """Live processes whose real uid is `uid` (status, unlike the /proc entry's owner,
    cannot be hidden by making a process non-dumpable)."""
    found = []
    for pid in _pids():
        status = _status(pid)
        uids = status.get("Uid", "").split()
        if uids and int(uids[0]) == uid and _alive(status):
            found.append(int(pid))
    return found


def pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def namespace_members(namespace: str) -> list[tuple[int, int]]:
    """(pid here, pid inside) of the live processes of a PID namespace."""
    members = []
    for pid in _pids():
        if pid_namespace(int(pid)) != namespace:
            continue
        status = _status(pid)
        if _alive(status):
            inner = status.get("NSpid", pid).split()[-1]
            members.append((int(pid), int(inner)))
    return members


def children_of(parent: int, zombies: bool = False) -> list[int]:
    """Children of `parent`; with `zombies`, also those that exited and wait to be reaped."""
    found = []
    for pid in _pids():
        status = _status(pid)
        if status.get("PPid", "").strip() == str(parent) and (zombies and bool(status) or _alive(status)):
            found.append(int(pid))
    return found


def group_members(pgid: int) -> list[int]:
    """Live processes of process group `pgid`."""
    members = []
    for pid in _pids():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 3 and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(pid))
    return members


def kill_all(find: Callable[[], Iterable[int]], rounds: int = 50) -> int:
    """SIGKILL what `find` returns until it returns nothing; the number of processes killed."""
    killed = 0
    for _ in range(rounds):
        pids = list(find())
        if not pids:
            return killed
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        time.sleep(0.005)
    return killed


def kill_pid(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def descendants(roots: Iterable[int]) -> set[int]:
    """The live processes below any of `roots` (children, their children, ...)."""
    children: dict[int, list[int]] = {}
    for name in _pids():
        status = _status(name)
        parent = status.get("PPid", "").strip()
        if parent.isdigit() and _alive(status):
            children.setdefault(int(parent), []).append(int(name))
    found: set[int] = set()
    todo = [child for root in roots for child in children.get(root, [])]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, []))
    return found


def kill_uid(uid: int, keep: Iterable[int] = (), spare_below: Iterable[int] = ()) -> int:
    """Kill every process of `uid` except `keep` (a warm runner and what it needs) and what
    runs below `spare_below` (other runners of the uid, busy with their own trials: looked
    up again each round, so that what they start meanwhile is spared too)."""
    kept, roots = set(keep), set(spare_below)

    def strays() -> list[int]:
        found = [p for p in processes_of_uid(uid) if p not in kept]
        if found and roots:
            spared = descendants(roots)
            found = [p for p in found if p not in spared]
        return found

    return kill_all(strays)


def kill_namespace(namespace: str, keep_inner: Iterable[int]) -> int:
    """Kill every process of a PID namespace whose pid inside it is not in `keep_inner`
    (its init, 1, and a warm runner)."""
    kept = set(keep_inner)
    return kill_all(lambda: [outer for outer, inner in namespace_members(namespace) if inner not in kept])


def reap(pids: Iterable[int]) -> None:
    """Collect exit statuses of children that no subprocess.Popen owns (orphans we inherited)."""
    for pid in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)


def _prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        return int(ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def become_subreaper() -> bool:
    """Orphans of this process's descendants (a setsid double fork) become its children
    instead of init's, so the agent can find and kill them."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def hide_from_same_user() -> bool:
    """Make this process non-dumpable: its /proc files (environ, memory, fds) become
    root's, so a trial running as the same user cannot read secrets out of it."""
    return _prctl(_PR_SET_DUMPABLE, 0)

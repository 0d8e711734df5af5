"""Watching a sandbox process while it runs: the wait that ends on its result, a timeout, a
cancel or a limit; the disk limit of its job directory; and the phase it reports (check,
measure, a validation's round) and the rounds it has timed, for the agent's heartbeats.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from wire.contract import RoundProgress
from workers.sandbox import limits as isolation_limits
from workers.sandbox.files import UnsafeFile, read_untrusted, tree_usage

PHASE_FILE = "phase"  # what the sandbox is doing, written by it into its job directory
# the seconds each round took so far, a JSON list, written by a sandbox that measures in rounds
ROUNDS_FILE = "round-seconds"
DISK_POLL_S = 0.2
MAX_ENTRIES = 200_000


def wait_until(
    done: Callable[[], bool],
    started: float,
    timeout_s: float,
    cancel: threading.Event,
    on_progress: Callable[[], None] | None,
    poll_s: float,
    watch: Callable[[], str | None] | None = None,
) -> tuple[bool, bool, str]:
    """Poll until `done()`; returns (timed_out, abandoned, killed_because) for a time-out,
    a cancel, or a limit `watch` reports (its message)."""
    while not done():
        if cancel.is_set():
            return False, True, ""
        if time.monotonic() - started > timeout_s:
            return True, False, ""
        if watch is not None:
            over = watch()
            if over:
                return False, False, over
        if on_progress is not None:
            on_progress()
        time.sleep(poll_s)
    return False, False, ""


def disk_watch(directory: Path, limits: dict[str, Any]) -> Callable[[], str | None]:
    """A poll callback: the message naming the disk limit once `directory` is over it."""
    limit = limits.get("disk_mb")
    if not limit:
        return lambda: None
    state = {"next": 0.0}

    def check() -> str | None:
        now = time.monotonic()
        if now < state["next"]:
            return None
        state["next"] = now + DISK_POLL_S
        used, entries = tree_usage(directory, MAX_ENTRIES)
        if used > int(limit) << 20:
            return (isolation_limits.exceeded(limits, "disk_mb")
                    + f": its job directory held {used >> 20} MiB; it was killed")
        if entries >= MAX_ENTRIES:
            return isolation_limits.exceeded(limits, "disk_mb") + f": {entries} files in its job directory"
        return None

    return check


def read_phase(jobdir: Path) -> str:
    """The phase a sandbox last reported in its job directory ("" if none, or not a plain
    small file)."""
    try:
        return read_untrusted(jobdir / PHASE_FILE, 256).decode("utf-8", "replace").strip()
    except UnsafeFile:
        return ""


def read_rounds(jobdir: Path) -> list[float] | None:
    """The round durations a sandbox last wrote in its job directory (None if none, or not
    a small plain file of a list of durations)."""
    try:
        return RoundProgress(round_s=json.loads(read_untrusted(jobdir / ROUNDS_FILE, 64 << 10))).round_s
    except (UnsafeFile, ValueError, ValidationError):
        return None


def progress(jobdir: Path, on_phase: Callable[[str], None] | None,
             on_rounds: Callable[[list[float]], None] | None = None) -> Callable[[], None] | None:
    """A poll callback that tells `on_phase` when the sandbox reports a new phase, and then
    `on_rounds` when it has timed more rounds (a round ends where another phase begins)."""
    if on_phase is None and on_rounds is None:
        return None
    seen: dict[str, Any] = {"phase": "", "rounds": 0}

    def poll() -> None:
        current = read_phase(jobdir)
        if not current or current == seen["phase"]:
            return
        seen["phase"] = current
        if on_phase is not None:
            on_phase(current)
        rounds = read_rounds(jobdir) if on_rounds is not None else None
        if on_rounds is not None and rounds is not None and len(rounds) > seen["rounds"]:
            seen["rounds"] = len(rounds)
            on_rounds(rounds)

    return poll

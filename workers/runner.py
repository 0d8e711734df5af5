"""Warm sandbox runners: one long-lived sandbox process per (phase, backend) that serves
trial after trial, so that a GPU trial costs its compile or its measurement rather than a
Python start, the torch/triton imports and a CUDA context (seconds each time).

A runner is `python -m workers.sandbox_child --serve BACKEND RUNDIR` in its own process
group. It imports its backend and warms it up (CUDA context, libraries), writes RUNDIR/ready,
then reads job directories from its stdin, one a line, and runs each exactly as a fresh
sandbox process would (same job.json, phase and result.json files; see sandbox_child).

Isolation is kept by replacing the runner whenever a trial did not end cleanly: a crash
(the process dies), a timeout or a cancel (its process group is killed), and in the run
phase any failed trial (a wrong result or an error may leave the device or the interpreter
in a bad state). In the compile phase a compile error reported by the compiler leaves the
runner in service: nothing ran on the device. A replaced runner's successor is started at
once, so it warms up while the agent reports and leases.

Everything the runner prints goes to one log file; a trial's log excerpt is what was
written after its job was sent.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

READY_FILE = "ready"
LOG_FILE = "runner.log"
_POLL_S = 0.02
_serial = itertools.count(1)


def wait_until(
    done: Callable[[], bool],
    started: float,
    timeout_s: float,
    cancel: threading.Event | None,
    on_progress: Callable[[], None] | None,
    poll_s: float = _POLL_S,
) -> tuple[bool, bool]:
    """Poll until `done()`; returns (timed_out, abandoned) for a time-out or a cancel."""
    while not done():
        if cancel is not None and cancel.is_set():
            return False, True
        if time.monotonic() - started > timeout_s:
            return True, False
        if on_progress is not None:
            on_progress()
        time.sleep(poll_s)
    return False, False


@dataclass
class Served:
    """How one job on a runner ended, before the result file is read."""

    returncode: int | None  # None: the runner is alive (the job wrote its result)
    timed_out: bool = False
    abandoned: bool = False
    start_failed: str = ""  # the runner never became ready: why
    wall_s: float = 0.0
    wait_s: float = 0.0  # waiting for the runner to become ready
    output_tail: str = ""


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def group_members(pgid: int) -> list[int]:
    """Processes in process group `pgid` (Linux /proc; empty elsewhere)."""
    members = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 3 and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def read_from(path: Path, offset: int, limit: int) -> str:
    """What was written to `path` after `offset`, at most its last `limit` bytes."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            start = max(offset, size - limit)
            handle.seek(start)
            data = handle.read()
    except OSError:
        return ""
    text = data.decode("utf-8", "replace")
    return ("[...]\n" + text) if start > offset else text


class WarmRunner:
    """One runner process; used by one thread at a time (the pool's owner of that phase)."""

    def __init__(
        self,
        phase: str,
        backend: str,
        root: Path,
        env: dict[str, str],
        *,
        start_timeout_s: float = 180.0,
        log_limit: int = 4096,
    ) -> None:
        self.phase, self.backend = phase, backend
        self.dir = root / f"{phase}-{backend}-{os.getpid()}-{next(_serial)}"
        self.env = env
        self.start_timeout_s = start_timeout_s
        self.log_limit = log_limit
        self.served = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> WarmRunner:
        self.dir.mkdir(parents=True, exist_ok=True)
        self._log = (self.dir / LOG_FILE).open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "workers.sandbox_child", "--serve", self.backend, str(self.dir)],
            cwd=self.dir,
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ready_info(self) -> dict[str, Any] | None:
        try:
            return dict(json.loads((self.dir / READY_FILE).read_text()))
        except (OSError, ValueError):
            return None

    def kill(self) -> None:
        """Kill the runner's whole process group and forget its files."""
        if self.proc is not None:
            kill_group(self.proc.pid)
            with contextlib.suppress(OSError):
                if self.proc.stdin:
                    self.proc.stdin.close()
            self.proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def _wait_ready(self, cancel: threading.Event | None) -> tuple[str, bool]:
        """('', False) once ready; (why, abandoned) when it cannot be used."""
        assert self.proc is not None
        deadline = time.monotonic() + self.start_timeout_s
        while self.ready_info() is None:
            if self.proc.poll() is not None:
                return f"the warm {self.phase} runner exited with status {self.proc.returncode} while starting", False
            if cancel is not None and cancel.is_set():
                return "abandoned", True
            if time.monotonic() > deadline:
                return f"the warm {self.phase} runner was not ready within {self.start_timeout_s:g} s", False
            time.sleep(_POLL_S)
        return "", False

    def serve(
        self,
        jobdir: Path,
        timeout_s: float,
        cancel: threading.Event | None,
        on_progress: Callable[[], None] | None,
    ) -> Served:
        """Send one job and wait for its result, the runner's death, the timeout or a cancel.
        Afterwards the runner is either alive and clean (returncode None) or killed."""
        assert self.proc is not None and self.proc.stdin is not None
        waited = time.monotonic()
        why, abandoned = self._wait_ready(cancel)
        wait_s = time.monotonic() - waited
        log_path = self.dir / LOG_FILE
        if why:
            if not abandoned:
                kill_group(self.proc.pid)
                self.proc.wait()
            return Served(
                self.proc.poll(),
                abandoned=abandoned,
                start_failed="" if abandoned else why,
                wait_s=wait_s,
                output_tail=read_from(log_path, 0, self.log_limit),
            )
        offset = log_path.stat().st_size if log_path.exists() else 0
        started = time.monotonic()
        result_path = jobdir / "result.json"
        try:
            self.proc.stdin.write(f"{jobdir}\n".encode())
            self.proc.stdin.flush()
        except OSError:
            pass  # it died just now: found below
        proc = self.proc
        timed_out, abandoned = wait_until(
            lambda: result_path.exists() or proc.poll() is not None, started, timeout_s, cancel, on_progress
        )
        clean = not (timed_out or abandoned) and self.proc.poll() is None
        if clean:
            self._kill_strays()
            self.served += 1
        else:
            kill_group(self.proc.pid)
            self.proc.wait()
        return Served(
            None if clean else self.proc.returncode,
            timed_out=timed_out,
            abandoned=abandoned,
            wall_s=time.monotonic() - started,
            wait_s=wait_s,
            output_tail=read_from(log_path, offset, self.log_limit),
        )

    def _kill_strays(self) -> None:
        """Processes a trial left running in the runner's group are not the next trial's."""
        assert self.proc is not None
        for pid in group_members(self.proc.pid):
            if pid != self.proc.pid:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)

    def describe(self) -> dict[str, Any]:
        info = self.ready_info() or {}
        return {
            "warm": True,
            "pid": self.pid,
            "trials_served": self.served,
            "warm_up_s": info.get("warm_up_s"),
            **({"warm_up_error": info["warm_up_error"]} if info.get("warm_up_error") else {}),
        }


class RunnerPool:
    """The agent's warm runners, one per (phase, backend), created on first use and
    replaced after every trial that did not end cleanly."""

    def __init__(
        self,
        root: Path,
        env_for: Callable[[str], dict[str, str]],
        warm_for: Callable[[str], bool],
        *,
        start_timeout_s: float = 180.0,
        log_limit: int = 4096,
    ) -> None:
        self.root = Path(root)
        self.env_for = env_for  # phase -> environment of that phase's processes
        self.warm_for = warm_for  # backend -> whether its trials use warm runners
        self.start_timeout_s = start_timeout_s
        self.log_limit = log_limit
        self.runners: dict[tuple[str, str], WarmRunner] = {}
        self.started = 0
        self.closed = False
        self.lock = threading.Lock()
        # Runners are started from one thread that lives as long as the pool: a sandbox
        # dies with the thread that started it (PR_SET_PDEATHSIG), and the threads that
        # use runners (leasing, measuring) may end before the pool does.
        self._spawner = ThreadPoolExecutor(1, thread_name_prefix="runner-spawner")

    def get(self, phase: str, backend: str) -> WarmRunner | None:
        """The runner for this phase and backend (started now if needed); None when the
        backend's trials run in fresh processes or the pool is closed."""
        if not self.warm_for(backend):
            return None
        with self.lock:
            if self.closed:
                return None
            runner = self.runners.get((phase, backend))
            if runner is None or not runner.alive():
                if runner is not None:
                    runner.kill()
                runner = self._start(phase, backend)
            if phase == "compile" and ("run", backend) not in self.runners:
                self._start("run", backend)  # warms up while the first trial compiles
            return runner

    def replace(self, runner: WarmRunner) -> None:
        """Kill `runner` and start its successor (it warms up before the next trial)."""
        runner.kill()
        with self.lock:
            key = (runner.phase, runner.backend)
            if self.runners.get(key) is runner:
                del self.runners[key]
                if not self.closed:
                    self._start(runner.phase, runner.backend)

    def _start(self, phase: str, backend: str) -> WarmRunner:
        self.root.mkdir(parents=True, exist_ok=True)
        runner = WarmRunner(
            phase,
            backend,
            self.root,
            self.env_for(phase),
            start_timeout_s=self.start_timeout_s,
            log_limit=self.log_limit,
        )
        self._spawner.submit(runner.start).result()
        self.runners[(phase, backend)] = runner
        self.started += 1
        return runner

    def close(self) -> None:
        with self.lock:
            self.closed = True
            runners, self.runners = list(self.runners.values()), {}
        for runner in runners:
            runner.kill()
        self._spawner.shutdown(wait=False)

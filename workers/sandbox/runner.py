"""Warm sandbox runners: one long-lived sandbox process per (phase, backend) that serves
trial after trial, so that a GPU trial costs its compile or its measurement rather than a
Python start, the torch/triton imports and a CUDA context (seconds each time).

A runner is `python -m workers.sandbox.child --serve BACKEND AREA PHASE` in a sandbox of the
agent's isolation level, with its own directory (AREA, the sandbox's /tmp at the namespaces
level) in which the agent makes a job directory per trial (AREA/job-N: a new path each
time, so that a library loaded by one trial is never mistaken for the next one's), puts
the trial's job.json and build there and writes the job directory's path to the runner's
stdin; the runner runs the job exactly as a fresh sandbox process would (see
workers.sandbox.child) and writes result.json there.

Isolation is kept by replacing the runner whenever a trial did not end cleanly: a crash
(the process dies), a timeout or a cancel (its process group is killed), and in the run
phase any failed trial (a wrong result or an error may leave the device or the interpreter
in a bad state). In the compile phase a compile error reported by the compiler leaves the
runner in service: nothing ran on the device. After every trial, clean or not, every other
process of the runner's sandbox (its PID namespace, its sandbox uid, its process group) is
killed. A runner serves the trials of one study: a trial of another study gets a runner of
its own, so that what one team's kernel left in the interpreter never meets another's; the
runners of studies whose trials alternate on a worker stay warm side by side (RunnerPool).
A replaced runner's successor is started at once, so it warms up while the agent reports
and leases.

Everything the runner prints goes to one log file outside its area; a trial's log excerpt
is what was written after its job was sent.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from workers.sandbox.files import UnsafeFile, read_untrusted, read_untrusted_tail, remove_tree
from workers.sandbox.isolation import Bind
from workers.sandbox.jobs import Job
from workers.sandbox.procs import children_of, group_members, kill_group, kill_pid, pid_namespace
from workers.sandbox.sandbox import Sandbox, default_sandbox
from workers.sandbox.watch import wait_until

log = logging.getLogger("paretune.worker")

READY_FILE = "ready"
_POLL_S = 0.02
_serial = itertools.count(1)


@dataclass
class Served:
    """How one job on a runner ended, before the result file is read."""

    returncode: int | None  # None: the runner is alive (the job wrote its result)
    timed_out: bool = False
    abandoned: bool = False
    killed: str = ""  # killed over a limit: why
    start_failed: str = ""  # the runner never became ready: why
    wall_s: float = 0.0
    wait_s: float = 0.0  # waiting for the runner to become ready
    output_tail: str = ""


class WarmRunner:
    """One runner process; used by one thread at a time (the pool's owner of that phase)."""

    def __init__(
        self,
        phase: str,
        backend: str,
        root: Path,
        env: dict[str, str] | None = None,
        *,
        sandbox: Sandbox | None = None,
        start_timeout_s: float = 180.0,
        log_limit: int = 4096,
    ) -> None:
        self.phase, self.backend = phase, backend
        self.sandbox = sandbox or default_sandbox()
        self.serial = next(_serial)  # which of the agent's runners: pids repeat across PID namespaces
        name = f"{phase}-{backend}-{os.getpid()}-{self.serial}"
        self.dir = (root / name).absolute()
        self.inside = "/tmp" if self.sandbox.isolation.namespaces else str(self.dir)
        self.log_path = self.sandbox.log_path(name)
        self.jobs = itertools.count(1)
        self.env = env
        self.start_timeout_s = start_timeout_s
        self.log_limit = log_limit
        self.served = 0
        self.study_id: int | None = None  # the study whose trials it serves, once it served one
        self.last_used = 0.0  # when the pool last handed it out (monotonic)
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._ready: dict[str, Any] | None = None
        self._outer_pid: int | None = None  # the runner's pid here (inside a PID namespace it differs)

    @property
    def pid(self) -> int | None:
        """The runner's own pid, as it sees it (what its trials see as os.getpid())."""
        info = self.ready_info()
        if info is not None and "pid" in info:
            return int(info["pid"])
        return self.proc.pid if self.proc is not None else None

    def start(self) -> WarmRunner:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.sandbox.give(self.dir, self.phase)
        self._log = self.log_path.open("ab")
        env = dict(self.env) if self.env is not None else self.sandbox.env(None, self.inside)
        env.update(HOME=self.inside, TMPDIR=self.inside, PARETUNE_SANDBOX_LIMITS=self.sandbox.caps_json())
        command = self.sandbox.command(
            self.phase, self.backend, ["--serve", self.backend, self.inside, self.phase],
            [Bind(str(self.dir), self.inside, writable=True)], chdir=self.inside,
        )
        self.proc = self.sandbox.spawn(command, cwd=self.dir, env=env, stdin=subprocess.PIPE, stdout=self._log,
                                       stderr=subprocess.STDOUT)
        # without PID namespaces the runner is the process started (setpriv execs it)
        self.sandbox.runner_started(self.phase, self.proc.pid)
        return self

    def new_job(self) -> Job:
        """A fresh job directory inside the runner's area, owned by its sandbox user."""
        name = f"job-{next(self.jobs)}"
        outside = self.dir / name
        outside.mkdir()
        self.sandbox.give(outside, self.phase)
        return Job(outside, f"{self.inside}/{name}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ready_info(self) -> dict[str, Any] | None:
        if self._ready is None:
            try:
                self._ready = dict(json.loads(read_untrusted(self.dir / READY_FILE, 1 << 16)))
            except (UnsafeFile, ValueError, TypeError):
                return None
        return self._ready

    def kill(self) -> None:
        """Kill the runner and everything of its sandbox, and forget its files."""
        if self.proc is not None:
            self.sandbox.runner_ended(self.phase, self.proc.pid)
            kill_group(self.proc.pid)
            self.sandbox.sweep(self.phase)
            with contextlib.suppress(OSError):
                if self.proc.stdin:
                    self.proc.stdin.close()
            self.proc.wait()
            self.sandbox.ended(self.proc.pid)
        if self._log is not None:
            self._log.close()
            self._log = None
        if not remove_tree(self.dir):  # what its sandbox's killed processes wrote last
            log.warning("the warm runner's directory %s could not be removed", self.dir)
        self.log_path.unlink(missing_ok=True)

    def _wait_ready(self, cancel: threading.Event) -> tuple[str, bool]:
        """('', False) once ready; (why, abandoned) when it cannot be used."""
        assert self.proc is not None
        deadline = time.monotonic() + self.start_timeout_s
        while self.ready_info() is None:
            if self.proc.poll() is not None:
                return f"the warm {self.phase} runner exited with status {self.proc.returncode} while starting", False
            if cancel.is_set():
                return "abandoned", True
            if time.monotonic() > deadline:
                return f"the warm {self.phase} runner was not ready within {self.start_timeout_s:g} s", False
            time.sleep(_POLL_S)
        return "", False

    def serve(
        self,
        job: Job,
        timeout_s: float,
        cancel: threading.Event,
        on_progress: Callable[[], None] | None,
        watch: Callable[[], str | None] | None = None,
    ) -> Served:
        """Run `job` (made by new_job, with its job.json) and wait for its result, the
        runner's death, the timeout, a limit or a cancel. Afterwards the runner is either
        alive and clean (returncode None) or killed."""
        assert self.proc is not None and self.proc.stdin is not None
        waited = time.monotonic()
        why, abandoned = self._wait_ready(cancel)
        wait_s = time.monotonic() - waited
        if why:
            if not abandoned:
                kill_group(self.proc.pid)
                self.proc.wait()
            return Served(
                self.proc.poll(),
                abandoned=abandoned,
                start_failed="" if abandoned else why,
                wait_s=wait_s,
                output_tail=read_untrusted_tail(self.log_path, 0, self.log_limit),
            )
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        started = time.monotonic()
        result_path = job.outside / "result.json"
        try:
            self.proc.stdin.write(f"{job.inside}\n".encode())
            self.proc.stdin.flush()
        except OSError:
            pass  # it died just now: found below
        proc = self.proc
        timed_out, abandoned, killed = wait_until(
            lambda: os.path.lexists(result_path) or proc.poll() is not None,
            started, timeout_s, cancel, on_progress, _POLL_S, watch,
        )
        clean = not (timed_out or abandoned or killed) and self.proc.poll() is None
        if clean:
            self._kill_strays()
            self.served += 1
        else:
            self.sandbox.runner_ended(self.phase, self.proc.pid)
            kill_group(self.proc.pid)
            self.sandbox.sweep(self.phase)
            self.proc.wait()
        return Served(
            None if clean else self.proc.returncode,
            timed_out=timed_out,
            abandoned=abandoned,
            killed=killed,
            wall_s=time.monotonic() - started,
            wait_s=wait_s,
            output_tail=read_untrusted_tail(self.log_path, offset, self.log_limit),
        )

    def _runner_pid_here(self) -> int | None:
        """The runner's pid in the agent's PID namespace (bwrap starts it two levels down)."""
        if self._outer_pid is None and self.proc is not None:
            if not self.sandbox.isolation.namespaces:
                self._outer_pid = self.proc.pid
            else:
                for init in children_of(self.proc.pid):
                    for child in children_of(init):
                        self._outer_pid = child
        return self._outer_pid

    def _kill_strays(self) -> None:
        """Processes a trial left running in the runner's sandbox are not the next trial's."""
        assert self.proc is not None
        outer = self._runner_pid_here()
        keep = {p for p in (outer, self.proc.pid) if p is not None}
        namespace = pid_namespace(outer) if outer is not None and self.sandbox.isolation.namespaces else None
        inner = self.pid if self.pid is not None else -1
        for pid in group_members(self.proc.pid):
            if pid not in keep:
                kill_pid(pid)
        self.sandbox.sweep(self.phase, keep=keep, namespace=namespace, keep_inner=(1, inner))

    def describe(self) -> dict[str, Any]:
        info = self.ready_info() or {}
        return {
            "warm": True,
            "runner": self.serial,
            "pid": self.pid,
            "trials_served": self.served,
            "warm_up_s": info.get("warm_up_s"),
            "warmed_up_for": info.get("phase"),  # what the runner's warm-up prepared (its backend's warm_up)
            **({"warm_up_error": info["warm_up_error"]} if info.get("warm_up_error") else {}),
        }


class RunnerPool:
    """The agent's warm runners per (phase, backend): as many as are in use at once (the
    agent's compilers for the compile phase, one for the run phase), created on first use
    and replaced after every trial that did not end cleanly; with namespaces, spares for the
    next new study (`get`)."""

    def __init__(
        self,
        root: Path,
        env_for: Callable[[str], dict[str, str]] | None = None,
        warm_for: Callable[[str], bool] = lambda backend: True,
        *,
        sandbox: Sandbox | None = None,
        start_timeout_s: float = 180.0,
        log_limit: int = 4096,
        keep_idle: int = 3,
        spares: Callable[[str], int] = lambda phase: 1,
    ) -> None:
        self.root = Path(root)
        self.keep_idle = keep_idle
        self.spares = spares  # phase -> spare runners kept with namespaces (as many as a new study takes at once)
        self.sandbox = sandbox or default_sandbox()
        self.env_for = env_for  # phase -> environment of that phase's processes (None: the sandbox's)
        self.warm_for = warm_for  # backend -> whether its trials use warm runners
        self.start_timeout_s = start_timeout_s
        self.log_limit = log_limit
        self.runners: dict[tuple[str, str], list[WarmRunner]] = {}
        self.busy: set[WarmRunner] = set()  # handed out by get() and not yet released
        self.started = 0
        self.closed = False
        self.lock = threading.Lock()
        # Runners are started from one thread that lives as long as the pool: a sandbox
        # dies with the thread that started it (PR_SET_PDEATHSIG), and the threads that
        # use runners (leasing, measuring) may end before the pool does.
        self._spawner = ThreadPoolExecutor(1, thread_name_prefix="runner-spawner")

    def get(self, phase: str, backend: str, study_id: int | None = None) -> WarmRunner | None:
        """A runner for this phase and backend that no one else is using, held until
        `release`: one that served this study, else a new one. None when the backend's trials
        run in fresh processes or the pool is closed.

        Runners of other studies stay warm for their next trial (studies of several teams
        share a worker, and their trials alternate), up to `keep_idle` idle ones per phase
        and backend, the least recently used going first. Without namespaces the runners of
        a phase share its sandbox uid, so an idle runner of another study is killed before
        this study's job runs beside it.

        With namespaces, when a study takes a runner that served no study, spares start for
        the next new study (`spares(phase)`: as many as it takes at once), so that its first
        trials do not wait for a runner to start (the interpreter, torch or Triton, a CUDA
        context: seconds); a spare has served no study, and its namespaces keep the jobs
        running beside it away from it. Without namespaces a job could reach a spare through
        the shared uid: none is kept."""
        if not self.warm_for(backend):
            return None
        with self.lock:
            if self.closed:
                return None
            kept = self.runners.setdefault((phase, backend), [])
            idle = [r for r in kept if r not in self.busy]
            runner = next((r for r in idle if r.study_id == study_id), None) or next(
                (r for r in idle if None in (r.study_id, study_id)), None)
            others = sorted((r for r in idle if r is not runner and r.study_id not in (None, study_id)),
                            key=lambda r: r.last_used)
            # idle runners kept beyond the one handed out, spares aside
            excess = sum(r is not runner and r.study_id is not None for r in idle) - self.keep_idle
            gone = others[:max(0, excess)] if self.sandbox.isolation.namespaces else others
            for other in gone:
                other.kill()
                kept.remove(other)
            if runner is not None and not runner.alive():
                runner.kill()
                kept[kept.index(runner)] = runner = self._start(phase, backend)
            elif runner is None:
                runner = self._start(phase, backend)
                kept.append(runner)
            if phase == "compile" and not self.runners.get(("run", backend)):
                # the run phase warms up while the first trial compiles
                self.runners[("run", backend)] = [self._start("run", backend)]
            new_study = runner.study_id is None and study_id is not None
            runner.study_id = study_id if study_id is not None else runner.study_id
            runner.last_used = time.monotonic()
            self.busy.add(runner)
            if new_study and self.sandbox.isolation.namespaces:
                for _ in range(self.spares(phase) - sum(r.study_id is None for r in kept)):
                    kept.append(self._start(phase, backend))
            return runner

    def release(self, runner: WarmRunner) -> None:
        """`runner` (from get) is free for the next trial."""
        with self.lock:
            self.busy.discard(runner)

    def replace(self, runner: WarmRunner) -> None:
        """Kill `runner` and start its successor (it warms up before the next trial)."""
        runner.kill()
        with self.lock:
            kept = self.runners.get((runner.phase, runner.backend), [])
            self.busy.discard(runner)
            if runner in kept:
                if self.closed:
                    kept.remove(runner)
                else:
                    kept[kept.index(runner)] = self._start(runner.phase, runner.backend)

    def _start(self, phase: str, backend: str) -> WarmRunner:
        self.root.mkdir(parents=True, exist_ok=True)
        runner = WarmRunner(
            phase,
            backend,
            self.root,
            self.env_for(phase) if self.env_for is not None else None,
            sandbox=self.sandbox,
            start_timeout_s=self.start_timeout_s,
            log_limit=self.log_limit,
        )
        self._spawner.submit(runner.start).result()
        self.started += 1
        return runner

    def close(self) -> None:
        with self.lock:
            self.closed = True
            runners = [runner for kept in self.runners.values() for runner in kept]
            self.runners = {}
        for runner in runners:
            runner.kill()
        self._spawner.shutdown(wait=False)

"""The Sandbox: how this agent runs sandbox processes. It owns the work directory and the
job directories in it, the command and environment of a sandbox process at the agent's
isolation level, a trial's limits, which jobs may run at once, and the sweep that kills what
a trial left behind.

The work directory (a fresh temporary directory by default) holds job directories and warm
runners' directories; the agent's output logs of sandbox processes live in its `logs`
directory, which no sandbox can reach (a trial cannot swap its log for a link to a secret).
At the namespaces level a job directory is the sandbox's /tmp, and in the run phase the
trial's build (a verified copy from the artifact cache) is bound read-only at /tmp/build,
except its Triton cache (TRITON_CACHE_DIR, per job), which stays writable.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wire.contract import SandboxLimits, TrialSpec, ValidationSpec
from workers.sandbox import limits as isolation_limits
from workers.sandbox.isolation import Bind, Isolation, none_level, python_argv, sandbox_env, wrap
from workers.sandbox.jobs import TOOL_CACHE, Job
from workers.sandbox.procs import children_of, kill_group, kill_namespace, kill_pid, kill_uid, reap

GPU_BACKENDS = frozenset({"triton", "cuda"})


@dataclass
class Sandbox:
    """How this agent runs sandbox processes. Without arguments: the none level, the
    default limits, a private temporary work directory."""

    isolation: Isolation = field(default_factory=none_level)
    caps: SandboxLimits = field(default_factory=isolation_limits.caps)
    work_root: Path | None = None
    env_overrides: dict[str, str] = field(default_factory=dict)  # e.g. CUDA_VISIBLE_DEVICES
    reap_orphans: bool = False  # this process is its trials' subreaper (a dedicated agent)

    def __post_init__(self) -> None:
        if self.work_root is None:
            self.work_root = Path(tempfile.mkdtemp(prefix="paretune-work-"))
            self._owns_root = True
        else:
            self.work_root = Path(self.work_root).absolute()
            self.work_root.mkdir(parents=True, exist_ok=True)
            self._owns_root = False
        # Sandbox users may pass through to their own job directory, not list the others.
        os.chmod(self.work_root, 0o711)
        self.logs = self.work_root / "logs"
        self.logs.mkdir(mode=0o700, exist_ok=True)
        self.known: set[int] = set()  # pids of sandbox processes this agent started
        self.runner_pids: dict[str, set[int]] = {}  # warm runners by phase, not to be swept
        self.lock = threading.Lock()
        self.claims: Counter[tuple[str, int | None]] = Counter()  # jobs running: (phase, study)
        self._released = threading.Condition(self.lock)

    @property
    def root(self) -> Path:
        assert self.work_root is not None
        return self.work_root

    @contextlib.contextmanager
    def claim(self, phase: str, study_id: int | None) -> Iterator[None]:
        """Hold while a job of `phase` for this study (None: a validation job) runs. Without
        namespaces the sandbox processes of a phase share one uid and can reach into each
        other's job directories and processes, so jobs of a phase that run at once (several
        compilers) belong to one study, one team's trials: a job of another study waits."""
        if self.isolation.namespaces:
            yield
            return
        key = (phase, study_id)
        with self._released:
            while any(other[0] == phase and other != key for other in self.claims):
                self._released.wait()
            self.claims[key] += 1
        try:
            yield
        finally:
            with self._released:
                self.claims[key] -= 1
                if not self.claims[key]:  # an agent serves many studies: keep only those running
                    del self.claims[key]
                self._released.notify_all()

    # -- directories ---------------------------------------------------------------------

    def new_job(self, phase: str) -> Job:
        """A fresh job directory for one sandbox process of `phase`, owned by its user."""
        outside = Path(tempfile.mkdtemp(prefix=f"{phase}-", dir=self.root))
        self.give(outside, phase)
        return Job(outside, "/tmp" if self.isolation.namespaces else str(outside))

    def give(self, path: Path, phase: str) -> None:
        """Hand a directory the agent made to the phase's sandbox user (writable by it)."""
        identity = self.isolation.identity(phase)
        if identity is None:
            return
        os.chown(path, identity.uid, identity.gid)
        for directory, dirs, files in os.walk(path):
            for name in dirs + files:
                os.chown(os.path.join(directory, name), identity.uid, identity.gid, follow_symlinks=False)

    def log_path(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    # -- commands --------------------------------------------------------------------------

    def binds(self, job: Job, phase: str) -> list[Bind]:
        """The job directory at /tmp; in the run phase its build (if anything was built)
        read-only on top, except the build's tool cache."""
        binds = [Bind(str(job.outside), job.inside, writable=True)]
        if phase == "run" and job.build.is_dir() and any(job.build.iterdir()):
            binds.append(Bind(str(job.build), job.build_inside))
            if (job.build / TOOL_CACHE).is_dir():
                binds.append(Bind(str(job.build / TOOL_CACHE), f"{job.build_inside}/{TOOL_CACHE}", writable=True))
        return binds

    def command(self, phase: str, backend: str, args: list[str], binds: list[Bind], chdir: str) -> list[str]:
        return wrap(self.isolation, phase, python_argv(*args), binds, chdir=chdir, gpu=backend in GPU_BACKENDS)

    def env(self, cpus: list[int] | None, home: str, overrides: dict[str, str] | None = None) -> dict[str, str]:
        pid_namespace_kills = self.isolation.namespaces
        return sandbox_env(cpus, home=home, overrides={**self.env_overrides, **(overrides or {})},
                           agent_pid=None if pid_namespace_kills else os.getpid())

    def limits(self, spec: TrialSpec | ValidationSpec) -> dict[str, Any]:
        """A trial's limits: min(its study's, the worker's caps); a validation job's: the caps."""
        return isolation_limits.effective(spec.sandbox if isinstance(spec, TrialSpec) else None, self.caps)

    def caps_json(self) -> str:
        return json.dumps(isolation_limits.effective(None, self.caps))

    # -- processes and cleaning up ----------------------------------------------------------

    def spawn(self, command: list[str], **popen: Any) -> subprocess.Popen[bytes]:
        """Start a sandbox process (in its own session) and remember it: the sweep of
        orphans never mistakes it for one."""
        with self.lock:
            process = subprocess.Popen(command, start_new_session=True, **popen)
            self.known.add(process.pid)
        return process

    def ended(self, pid: int) -> None:
        with self.lock:
            self.known.discard(pid)

    def sweep(self, phase: str, group: int | None = None, keep: Iterable[int] = (),
              namespace: str | None = None, keep_inner: Iterable[int] = ()) -> None:
        """Kill what a trial of `phase` left running: its process group; in a PID namespace
        everything but `keep_inner` (a sandbox's own namespace dies with it otherwise);
        without PID namespaces everything of the phase's sandbox uid but `keep`, the warm
        runners and what the other runners run; and orphans this process inherited as their
        subreaper."""
        if group is not None:
            kill_group(group)
        if namespace is not None:
            kill_namespace(namespace, keep_inner)
        identity = self.isolation.identity(phase)
        with self.lock:
            runners = set(self.runner_pids.get(phase, set()))
        if identity is not None and not self.isolation.namespaces:
            # what the phase's other runners (several compilers) run is theirs, not a stray
            kill_uid(identity.uid, set(keep) | runners, spare_below=runners - set(keep))
        if self.reap_orphans:
            self._sweep_orphans(set(keep))

    def runner_started(self, phase: str, pid: int) -> None:
        """A warm runner of `phase`, or a fresh sandbox process while it runs (its pid here):
        the sweeps after other trials spare it and what runs below it."""
        with self.lock:
            self.runner_pids.setdefault(phase, set()).add(pid)

    def runner_ended(self, phase: str, pid: int) -> None:
        with self.lock:
            self.runner_pids.get(phase, set()).discard(pid)

    def _sweep_orphans(self, keep: set[int]) -> None:
        """Every child of this process that it did not start as a sandbox is an orphan a
        trial left (a setsid double fork): killed, with its process group, and reaped."""
        with self.lock:
            known = self.known | keep
            strays = [pid for pid in children_of(os.getpid(), zombies=True) if pid not in known]
            for pid in strays:
                kill_group(pid)
                kill_pid(pid)
            reap(strays)

    def close(self) -> None:
        self.isolation.close()
        if self._owns_root:
            shutil.rmtree(self.root, ignore_errors=True)


_default: Sandbox | None = None
_default_lock = threading.Lock()


def default_sandbox() -> Sandbox:
    """The none-level sandbox of library calls that name none (tests, benchmarks)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Sandbox()
            atexit.register(_default.close)
        return _default

"""Trial isolation levels: which the host allows, how a sandbox command is wrapped at each,
and the environment a sandbox gets (docs/security.md has the threat model).

  namespaces  bubblewrap (`bwrap`, Debian package bubblewrap): own mount, PID, IPC, UTS and
              network (loopback only) namespaces; a minimal read-only view (the Python
              installation and venv, the `workers` package directory, /usr and the /lib
              links, a few files of /etc, /sys, GPU device nodes for GPU backends) plus the
              job directory, writable, as /tmp and HOME. Nothing else of the host is there:
              not the repository (nor the embedded database under it), the artifact cache,
              the token file or the agent's other files.
              An agent running as root runs bwrap as root (it can then bind a Python
              installation under /root) and has it drop the trial to an unprivileged uid
              with setpriv (no capabilities, no new privileges, no groups); an agent that is
              not root lets bwrap map it to an unprivileged uid in a new user namespace.
  user        root agent without bwrap: the trial runs as an unprivileged uid (setpriv) with
              a private job directory; the agent's cache, work directory, token file and
              data directory are made unreadable to others. It sees the rest of the host
              and the network.
  none        the agent's own user: rlimits and a scrubbed environment only.

Each level is verified by a probe (a real sandbox process that reports what it can see)
before the agent claims it. Root agents give each phase its own sandbox uid (run: U,
compile: U+1), so that after a trial everything running as that uid can be killed without
touching the other phase; `--sandbox-uid` picks U when several agents share a host (the
default is the first free pair from 61000, reserved with a lock file).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import wire
import workers
from wire.contract import IsolationLevel
from workers.sandbox.procs import kill_uid, processes_of_uid

log = logging.getLogger(__name__)

PACKAGE_DIR = str(Path(workers.__file__).resolve().parent)  # the `workers` package
WIRE_DIR = str(Path(wire.__file__).resolve().parent)  # the `wire` package, beside it
PACKAGE_ROOT = str(Path(PACKAGE_DIR).parent)  # what goes on the sandbox's PYTHONPATH
FIRST_SANDBOX_UID = 61000
_UID_POOL = 500  # pairs tried from FIRST_SANDBOX_UID
_ETC = ("passwd", "group", "nsswitch.conf", "hosts", "localtime", "ld.so.cache", "ld.so.conf",
        "ld.so.conf.d", "alternatives")
_ROOT_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_ENV_NAMES = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_NUMERIC", "TZ", "CC", "CXX", "LD_LIBRARY_PATH",
              "TORCH_CUDA_ARCH_LIST", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "PYTORCH_CUDA_ALLOC_CONF")
# The GPU stack's settings (CUDA_VISIBLE_DEVICES, NCCL_NVLS_ENABLE=0 that a host may require, ...).
_ENV_PREFIXES = ("TRITON_", "CUDA_", "NCCL_", "NVSHMEM_", "NVIDIA_")
SANDBOX_USER = "paretune-trial"
_ENV_SET_BY_SANDBOX = frozenset({"TRITON_CACHE_DIR", "TRITON_HOME", "TRITON_DUMP_DIR", "TRITON_OVERRIDE_DIR"})
SHM_BYTES = 64 << 20


class IsolationUnavailable(Exception):
    """The isolation level asked for cannot be had on this host (the message says why)."""


@dataclass(frozen=True)
class Identity:
    uid: int
    gid: int


@dataclass(frozen=True)
class Bind:
    outside: str
    inside: str
    writable: bool = False


@dataclass
class Isolation:
    level: IsolationLevel
    bwrap: str | None = None
    identities: dict[str, Identity] = field(default_factory=dict)  # by phase; empty: the agent's user
    read_only: tuple[str, ...] = ()  # operator directories trials may see (python paths)
    notes: list[str] = field(default_factory=list)  # why better levels were not used
    lock_fd: int | None = None  # holds the sandbox uids while the agent lives
    facts: dict[str, Any] = field(default_factory=dict)  # what its probe saw from inside

    @property
    def namespaces(self) -> bool:
        return self.level == IsolationLevel.NAMESPACES

    def identity(self, phase: str) -> Identity | None:
        return self.identities.get(phase)

    def sandbox_uids(self) -> list[int]:
        return sorted({i.uid for i in self.identities.values()})

    def describe(self) -> dict[str, Any]:
        return {
            "level": self.level.value,
            "sandbox_uids": self.sandbox_uids(),
            "bwrap": self.bwrap,
            **({"not_used": self.notes} if self.notes else {}),
        }

    def close(self) -> None:
        for uid in self.sandbox_uids():
            kill_uid(uid)
        if self.lock_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.lock_fd)
            self.lock_fd = None


def none_level() -> Isolation:
    return Isolation(IsolationLevel.NONE)


# -- the environment ------------------------------------------------------------------------


def sandbox_env(cpus: list[int] | None, *, home: str, overrides: dict[str, str] | None = None,
                agent_pid: int | None = None) -> dict[str, str]:
    """A sandbox's environment, from an allow-list: never a copy of the agent's (which may
    hold a token, database URLs, cloud credentials)."""
    env = {name: value for name, value in os.environ.items()
           if (name in _ENV_NAMES or name.startswith(_ENV_PREFIXES)) and name not in _ENV_SET_BY_SANDBOX}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(overrides or {})
    env["PYTHONPATH"] = os.pathsep.join([PACKAGE_ROOT, *extra_python_paths()])
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["HOME"] = env["TMPDIR"] = home
    # the sandbox uid has no passwd entry: getpass.getuser() (torch's cache directories)
    # takes the name from here instead of failing
    env["USER"] = env["LOGNAME"] = SANDBOX_USER
    if agent_pid is not None:
        env["PARETUNE_AGENT_PID"] = str(agent_pid)
    if cpus:
        env["PARETUNE_SANDBOX_CPUS"] = ",".join(map(str, cpus))
    threads = str(len(cpus)) if cpus else os.environ.get("OMP_NUM_THREADS", "")
    if threads:  # BLAS thread pools sized to the CPUs the phase may use
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = threads
    return env


# -- wrapping a command -----------------------------------------------------------------------


def python_argv(*args: str) -> list[str]:
    return [sys.executable, "-s", "-m", "workers.sandbox.child", *args]


def wrap(isolation: Isolation, phase: str, argv: list[str], binds: list[Bind], *, chdir: str,
         gpu: bool = False) -> list[str]:
    """The command line that runs `argv` in a sandbox of this level for `phase`. `binds`
    (the job directory, the build) are what the sandbox sees besides the system at the
    namespaces level; the other levels see the host as it is."""
    identity = isolation.identity(phase)
    drop = _setpriv(identity) if identity is not None else []
    if isolation.level == IsolationLevel.NONE:
        return argv
    if isolation.level == IsolationLevel.USER:
        return [*drop, *argv]
    assert isolation.bwrap is not None
    command = [isolation.bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
               "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--hostname", "sandbox"]
    if identity is None:  # not root: bwrap maps this user to an unprivileged one in a user namespace
        command += ["--unshare-user", "--disable-userns"]
    else:  # root: bwrap keeps only what setpriv needs to drop to the sandbox uid
        command += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
    for bind in binds:  # first: system paths under /tmp (a python path) go on top of the job's /tmp
        command += ["--bind" if bind.writable else "--ro-bind", bind.outside, bind.inside]
    command += _system_view(isolation, gpu, {b.inside for b in binds})
    command += ["--chdir", chdir, "--", *drop, *argv]
    return command


def _setpriv(identity: Identity) -> list[str]:
    return [shutil.which("setpriv") or "setpriv", f"--reuid={identity.uid}", f"--regid={identity.gid}",
            "--clear-groups", "--no-new-privs", "--bounding-set=-all", "--inh-caps=-all", "--"]


def _system_view(isolation: Isolation, gpu: bool, bound: set[str]) -> list[str]:
    args = ["--proc", "/proc", "--dev", "/dev", "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm",
            "--ro-bind", "/usr", "/usr", "--ro-bind-try", "/sys", "/sys"]
    for name in _ROOT_DIRS:
        top = Path("/") / name
        if top.is_symlink():
            args += ["--symlink", os.readlink(top), str(top)]
        elif top.is_dir():
            args += ["--ro-bind", str(top), str(top)]
    args += ["--perms", "0755", "--dir", "/etc"]
    for name in _ETC:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    own = _python_dirs() + _toolchain_dirs() + [PACKAGE_DIR, WIRE_DIR, *isolation.read_only]
    own = sorted(set(own), key=own.index)
    # bwrap makes missing parents private to root; the sandbox user must pass through them
    for parent in sorted({str(a) for path in own for a in Path(path).parents if str(a) != "/"},
                         key=lambda a: a.count("/")):
        if parent not in own and parent not in bound and not parent.startswith("/usr"):
            args += ["--perms", "0755", "--dir", parent]
    for path in own:
        args += ["--ro-bind", path, path]
    if gpu:
        args += _gpu_view()
    return args


def extra_python_paths() -> list[str]:
    """The agent's PYTHONPATH directories besides the repository (packages installed with
    pip --target): part of the Python installation trials run, read-only. The repository
    root itself never is: trials see only its `workers` package."""
    paths = []
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        real = os.path.realpath(entry) if entry else ""
        if real and os.path.isdir(real) and real != PACKAGE_ROOT and real not in paths:
            paths.append(real)
    return paths


def _python_dirs() -> list[str]:
    """The Python installation, venv and PYTHONPATH directories the sandbox runs (outside
    /usr, bound as they are)."""
    dirs: list[str] = []
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                   str(Path(os.path.realpath(sys.executable)).parent.parent)}:
        real = os.path.realpath(prefix)
        for path in {prefix, real}:
            if not path.startswith("/usr/") and path != "/usr" and os.path.isdir(path) and path not in dirs:
                dirs.append(path)
    return sorted(dirs + [p for p in extra_python_paths() if p not in dirs])


def _toolchain_dirs() -> list[str]:
    """Where the compilers the sandbox is told to use live, when outside /usr: the
    installation prefix of CC and CXX (/opt/gcc for /opt/gcc/bin/gcc; Triton builds its
    launcher with CC) and of PATH's directories under /opt, read-only."""
    candidates = [os.path.dirname(os.environ.get(name, "")) for name in ("CC", "CXX")]
    candidates += [d for d in os.environ.get("PATH", "").split(os.pathsep) if d.startswith("/opt/")]
    dirs: list[str] = []
    for directory in candidates:
        real = os.path.realpath(directory) if os.path.isabs(directory) else ""
        prefix = os.path.dirname(real) if os.path.basename(real) == "bin" else real
        if (prefix and os.path.isdir(prefix) and prefix.count("/") >= 2 and not prefix.startswith("/usr/")
                and prefix not in dirs):
            dirs.append(prefix)
    return dirs


def _gpu_view() -> list[str]:
    """NVIDIA device nodes, driver state and the driver's libraries (LD_LIBRARY_PATH)."""
    args: list[str] = []
    for node in sorted(Path("/dev").glob("nvidia*")):
        args += ["--dev-bind", str(node), str(node)]
    args += ["--ro-bind-try", "/proc/driver/nvidia", "/proc/driver/nvidia"]
    for directory in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep):
        if directory and os.path.isdir(directory) and not directory.startswith("/usr/"):
            args += ["--ro-bind", directory, directory]
    for extra in ("/usr/local/nvidia", "/run/nvidia-persistenced"):
        args += ["--ro-bind-try", extra, extra]
    return args


# -- choosing a level ---------------------------------------------------------------------------


def find_bwrap(given: str | None = None) -> str | None:
    candidate = given or os.environ.get("PARETUNE_BWRAP") or shutil.which("bwrap")
    return str(Path(candidate).absolute()) if candidate and os.access(candidate, os.X_OK) else None


def reserve_uids(requested: int | None) -> tuple[int, int]:
    """A pair of sandbox uids (run: U, compile: U+1) and the fd of the lock that reserves
    them while this process lives. `requested` pins U."""
    run = Path("/run")
    lock_dir = (run if os.access(run, os.W_OK) else Path(tempfile.gettempdir())) / "paretune-sandbox"
    lock_dir.mkdir(mode=0o700, exist_ok=True)
    pool = range(FIRST_SANDBOX_UID, FIRST_SANDBOX_UID + 2 * _UID_POOL, 2)
    for uid in [requested] if requested is not None else pool:
        if requested is None and (_uid_named(uid) or _uid_named(uid + 1) or processes_of_uid(uid)
                                  or processes_of_uid(uid + 1)):
            continue
        fd = os.open(lock_dir / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            if requested is not None:
                raise IsolationUnavailable(f"sandbox uid {uid} is in use by another agent on this host") from None
            continue
        return uid, fd
    raise IsolationUnavailable("no free pair of sandbox uids; give one with --sandbox-uid")


def _uid_named(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


def candidates(requested: str) -> list[IsolationLevel]:
    if requested == "auto":
        return [IsolationLevel.NAMESPACES, IsolationLevel.USER, IsolationLevel.NONE]
    try:
        return [IsolationLevel(requested)]
    except ValueError:
        raise IsolationUnavailable(
            f"unknown isolation level {requested!r}; use auto, namespaces, user or none"
        ) from None


def prepare(level: IsolationLevel, *, bwrap: str | None, sandbox_uid: int | None,
            read_only: tuple[str, ...]) -> Isolation:
    """An Isolation of this level if the host has what it needs (not yet probed)."""
    if level == IsolationLevel.NONE:
        return Isolation(level, read_only=read_only)
    root = os.geteuid() == 0
    if level == IsolationLevel.USER and not root:
        raise IsolationUnavailable("the user level needs an agent running as root (to switch to a sandbox uid)")
    if root and not shutil.which("setpriv"):
        raise IsolationUnavailable("setpriv (Debian package util-linux) is not on PATH")
    found = find_bwrap(bwrap) if level == IsolationLevel.NAMESPACES else None
    if level == IsolationLevel.NAMESPACES and found is None:
        raise IsolationUnavailable("bwrap not found: install Debian's bubblewrap (apt-get install bubblewrap) "
                                   "or give its path with --bwrap")
    identities: dict[str, Identity] = {}
    lock_fd = None
    if root:
        base, lock_fd = reserve_uids(sandbox_uid)
        identities = {"run": Identity(base, base), "compile": Identity(base + 1, base + 1)}
    return Isolation(level, bwrap=found, identities=identities, read_only=read_only, lock_fd=lock_fd)


def probe(isolation: Isolation, work_root: Path, hidden: list[Path]) -> str | None:
    """Run a real sandbox process of this level and check what it reports (kept in
    isolation.facts); None when the level holds, else what is wrong. `hidden` are paths it
    must not be able to read."""
    job = Path(tempfile.mkdtemp(prefix="probe-", dir=work_root))
    try:
        identity = isolation.identity("run")
        if identity is not None:
            os.chown(job, identity.uid, identity.gid)
        inside = "/tmp" if isolation.namespaces else str(job)
        argv = python_argv("--probe", json.dumps([str(p) for p in hidden]))
        command = wrap(isolation, "run", argv, [Bind(str(job), "/tmp", writable=True)], chdir=inside)
        env = sandbox_env(None, home=inside)
        try:
            done = subprocess.run(command, env=env, cwd=job, capture_output=True, text=True, timeout=60,
                                  stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError) as exc:
            return f"the probe could not run: {exc}"
        if done.returncode != 0:
            return f"the probe sandbox failed (status {done.returncode}): {(done.stderr or done.stdout).strip()[-600:]}"
        try:
            facts = json.loads(done.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return f"the probe printed no report: {done.stdout[-300:]} {done.stderr[-300:]}"
        isolation.facts = facts
        return _check(isolation, facts)
    finally:
        shutil.rmtree(job, ignore_errors=True)


def _check(isolation: Isolation, facts: dict[str, Any]) -> str | None:
    visible = [path for path, readable in facts["readable"].items() if readable]
    if isolation.level != IsolationLevel.NONE:
        if facts["uid"] == 0 or facts["euid"] == 0:
            return "the sandbox still runs as root"
        if visible:
            return f"the sandbox can read {', '.join(visible)}"
        identity = isolation.identity("run")
        if identity is not None and facts["uid"] != identity.uid:
            return f"the sandbox runs as uid {facts['uid']}, not {identity.uid}"
    if isolation.namespaces:
        if facts["pid_namespace"] == os.readlink("/proc/self/ns/pid"):
            return "the sandbox shares the agent's PID namespace"
        if facts["interfaces"] != ["lo"]:
            return f"the sandbox has network interfaces {facts['interfaces']}"
    return None


def choose(requested: str = "auto", *, work_root: Path, hidden: list[Path], bwrap: str | None = None,
           sandbox_uid: int | None = None, read_only: tuple[str, ...] = ()) -> Isolation:
    """The best level of `requested` ("auto": the best the host allows) that passes its
    probe; IsolationUnavailable when none does (a level asked for by name that fails)."""
    notes: list[str] = []
    for level in candidates(requested):
        try:
            isolation = prepare(level, bwrap=bwrap, sandbox_uid=sandbox_uid, read_only=read_only)
        except IsolationUnavailable as exc:
            notes.append(f"{level.value}: {exc}")
            continue
        problem = probe(isolation, work_root, hidden)
        if problem is None:
            isolation.notes = notes
            return isolation
        isolation.close()
        notes.append(f"{level.value}: {problem}")
    raise IsolationUnavailable("; ".join(notes))

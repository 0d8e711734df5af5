"""Resource limits of a trial's sandbox: defaults, the operator's caps, a study's lower
limits, how they become rlimits inside the sandbox, and the messages that name the limit a
trial ran into.

Enforced per sandbox process (and what it starts), set by the sandbox itself before any
trial code runs (workers.sandbox.child), so that no wrapper command is needed:
  memory_mb     RLIMIT_AS (address space) for the cpu and python backends; RLIMIT_DATA for
                triton and cuda, whose CUDA driver reserves huge virtual ranges that
                RLIMIT_AS would refuse (RLIMIT_DATA counts private writable memory)
  processes     RLIMIT_NPROC: processes and threads of the sandbox's user (root is exempt)
  file_size_mb  RLIMIT_FSIZE: the largest file it may write
  open_files    RLIMIT_NOFILE
  cpu_s         RLIMIT_CPU: CPU seconds of one phase (SIGXCPU, then SIGKILL a second later)
  disk_mb       not an rlimit: the agent polls the size of the job directory and kills the
                trial over it
Core dumps are off (RLIMIT_CORE 0): they would land in the job directory.
"""

from __future__ import annotations

import errno
import resource
import signal
from typing import Any

from wire.contract import SandboxLimits

DEFAULTS = SandboxLimits(
    memory_mb=8192,
    processes=512,
    file_size_mb=1024,
    open_files=1024,
    cpu_s=3600,
    disk_mb=4096,
)
# Backends whose memory limit is RLIMIT_DATA (see the module docstring).
DATA_LIMIT_BACKENDS = frozenset({"triton", "cuda"})
FIELDS = tuple(SandboxLimits.model_fields)
_UNITS = {"memory_mb": "MiB", "file_size_mb": "MiB", "disk_mb": "MiB", "cpu_s": "s", "processes": "", "open_files": ""}
_WHAT = {
    "memory_mb": "memory",
    "processes": "processes limit",
    "file_size_mb": "file size limit",
    "open_files": "open files limit",
    "cpu_s": "CPU time limit",
    "disk_mb": "disk limit",
}
_OPTION = {
    "memory_mb": "--max-memory-mb",
    "processes": "--max-processes",
    "file_size_mb": "--max-file-size-mb",
    "open_files": "--max-open-files",
    "cpu_s": "--max-cpu-s",
    "disk_mb": "--max-disk-mb",
}


def caps(operator: SandboxLimits | None = None) -> SandboxLimits:
    """The worker's caps: the operator's where given, else the defaults."""
    given = operator.model_dump(exclude_none=True) if operator else {}
    return DEFAULTS.model_copy(update=given)


def effective(study: SandboxLimits | None, cap: SandboxLimits) -> dict[str, int]:
    """min(study, cap) for every limit, plus which of the two set it ("study" or "worker")."""
    limits: dict[str, Any] = {"source": {}}
    for name in FIELDS:
        ceiling = getattr(cap, name)
        wanted = getattr(study, name) if study is not None else None
        value = ceiling if wanted is None or (ceiling is not None and ceiling < wanted) else wanted
        limits[name] = value
        limits["source"][name] = "study" if wanted is not None and value == wanted else "worker"
    return limits


def describe(limits: dict[str, Any], name: str) -> str:
    """'its memory limit of 4096 MiB (limits.sandbox.memory_mb)', with the worker's option
    when the worker's cap, not the study, set it."""
    unit = _UNITS[name]
    amount = f"{limits[name]} {unit}".strip()
    where = f"limits.sandbox.{name}"
    if limits.get("source", {}).get(name) == "worker":
        where += f"; the worker's cap, {_OPTION[name]}"
    what = "memory limit" if name == "memory_mb" else _WHAT[name]
    return f"its {what} of {amount} ({where})"


def exceeded(limits: dict[str, Any], name: str) -> str:
    return f"the trial exceeded {describe(limits, name)}"


# -- inside the sandbox ---------------------------------------------------------------------

_current: dict[str, Any] | None = None  # the limits this sandbox process runs its trial under


def current() -> dict[str, Any] | None:
    return _current


def _set(kind: int, soft: int, hard: int | None = None) -> None:
    hard = soft if hard is None else hard
    current_soft, current_hard = resource.getrlimit(kind)
    if current_hard != resource.RLIM_INFINITY and hard > current_hard:
        hard = current_hard  # already lower (an operator's ulimit): keep it
    resource.setrlimit(kind, (min(soft, hard), hard))


def apply(limits: dict[str, Any], backend: str) -> None:
    """Set this process's rlimits (soft and hard: trial code cannot raise them again)."""
    global _current
    _current = limits
    mib = 1 << 20
    memory = resource.RLIMIT_DATA if backend in DATA_LIMIT_BACKENDS else resource.RLIMIT_AS
    if limits.get("memory_mb"):
        _set(memory, int(limits["memory_mb"]) * mib)
    if limits.get("processes"):
        _set(resource.RLIMIT_NPROC, int(limits["processes"]))
    if limits.get("file_size_mb"):
        _set(resource.RLIMIT_FSIZE, int(limits["file_size_mb"]) * mib)
    if limits.get("open_files"):
        _set(resource.RLIMIT_NOFILE, int(limits["open_files"]))
    if limits.get("cpu_s"):
        cpu = int(limits["cpu_s"])
        _set(resource.RLIMIT_CPU, cpu, cpu + 1)  # SIGXCPU first, SIGKILL a second later
    _set(resource.RLIMIT_CORE, 0)


def apply_soft(limits: dict[str, Any], backend: str) -> None:
    """A warm runner's per-trial limits: the hard limits are the runner's (the worker's caps,
    set once); the soft ones are this trial's. CPU time counts from now."""
    global _current
    _current = limits
    mib = 1 << 20
    memory = resource.RLIMIT_DATA if backend in DATA_LIMIT_BACKENDS else resource.RLIMIT_AS
    pairs = [
        (memory, limits.get("memory_mb"), mib),
        (resource.RLIMIT_NPROC, limits.get("processes"), 1),
        (resource.RLIMIT_FSIZE, limits.get("file_size_mb"), mib),
        (resource.RLIMIT_NOFILE, limits.get("open_files"), 1),
    ]
    for kind, value, scale in pairs:
        _, hard = resource.getrlimit(kind)
        soft = hard if not value else int(value) * scale
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(kind, (soft, hard))
    if limits.get("cpu_s"):
        usage = resource.getrusage(resource.RUSAGE_SELF)
        used = int(usage.ru_utime + usage.ru_stime) + 1
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        soft = used + int(limits["cpu_s"])
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def explain_exception(exc: BaseException, limits: dict[str, Any] | None) -> str | None:
    """The limit behind an exception a trial raised, as a message; None if none is."""
    if not limits:
        return None
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        message = _explain_one(current, limits)
        if message:
            return message
        current = current.__cause__ or current.__context__
    return None


def _explain_one(exc: BaseException, limits: dict[str, Any]) -> str | None:
    if isinstance(exc, MemoryError) and limits.get("memory_mb"):
        return exceeded(limits, "memory_mb") + ": an allocation was refused (MemoryError)"
    if isinstance(exc, OSError):
        if exc.errno == errno.EFBIG and limits.get("file_size_mb"):
            return exceeded(limits, "file_size_mb") + f": {exc.strerror}"
        if exc.errno == errno.EMFILE and limits.get("open_files"):
            return exceeded(limits, "open_files") + f": {exc.strerror}"
        if exc.errno == errno.EAGAIN and limits.get("processes"):
            return (
                f"the trial could not start another process or thread: {describe(limits, 'processes')} "
                f"counts every process and thread of the sandbox ({exc.strerror})"
            )
        if exc.errno == errno.ENOMEM and limits.get("memory_mb"):
            return exceeded(limits, "memory_mb") + f": {exc.strerror}"
    if isinstance(exc, RuntimeError) and "can't start new thread" in str(exc) and limits.get("processes"):
        return f"the trial could not start another thread: {describe(limits, 'processes')}"
    return None


def explain_signal(signum: int, limits: dict[str, Any] | None) -> str | None:
    """The limit behind a fatal signal, or a hint for signals that often follow one."""
    if not limits:
        return None
    if signum == signal.SIGXCPU and limits.get("cpu_s"):
        return exceeded(limits, "cpu_s")
    if signum == signal.SIGXFSZ and limits.get("file_size_mb"):
        return exceeded(limits, "file_size_mb")
    if signum in (signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT) and limits.get("memory_mb"):
        return (
            f"if it allocated much: {describe(limits, 'memory_mb')[4:]} refuses allocations past it, "
            "and code that does not check for a refused allocation crashes"
        )
    return None

"""What an agent sets up on its host before it serves: the toolchain trials compile with,
the sandbox (the isolation level the host allows, the agent's secrets kept from trials) and
the CPUs of each phase."""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

from wire.contract import IsolationLevel
from workers.agent.settings import AgentSettings
from workers.backends.python_backend import PYTHON_PATHS_ENV
from workers.compilers import toolchains
from workers.fingerprint import usable_cpus
from workers.sandbox import limits as isolation_limits
from workers.sandbox.isolation import IsolationUnavailable, choose
from workers.sandbox.procs import become_subreaper, hide_from_same_user
from workers.sandbox.sandbox import Sandbox

log = logging.getLogger("paretune.worker")


class AgentError(Exception):
    """The agent cannot serve (bad token, no usable backend, an unusable setting)."""


def select_toolchain(requested: str | None, own_process: bool) -> toolchains.Toolchain | None:
    """The toolchain trials compile with: the one asked for, else this environment's own, if
    any. Its ptxas is then the one Triton uses too in every sandbox and, for an agent that is
    its process, in this process's probes, so that what the worker reports is what compiles.
    AgentError names what is installed when the one asked for is not."""
    try:
        toolchain = toolchains.find(requested) if requested else toolchains.selected()
    except toolchains.ToolchainError as exc:
        raise AgentError(str(exc)) from None
    if toolchain is not None and own_process:
        os.environ.update(toolchain.environment())
    return toolchain


def make_sandbox(settings: AgentSettings, private: list[Path], toolchain: toolchains.Toolchain | None) -> Sandbox:
    """Choose the isolation level (probed), keep the agent's secrets (`private`, the data
    directory of an embedded service here) from its trials."""
    private = [*private, *settings.private_paths, *_data_dir()]
    for path in private:
        _make_private(path)
    if settings.own_process:
        become_subreaper()  # a trial's setsid double-forked children become ours to kill
        hide_from_same_user()  # no trial of our user reads our environment or memory
    overrides = {"CUDA_VISIBLE_DEVICES": str(settings.gpu)} if settings.gpu is not None else {}
    toolchain_dirs: list[str] = []
    if toolchain is not None:
        overrides.update(toolchain.environment())
        toolchain_dirs.append(str(toolchain.root))
    read_only = tuple(str(p.resolve()) for p in settings.python_paths)
    for directory in read_only:
        if os.stat(directory).st_mode & 0o005 != 0o005:
            log.warning("--python-path %s is not readable by other users: sandboxed trials cannot import "
                        "from it (chmod o+rx)", directory)
    if read_only:
        overrides[PYTHON_PATHS_ENV] = os.pathsep.join(read_only)
    read_only += tuple(toolchain_dirs)
    sandbox = Sandbox(caps=isolation_limits.caps(settings.limits), work_root=settings.work_dir,
                      env_overrides=overrides, reap_orphans=settings.own_process)
    try:
        sandbox.isolation = choose(settings.isolation, work_root=sandbox.root, hidden=private,
                                   bwrap=settings.bwrap, sandbox_uid=settings.sandbox_uid, read_only=read_only)
    except IsolationUnavailable as exc:
        sandbox.close()
        raise AgentError(f"isolation {settings.isolation!r} is not available here: {exc}") from None
    level = sandbox.isolation.level
    if level != IsolationLevel.NAMESPACES:
        log.warning(
            "ISOLATION IS %s, NOT namespaces: trials run %s. Why not better: %s. See docs/security.md.",
            level.value.upper(),
            "as the agent's own user and can read what it reads"
            if level == IsolationLevel.NONE
            else "as an unprivileged user but see the host and the network",
            "; ".join(sandbox.isolation.notes) or "asked for",
        )
    return sandbox


def assign_cpus(settings: AgentSettings) -> tuple[list[int] | None, list[int] | None, bool]:
    """The measuring CPUs, the compiling CPUs, and whether a compile must wait for the device
    (it would share a CPU with a measurement)."""
    if not hasattr(os, "sched_setaffinity"):
        return None, None, settings.prefetch  # cannot pin: never overlap the two
    cpus = usable_cpus()
    measure = settings.measure_cpus or cpus[-1:]
    spare = [c for c in cpus if c not in measure] or cpus
    compile_ = settings.compile_cpus or (spare if settings.prefetch else cpus)
    overlap = settings.prefetch and bool(set(compile_) & set(measure))
    return measure, compile_, overlap


def _data_dir() -> list[Path]:
    """The embedded service's data directory (its SQLite database), when it is here."""
    path = Path(os.environ.get("PARETUNE_DATA_DIR") or Path.cwd() / ".paretune")
    return [path] if path.exists() else []


def _make_private(path: Path) -> None:
    """No other user (a sandbox uid) may read or enter it."""
    with contextlib.suppress(OSError):
        mode = path.stat().st_mode
        if mode & 0o077:
            path.chmod(mode & ~0o077)

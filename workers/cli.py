"""`paretune worker`: run a worker agent in the foreground.

`worker` is a plain function with typer annotations: the paretune CLI registers it as a
command, `python -m workers` runs it alone, and Python code may call it directly.

The worker token never goes on a command line (anyone on the host can read those in /proc):
it comes from --token-file, from PARETUNE_WORKER_TOKEN (removed from the agent's
environment once read, so no child inherits it), from stdin with `--token -`, or with the
settings an agent started by workers.agent.launch reads on stdin.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import ValidationError

from wire.contract import SandboxLimits
from workers.agent.settings import SETTINGS_ON_STDIN, AgentSettings

if TYPE_CHECKING:
    from workers.agent.loop import Agent

TOKEN_ENV = "PARETUNE_WORKER_TOKEN"
log = logging.getLogger("paretune.worker")


def resolve_token(token: str | None, token_file: Path | None) -> str:
    """The worker token from --token-file, --token - (stdin), PARETUNE_WORKER_TOKEN or,
    visible to every user of the host, --token T. The variable is removed from this
    process's environment."""
    from_env = os.environ.pop(TOKEN_ENV, None)
    if token_file is not None:
        try:
            secret = token_file.read_text().strip()
        except OSError as exc:
            raise typer.BadParameter(f"cannot read the token file {token_file}: {exc.strerror}") from None
    elif token == "-":
        secret = sys.stdin.readline().strip()
    elif token:
        log.warning(
            "the worker token was given with --token: every user of this host can read it in "
            "/proc/%d/cmdline; use --token-file, %s or --token - (stdin) instead", os.getpid(), TOKEN_ENV,
        )
        secret = token
    else:
        secret = from_env or ""
    if not secret:
        raise typer.BadParameter(f"no worker token: give --token-file PATH, set {TOKEN_ENV}, or pipe it to --token -")
    return secret


def configure_logging(level: int = logging.INFO) -> None:
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(
            level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
        )
    logging.getLogger("paretune.worker").setLevel(level)
    logging.getLogger("httpx").setLevel(logging.WARNING)


def worker(
    server: Annotated[str | None, typer.Option(help="URL of the control plane, e.g. http://host:8000 "
                                                    "(default http://127.0.0.1:8000; or PARETUNE_SERVER)")] = None,
    token: Annotated[
        str | None,
        typer.Option(help="`-`: read the worker token from stdin (a token itself here is visible in /proc)"),
    ] = None,
    token_file: Annotated[
        Path | None, typer.Option(help="File holding the worker token (or set PARETUNE_WORKER_TOKEN)")
    ] = None,
    pool: Annotated[str | None, typer.Option(help="Worker pool to lease work from (default: default)")] = None,
    name: Annotated[str | None, typer.Option(help="Worker name (default: host-pid)")] = None,
    kinds: Annotated[str | None, typer.Option(help="Comma-separated kinds of work to run, e.g. trial,validation "
                                                   "(default: every kind this worker runs)")] = None,
    cache_dir: Annotated[
        Path | None, typer.Option(help="Compiled artifact cache (default: ~/.cache/paretune)")
    ] = None,
    prefetch: Annotated[
        bool | None, typer.Option("--prefetch/--no-prefetch", help="Lease and compile the next trial while this one "
                                                                  "measures (default: on)")
    ] = None,
    lease_ahead: Annotated[
        int | None,
        typer.Option(help="With prefetch: trials held leased and compiled beyond the one measuring (1-8, default 1). "
                     "More hides the round trip to the service when trials are short (screening) but holds "
                     "trials other workers could take"),
    ] = None,
    compilers: Annotated[
        int | None,
        typer.Option(help="With prefetch: trials compiled at once, each in a compile process of its own (1-8, at "
                     "most --lease-ahead). More keeps the GPU busy when a trial compiles about as long as it "
                     "measures (screening); each process holds the compiler's memory"),
    ] = None,
    max_trials: Annotated[int | None, typer.Option(help="Exit after this many trials")] = None,
    backends: Annotated[
        str | None,
        typer.Option(help="Comma-separated backends to offer (default: every available one)"),
    ] = None,
    warm_runner: Annotated[
        bool | None,
        typer.Option(
            "--warm/--no-warm",
            help="Serve trials from long-lived sandbox processes (default: for triton and cuda)",
        ),
    ] = None,
    gpu: Annotated[
        int | None,
        typer.Option(help="The one GPU to measure on (sets CUDA_VISIBLE_DEVICES for its trials)"),
    ] = None,
    measure_cpus: Annotated[
        str | None, typer.Option(help="CPUs that measure, e.g. 16-19 (default: the last usable one)")
    ] = None,
    compile_cpus: Annotated[
        str | None, typer.Option(help="CPUs that compile, e.g. 20-31 (default: the other usable ones)")
    ] = None,
    isolation: Annotated[
        str | None,
        typer.Option(help="Trial isolation: auto (the best this host allows, the default), namespaces, user or none"),
    ] = None,
    sandbox_uid: Annotated[
        int | None,
        typer.Option(help="Root agents: trials run as this uid, compiles as uid+1 (default: a free pair from 61000)"),
    ] = None,
    bwrap: Annotated[str | None, typer.Option(help="The bubblewrap binary (default: bwrap on PATH)")] = None,
    python_paths: Annotated[
        list[Path] | None,
        typer.Option("--python-path",
                     help="A directory of objective modules python studies may import (repeatable; read-only)"),
    ] = None,
    work_dir: Annotated[
        Path | None, typer.Option(help="Directory for trials' job directories (default: a fresh temporary one)")
    ] = None,
    max_memory_mb: Annotated[int | None, typer.Option(help="Cap on a trial's memory (default 8192)")] = None,
    max_processes: Annotated[
        int | None, typer.Option(help="Cap on a trial's processes and threads (default 512)")
    ] = None,
    max_file_size_mb: Annotated[
        int | None, typer.Option(help="Cap on a file a trial writes (default 1024)")
    ] = None,
    max_open_files: Annotated[int | None, typer.Option(help="Cap on open files (default 1024)")] = None,
    max_cpu_s: Annotated[int | None, typer.Option(help="Cap on a phase's CPU seconds (default 3600)")] = None,
    max_disk_mb: Annotated[
        int | None, typer.Option(help="Cap on a trial's job directory (default 4096)")
    ] = None,
    toolchain: Annotated[
        str | None,
        typer.Option(help="The CUDA toolchain trials compile with: a version of nvidia-cuda-nvcc (13.3.73, or 13.3 "
                     "for its newest installed patch) or a directory holding bin/ptxas; `paretune toolchain list` "
                     "shows them (default: PARETUNE_TOOLCHAIN, else this environment's nvidia-cuda-nvcc, Triton's "
                     "own ptxas for Triton)"),
    ] = None,
    settings_stdin: Annotated[
        bool, typer.Option(SETTINGS_ON_STDIN, hidden=True, help="Read the settings as JSON on stdin first")
    ] = False,
) -> None:
    """Run a worker agent: lease trials, compile, check and measure them, report results.

    Every option overrides a setting that PARETUNE_WORKER_<NAME> may also set
    (workers/agent/settings.py). SIGTERM or Ctrl-C: stop leasing and finish the held trials
    (up to 30 s); a second signal kills them and exits at once (their leases expire and are
    re-queued). Several agents on one host: give each its own --gpu and disjoint
    --measure-cpus and --compile-cpus (and, for root agents, its own --sandbox-uid pair, or
    let each take a free one). docs/security.md describes isolation levels and limits."""
    given = {name: value for name, value in locals().items() if value is not None and value != []}
    from workers.agent.host import AgentError
    from workers.agent.loop import Agent

    configure_logging()
    settings = _settings(given)
    if settings.gpu is not None:  # the backends' probes in this process see that GPU alone too
        os.environ["CUDA_VISIBLE_DEVICES"] = str(settings.gpu)
    try:
        agent = Agent(settings)
    except AgentError as exc:
        log.error("%s", exc)
        raise typer.Exit(code=2) from None
    restore = _install_signal_handlers(agent)
    try:
        summary = agent.run()
    except AgentError as exc:
        log.error("%s", exc)
        raise typer.Exit(code=2) from None
    finally:
        restore()
    if summary.error:
        raise typer.Exit(code=2)


LIMIT_OPTIONS = {f"max_{name}": name for name in SandboxLimits.model_fields}  # --max-memory-mb: limits.memory_mb


def _settings(given: dict[str, Any]) -> AgentSettings:
    """The agent's settings: those on stdin (--settings-stdin), else the environment's, with
    the options given over them and the token resolved."""
    base: dict[str, Any] = json.loads(sys.stdin.readline()) if given.pop("settings_stdin", False) else {}
    token, token_file = given.pop("token", None), given.pop("token_file", None)
    if token or token_file or not base.get("token"):
        base["token"] = resolve_token(token, token_file)
    else:
        os.environ.pop(TOKEN_ENV, None)
    limits = {LIMIT_OPTIONS[key]: given.pop(key) for key in list(given) if key in LIMIT_OPTIONS}
    if limits:
        base["limits"] = {**base.get("limits", {}), **limits}
    if token_file is not None:
        base["private_paths"] = [*base.get("private_paths", []), token_file]
    try:
        # this function is the program (`paretune worker`, `python -m workers`): it may take the process over
        return AgentSettings(**{**base, **given, "own_process": True})
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}" for e in exc.errors())
        raise typer.BadParameter(problems) from None


def _install_signal_handlers(agent: Agent):  # type: ignore[no-untyped-def]
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    received = {"count": 0}

    def handle(signum: int, frame: FrameType | None) -> None:
        received["count"] += 1
        if received["count"] == 1:
            logging.getLogger("paretune.worker").info(
                "%s: finishing held trials (send again to abort)", signal.Signals(signum).name
            )
            agent.request_stop()
        else:
            agent.request_abort(f"{signal.Signals(signum).name} received twice")

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGTERM, signal.SIGINT)}

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore


def main() -> None:
    typer.run(worker)

"""`paretune worker`: run a worker agent in the foreground.

`worker` is a plain function with typer annotations: the paretune CLI registers it as a
command, `python -m workers` runs it alone, and Python code may call it directly.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer

from workers.agent import Agent, AgentConfig, AgentError


def parse_backends(value: str | None) -> list[str] | None:
    if not value:
        return None
    names = [name.strip() for name in value.split(",") if name.strip()]
    return names or None


def parse_cpus(value: str | None) -> list[int] | None:
    """A CPU list as taskset and cgroups write it: "0-3,8,10-11"."""
    if not value or not value.strip():
        return None
    cpus: list[int] = []
    for part in value.split(","):
        low, dash, high = part.strip().partition("-")
        try:
            first, last = int(low), int(high) if dash else int(low)
        except ValueError:
            raise typer.BadParameter(f"{value!r} is not a CPU list such as 0-3,8") from None
        if last < first:
            raise typer.BadParameter(f"{part!r}: the range runs backwards")
        cpus += [c for c in range(first, last + 1) if c not in cpus]
    return cpus


def configure_logging(level: int = logging.INFO) -> None:
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(
            level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
        )
    logging.getLogger("paretune.worker").setLevel(level)
    logging.getLogger("httpx").setLevel(logging.WARNING)


def worker(
    server: Annotated[
        str,
        typer.Option(
            help="URL of the control plane, e.g. http://host:8000", envvar="PARETUNE_SERVER"
        ),
    ],
    token: Annotated[
        str,
        typer.Option(
            help="Worker token (or PARETUNE_WORKER_TOKEN)", envvar="PARETUNE_WORKER_TOKEN"
        ),
    ],
    pool: Annotated[str, typer.Option(help="Worker pool to lease trials from")] = "default",
    name: Annotated[str | None, typer.Option(help="Worker name (default: host-pid)")] = None,
    cache_dir: Annotated[
        Path | None, typer.Option(help="Compiled artifact cache (default: ~/.cache/paretune)")
    ] = None,
    prefetch: Annotated[
        bool, typer.Option(help="Lease and compile the next trial while this one measures")
    ] = True,
    max_trials: Annotated[int | None, typer.Option(help="Exit after this many trials")] = None,
    backends: Annotated[
        str | None,
        typer.Option(help="Comma-separated backends to offer (default: every available one)"),
    ] = None,
    warm: Annotated[
        bool | None,
        typer.Option(
            "--warm/--no-warm",
            help="Serve trials from long-lived sandbox processes (default: for triton and cuda)",
        ),
    ] = None,
    gpu: Annotated[
        int | None,
        typer.Option(help="The one GPU to measure on (sets CUDA_VISIBLE_DEVICES for its trials)", min=0),
    ] = None,
    measure_cpus: Annotated[
        str | None, typer.Option(help="CPUs that measure, e.g. 16-19 (default: the last usable one)")
    ] = None,
    compile_cpus: Annotated[
        str | None, typer.Option(help="CPUs that compile, e.g. 20-31 (default: the other usable ones)")
    ] = None,
) -> None:
    """Run a worker agent: lease trials, compile, check and measure them, report results.

    SIGTERM or Ctrl-C: stop leasing and finish the held trials (up to 30 s); a second
    signal kills them and exits at once (their leases expire and are re-queued).
    Several agents on one host: give each its own --gpu and disjoint --measure-cpus and
    --compile-cpus."""
    configure_logging()
    if gpu is not None:  # the backends' probes in this process see that GPU alone too
        os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
    config = AgentConfig(
        server=server,
        token=token,
        pool=pool,
        name=name,
        cache_dir=cache_dir,
        prefetch=prefetch,
        max_trials=max_trials,
        backends=parse_backends(backends),
        warm_runner=warm,
        gpu=gpu,
        measure_cpus=parse_cpus(measure_cpus),
        compile_cpus=parse_cpus(compile_cpus),
    )
    agent = Agent(config)
    restore = _install_signal_handlers(agent)
    try:
        summary = agent.run()
    except AgentError as exc:
        logging.getLogger("paretune.worker").error("%s", exc)
        raise typer.Exit(code=2) from None
    finally:
        restore()
    if summary.error:
        raise typer.Exit(code=2)


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

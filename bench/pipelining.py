"""Pipelining benchmark: trials per minute of one worker agent with and without lease
prefetch (compiling trial N+1 on a spare core while trial N measures), on the same study.

Each run uses a fresh artifact cache, so every trial really compiles. Two drivers:
  --driver service  `paretune serve` on a SQLite file (the real control plane); the study
                    uses the seeded random sampler, so both runs get the same configurations;
  --driver plane    the minimal HTTP control plane of the worker tests, fed the same seeded
                    configurations (isolates the worker from the service's own latency).
Throughput is trials over the span from the first lease to the last result.

    .venv/bin/python bench/pipelining.py [--kernels matmul,stencil] [--trials 40]
                                         [--driver service] [--repeats 1]
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import random
import sys
import tempfile
import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "workers"), str(REPO)]

from wire.contract import KernelSpec, MeasureSettings, TrialSpec, WorkloadShape  # noqa: E402
from wire.kernels import BuiltinKernel, get_builtin  # noqa: E402
from wire.space import BoolParam, CategoricalParam, FloatParam, IntParam, Parameter  # noqa: E402
from workers.agent.launch import run_agent  # noqa: E402
from workers.agent.settings import AgentSettings  # noqa: E402
from workers.fingerprint import cpu_model  # noqa: E402

OBJECTIVES = ["runtime_ms", "p99_ms", "compile_s"]


@dataclass
class Run:
    kernel: str
    prefetch: bool
    trials: int
    completed: int
    failed: int
    span_s: float

    @property
    def per_minute(self) -> float:
        return 60.0 * self.trials / self.span_s


def sample(param: Parameter, rng: random.Random) -> Any:
    if isinstance(param, CategoricalParam):
        return rng.choice(param.choices)
    if isinstance(param, BoolParam):
        return rng.random() < 0.5
    if isinstance(param, IntParam):
        return param.low + param.step * rng.randrange((param.high - param.low) // param.step + 1)
    if isinstance(param, FloatParam):
        return rng.uniform(param.low, param.high)
    raise ValueError(f"cannot sample {param.type} parameter {param.name}")


def configurations(builtin: BuiltinKernel, count: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rest = [{p.name: sample(p, rng) for p in builtin.space} for _ in range(count - 1)]
    return [dict(builtin.default_config), *rest]


def run_plane(name: str, trials: int, prefetch: bool, seed: int) -> Run:
    from worker_plane import Plane, PlaneServer

    builtin = get_builtin("cpu", name)
    assert builtin is not None
    kernel = KernelSpec(backend="cpu", builtin=name, workload=[WorkloadShape(**w) for w in builtin.workload])
    plane = Plane(heartbeat_s=2.0, lease_s=30.0)
    plane.add(
        *[
            TrialSpec(
                trial_id=i + 1,
                study_id=1,
                number=i,
                attempt=1,
                is_baseline=i == 0,
                kernel=kernel,
                config=config,
                objectives=OBJECTIVES,
                compile_timeout_s=120,
                run_timeout_s=300,
                measure=MeasureSettings(),
            )
            for i, config in enumerate(configurations(builtin, trials, seed))
        ]
    )
    with PlaneServer(plane) as server, tempfile.TemporaryDirectory() as cache:
        summary = run_agent(
            AgentSettings(
                server=server.url,
                token=plane.token,
                prefetch=prefetch,
                max_trials=trials,
                cache_dir=Path(cache),
                wait_s=1.0,
            )
        )
    span = max(t for t, _, _ in plane.result_posts) - min(t for t, _, _ in plane.leased)
    return Run(name, prefetch, trials, summary.completed, summary.failed, span)


def run_service(name: str, trials: int, prefetch: bool, seed: int) -> Run:
    from helpers import start_service

    with tempfile.TemporaryDirectory() as workdir:
        service = start_service(f"sqlite:///{workdir}/paretune.db", Path(workdir))
        try:
            token = service.make_worker_token()
            document = {
                "name": f"pipelining {name} prefetch={prefetch}",
                "kernel": {"backend": "cpu", "builtin": name},
                "objectives": OBJECTIVES,
                "sampler": {"name": "random", "seed": seed},
                "budget": {"max_trials": trials},
                "parallelism": 4,
            }
            with service.client() as client:
                created = client.post("/v1/studies", json=document)
                created.raise_for_status()
                study_id = created.json()["id"]
                stop = threading.Event()
                watcher = threading.Thread(target=_stop_when_done, args=(client, study_id, stop), daemon=True)
                watcher.start()
                summary = run_agent(
                    AgentSettings(
                        server=service.url,
                        token=token,
                        prefetch=prefetch,
                        max_trials=trials,
                        cache_dir=Path(workdir) / "cache",
                        wait_s=1.0,
                    ),
                    stop,
                )
                stop.set()
                watcher.join()
                items = client.get(f"/v1/studies/{study_id}/trials", params={"limit": trials}).json()["items"]
        finally:
            service.stop()
    ran = [t for t in items if t["started_at"] and t["finished_at"]]
    started = min(datetime.fromisoformat(t["started_at"]) for t in ran)
    finished = max(datetime.fromisoformat(t["finished_at"]) for t in ran)
    return Run(name, prefetch, trials, summary.completed, summary.failed, (finished - started).total_seconds())


def _stop_when_done(client: Any, study_id: int, stop: threading.Event) -> None:
    """Stop the agent once the study is over (it may end early, e.g. on too many failures)."""
    while not stop.wait(1.0):
        study = client.get(f"/v1/studies/{study_id}").json()
        if study["state"] != "running" and not study["progress"]["in_flight"]:
            stop.set()


def table(runs: list[Run]) -> str:
    lines = [
        "| kernel | prefetch | trials | completed | failed | span s | trials/min | ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        base = [r for r in runs if r.kernel == run.kernel and not r.prefetch]
        ratio = run.per_minute / (sum(r.per_minute for r in base) / len(base)) if base else 1.0
        lines.append(
            f"| {run.kernel} | {'on' if run.prefetch else 'off'} | {run.trials} | "
            f"{run.completed} | {run.failed} | {run.span_s:.1f} | "
            f"{run.per_minute:.1f} | {ratio:.2f}x |"
        )
    lines += ["", "| kernel | off: trials/min | on: trials/min | ratio on/off |", "|---|---|---|---|"]
    for kernel in dict.fromkeys(r.kernel for r in runs):
        off = [r.per_minute for r in runs if r.kernel == kernel and not r.prefetch]
        on = [r.per_minute for r in runs if r.kernel == kernel and r.prefetch]
        if off and on:
            mean_off, mean_on = sum(off) / len(off), sum(on) / len(on)
            lines.append(f"| {kernel} | {mean_off:.1f} | {mean_on:.1f} | {mean_on / mean_off:.2f}x |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", default="matmul,stencil")
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--driver", choices=["service", "plane"], default="service")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    run = run_service if args.driver == "service" else run_plane
    print(
        f"# {datetime.now().isoformat(timespec='seconds')}  {platform.node()}  "
        f"nproc={os.cpu_count()}  cpu={cpu_model()!r}  driver={args.driver}",
        flush=True,
    )
    runs: list[Run] = []
    for _ in range(args.repeats):
        for name in args.kernels.split(","):
            for prefetch in (False, True):  # alternate, so drift hits both alike
                result = run(name, args.trials, prefetch, args.seed)
                print(
                    f"{name} prefetch={'on' if prefetch else 'off'}: {result.trials} trials in "
                    f"{result.span_s:.1f} s = {result.per_minute:.1f}/min",
                    flush=True,
                )
                runs.append(result)
    print()
    print(table(runs))


if __name__ == "__main__":
    main()

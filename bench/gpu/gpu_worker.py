"""A worker agent for one GPU of a multi-GPU host, pinned to its own CPUs.

`paretune worker` measures on the last usable CPU and compiles on the others; several agents
on one host would then share that CPU. This starts the same agent with explicit, disjoint
CPU sets per GPU (the GPU itself is chosen by CUDA_VISIBLE_DEVICES).

    CUDA_VISIBLE_DEVICES=1 python3 bench/gpu/gpu_worker.py --server URL --token T --pool gpu1 \
        --measure-cpus 16-19 --compile-cpus 20-31 --cache-dir DIR
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from workers.agent import AgentConfig, run_agent  # noqa: E402
from workers.cli import configure_logging  # noqa: E402


def cpu_range(text: str) -> list[int]:
    low, _, high = text.partition("-")
    return list(range(int(low), int(high or low) + 1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--pool", required=True)
    parser.add_argument("--name", default=None)
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--measure-cpus", type=cpu_range, required=True)
    parser.add_argument("--compile-cpus", type=cpu_range, required=True)
    args = parser.parse_args()
    configure_logging()
    summary = run_agent(
        AgentConfig(
            server=args.server,
            token=args.token,
            pool=args.pool,
            name=args.name,
            cache_dir=args.cache_dir,
            measure_cpus=args.measure_cpus,
            compile_cpus=args.compile_cpus,
        )
    )
    print(summary)


if __name__ == "__main__":
    main()

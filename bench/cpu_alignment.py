"""How a cpu built-in's time depends on where its buffers start: the matmul's configurations
measured as the sweep measures them (cpu_sweep.MEASURE), once with every buffer on a 64-byte
boundary (what the cpu backend gives a kernel, `cpu_problems.ALIGNMENT`) and once with every
buffer 16, 32 and 48 bytes past one (where numpy's 16-byte-aligned allocations may fall).

Prints, per configuration, the runtime at each offset over the runtime at offset 0.

    python bench/cpu_alignment.py [--configs 12] [--n 64]
"""

from __future__ import annotations

import argparse
import functools
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cpu_sweep  # noqa: E402

from workers.backends import cpu_problems  # noqa: E402

OFFSETS = (0, 16, 32, 48)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--configs", type=int, default=12)
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args()
    configs = cpu_sweep.points("matmul")
    random.Random(args.seed).shuffle(configs)
    sweeper = cpu_sweep.Sweeper("matmul", [{"n": args.n}])
    aligned = cpu_problems.aligned
    print(f"matmul n={args.n}: runtime at each buffer offset over the runtime at offset 0")
    print("| configuration | runtime at 0, us | " + " | ".join(f"+{o} B" for o in OFFSETS[1:]) + " |")
    print("| --- | --- |" + " --- |" * (len(OFFSETS) - 1))
    try:
        for config in configs[:args.configs]:
            built, why = sweeper.build(config)
            if built is None:
                print(f"| {config} | {why} |")
                continue
            times = []
            for offset in OFFSETS:
                cpu_problems.aligned = functools.partial(aligned, offset=offset)
                [values] = sweeper.measure(config, built)
                times.append(values["runtime_ms"])
            print(f"| {config} | {times[0] * 1e3:.1f} | " + " | ".join(f"{t / times[0]:.2f}" for t in times[1:]) + " |")
    finally:
        cpu_problems.aligned = aligned


if __name__ == "__main__":
    main()

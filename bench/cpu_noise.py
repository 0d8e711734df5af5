"""How noisy one measurement of a cpu built-in is on this machine, and whether a reference
measured beside it takes the noise out: what sets the cpu sweeps' noise (bench/cpu_sweep.py)
that the transfer replays draw from.

With the sweep's own measurement settings (cpu_sweep.MEASURE), on the matmul at two shapes:
- back to back: one configuration measured `--repeats` times in a row;
- spread over time: in each of `--rounds` rounds, two other configurations, then the
  configuration, then the built-in's default configuration (the reference) right after it.

Prints, per shape, the standard deviation of log runtime of each: back to back, the
configuration across rounds, the reference across rounds, and the configuration over the
reference (what pairing each measurement with a reference would leave).

    python bench/cpu_noise.py [--repeats 15] [--rounds 30]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cpu_sweep  # noqa: E402

from wire.kernels import get_builtin  # noqa: E402

SHAPES = [{"n": 64}, {"n": 160}]


def spread(values: list[float]) -> float:
    return statistics.pstdev(math.log(v) for v in values)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args()
    builtin = get_builtin("cpu", "matmul")
    assert builtin is not None
    reference = {name: builtin.default_config[name] for name in cpu_sweep.SPACES["matmul"]}
    others = [p for p in cpu_sweep.points("matmul") if p != reference]
    random.Random(args.seed).shuffle(others)
    config, between = others[0], others[1:3]
    sweeper = cpu_sweep.Sweeper("matmul", SHAPES)
    built = {}
    for each in (reference, config, *between):
        done, why = sweeper.build(each)
        assert done is not None, why
        built[repr(each)] = done

    def runtimes(each: dict) -> list[float]:
        return [values["runtime_ms"] for values in sweeper.measure(each, built[repr(each)])]

    back_to_back = [runtimes(config) for _ in range(args.repeats)]
    spaced, paired = [], []
    for _ in range(args.rounds):
        for other in between:
            runtimes(other)
        spaced.append(runtimes(config))
        paired.append(runtimes(reference))
    print(f"configuration {config}, reference {reference}")
    print("| shape | back to back | over time | the reference over time | configuration / reference |")
    print("| --- | --- | --- | --- | --- |")
    for index, dims in enumerate(SHAPES):
        mine = [row[index] for row in spaced]
        refs = [row[index] for row in paired]
        print(f"| {dims} | {spread([row[index] for row in back_to_back]):.3f} | {spread(mine):.3f} | "
              f"{spread(refs):.3f} | {spread([m / r for m, r in zip(mine, refs, strict=True)]):.3f} |")


if __name__ == "__main__":
    main()

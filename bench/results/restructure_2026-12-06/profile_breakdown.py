"""Shares of a py-spy raw profile (`py-spy record --format raw`, gzipped or not): per
function, the samples whose stack holds it (inclusive), and per innermost frame (own).

    python bench/results/restructure_2026-12-06/profile_breakdown.py PROFILE.txt.gz [--top 60]
"""

from __future__ import annotations

import argparse
import collections
import gzip
import re
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("profile", type=Path)
    parser.add_argument("--top", type=int, default=60)
    args = parser.parse_args()
    opener = gzip.open if args.profile.suffix == ".gz" else open
    with opener(args.profile, "rt") as lines:
        total, inclusive, own = 0, collections.Counter[str](), collections.Counter[str]()
        for line in lines:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            n = int(count)
            total += n
            frames = [re.sub(r":\d+\)$", ")", frame) for frame in stack.split(";")]
            for frame in set(frames):
                inclusive[frame] += n
            own[frames[-1]] += n
    print(f"{total} samples")
    for title, counter in (("inclusive", inclusive), ("own", own)):
        print(f"--- {title}")
        for frame, n in counter.most_common(args.top):
            print(f"{n / total:6.1%} {frame}")


if __name__ == "__main__":
    main()

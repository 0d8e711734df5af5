"""Whether a screen's short warm-up on a busy GPU measures what the 0.1 s warm-up floor does.

The GPU harness warms a hot window up for at least 0.1 s after an idle gap
(`gpu_harness.MIN_WARMUP_S`) and for 0.02 s when its process measured less than a second ago
(`BUSY_WARMUP_S`, `IDLE_GAP_S`): a warm runner that measures trial after trial keeps the GPU's
clocks and power where a warm-up would bring them. This bench checks that on the GPU, in one
process, with the built-in bf16 GEMM at 4096^3 and the screen's measurement (runtime_ms, a
0.2 s hot window):

- configurations from the recorded sweep (gpu_raw_2026-11-29/sweep.json), spread over its
  runtimes, compiled and checked once;
- in each round, the configurations in a shuffled order, each measured three ways, in a
  rotating order:
  - `busy_short`: right after another measurement, with the busy floor (0.02 s);
  - `busy_long`: right after another measurement, with 0.1 s (the floor before);
  - `idle_short`: after `--idle-s` of an idle GPU, with 0.02 s (what the floor after an idle
    gap is there for).

Reported (OUT.json, and a table on stdout): per configuration the median runtime of each way
and the ratios busy_short / busy_long and idle_short / busy_long, with the SM clock of the
windows; and the seconds each way's measurement took.

    python3 bench/gpu/warmup_floor.py OUT.json [--configs 8] [--rounds 3] [--idle-s 3]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench" / "gpu"))
sys.path.insert(0, str(REPO))

from sweep import Harness  # noqa: E402

from wire.contract import MeasureSettings  # noqa: E402
from workers.cache import ArtifactCache  # noqa: E402
from workers.measure import gpu_harness  # noqa: E402

SWEEP = REPO / "bench" / "results" / "gpu_raw_2026-11-29" / "sweep.json"
WAYS = ("busy_short", "busy_long", "idle_short")


def screen(warmup_s: float) -> MeasureSettings:
    """The screen's measurement (runtime_ms): a 0.2 s hot window after `warmup_s` at least."""
    return MeasureSettings(warmup_s=warmup_s, min_repeats=20, max_repeats=2000, target_s=0.05, hot_window_s=0.2)


def spread_configs(count: int) -> list[dict[str, Any]]:
    """`count` completed configurations of the sweep at evenly spaced ranks of its runtimes."""
    rows = sorted((r for r in json.loads(SWEEP.read_text())["rows"] if r.get("status") == "completed"),
                  key=lambda r: r["values"]["runtime_ms"])
    picks = sorted({round(i * (len(rows) - 1) / max(1, count - 1)) for i in range(count)})
    return [rows[i]["config"] for i in picks]


def measure(harness: Harness, config: dict[str, Any], built: Any, way: str, idle_s: float) -> dict[str, Any]:
    if way == "idle_short":
        time.sleep(idle_s)
        gpu_harness.ACTIVITY.mark()  # taken for busy: the short floor after a real idle gap
    settings = screen(0.1 if way == "busy_long" else 0.0)
    started = time.perf_counter()
    metrics, environment = harness.backend.measure(harness.spec, config, built, ["runtime_ms"], settings)
    hot = next(iter(environment["shapes"].values()))["hot"]
    return {"way": way, "runtime_ms": metrics["runtime_ms"].value, "warmup_s": hot.get("warmup_s"),
            "sm_clock_mhz": hot.get("sm_clock_mhz"), "seconds": time.perf_counter() - started}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--configs", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--idle-s", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    harness = Harness("triton", "gemm_bf16", ArtifactCache(Path(tempfile.mkdtemp(prefix="warmup-floor-"))),
                      screen(0.0))
    configs = spread_configs(args.configs)
    built = []
    for config in configs:
        artifact, _ = harness.built(config)
        outcome = harness.backend.check(harness.spec, config, artifact)
        assert outcome.passed, (config, outcome.details)
        built.append(artifact)
    rng = random.Random(args.seed)
    samples: list[dict[str, Any]] = []
    harness.backend.measure(harness.spec, configs[0], built[0], ["runtime_ms"], screen(0.0))  # busy
    for round_ in range(args.rounds):
        order = list(range(len(configs)))
        rng.shuffle(order)
        for turn, index in enumerate(order):
            ways = WAYS[(turn + round_) % 3:] + WAYS[:(turn + round_) % 3]
            for way in ways:
                sample = measure(harness, configs[index], built[index], way, args.idle_s)
                samples.append({"config": index, "round": round_, **sample})
        print(f"round {round_ + 1} of {args.rounds} done", flush=True)
    result = {"configs": configs, "samples": samples, "args": vars(args), "screen": screen(0.0).model_dump(),
              "floors": {"min_warmup_s": gpu_harness.MIN_WARMUP_S, "busy_warmup_s": gpu_harness.BUSY_WARMUP_S,
                         "idle_gap_s": gpu_harness.IDLE_GAP_S},
              "device": gpu_harness.device_description()}
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(table(result))


def table(result: dict[str, Any]) -> str:
    lines = ["| config | busy_short ms | busy_long ms | idle_short ms | short/long busy | idle_short/busy_long |"
             " clock MHz (median of the windows: busy_short, busy_long, idle_short) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    ratios: dict[str, list[float]] = {"busy": [], "idle": []}
    for index, config in enumerate(result["configs"]):
        mine = [s for s in result["samples"] if s["config"] == index]
        median = {w: statistics.median(s["runtime_ms"] for s in mine if s["way"] == w) for w in WAYS}
        clock = {w: statistics.median((s["sm_clock_mhz"] or {}).get("median", 0) for s in mine if s["way"] == w)
                 for w in WAYS}
        busy, idle = median["busy_short"] / median["busy_long"], median["idle_short"] / median["busy_long"]
        ratios["busy"].append(busy)
        ratios["idle"].append(idle)
        name = "x".join(str(config[k]) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K")) + \
            f" w{config['num_warps']} s{config['num_stages']}"
        lines.append(f"| {name} | {median['busy_short']:.4f} | {median['busy_long']:.4f} | {median['idle_short']:.4f}"
                     f" | {busy:.4f} | {idle:.4f} | {clock['busy_short']:.0f}, {clock['busy_long']:.0f},"
                     f" {clock['idle_short']:.0f} |")
    seconds = {w: statistics.median(s["seconds"] for s in result["samples"] if s["way"] == w) for w in WAYS}
    lines.append("")
    lines.append(f"ratios over the configurations: busy short/long median {statistics.median(ratios['busy']):.4f}"
                 f" (min {min(ratios['busy']):.4f}, max {max(ratios['busy']):.4f}); idle short / busy long median"
                 f" {statistics.median(ratios['idle']):.4f} (min {min(ratios['idle']):.4f},"
                 f" max {max(ratios['idle']):.4f})")
    lines.append("median seconds per measurement: " + ", ".join(f"{w} {seconds[w]:.3f}" for w in WAYS))
    return "\n".join(lines)


if __name__ == "__main__":
    main()

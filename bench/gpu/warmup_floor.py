"""How long a hot window's warm-up must be, on a busy GPU and after an idle one.

The GPU harness warms a hot window up for at least `gpu_harness.MIN_WARMUP_S` after an idle
gap and for `BUSY_WARMUP_S` when its process measured less than `IDLE_GAP_S` ago (a warm
runner measuring trial after trial). This bench measures what those floors are worth, in one
process, with the built-in bf16 GEMM at 4096^3 and the screen's measurement (runtime_ms, a
0.2 s hot window):

- configurations from the recorded sweep (gpu_raw_2026-11-29/sweep.json), spread over its
  runtimes, compiled and checked once;
- in each round, the configurations in a shuffled order, each measured every way of `--ways`
  in a rotating order, with the harness's floors set aside so that the way's warm-up is the
  one used (each sample records it):
  - `busy:S`: right after another configuration's measurement, S seconds of warm-up;
  - `idle:S`: after `--idle-s` of an idle GPU, S seconds of warm-up.

Reported (OUT.json, and tables on stdout): per configuration the median runtime of each way;
per way, each sample over its configuration's median by the reference way (`--reference`,
the 0.1 s floor on a busy GPU): the median ratio, the share of samples more than 2% off (half
the screen's promotion margin) and the largest deviation; and the seconds each way took.

    python3 bench/gpu/warmup_floor.py OUT.json [--configs 8] [--rounds 3] [--idle-s 3]
        [--ways busy:0.02,busy:0.1,idle:0.02] [--reference busy:0.1]
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
OFF = 0.02  # a sample this far off its configuration's reference median counts as off


def screen(warmup_s: float) -> MeasureSettings:
    """The screen's measurement (runtime_ms): a 0.2 s hot window after `warmup_s`."""
    return MeasureSettings(warmup_s=warmup_s, min_repeats=20, max_repeats=2000, target_s=0.05, hot_window_s=0.2)


def spread_configs(count: int) -> list[dict[str, Any]]:
    """`count` completed configurations of the sweep at evenly spaced ranks of its runtimes."""
    rows = sorted((r for r in json.loads(SWEEP.read_text())["rows"] if r.get("status") == "completed"),
                  key=lambda r: r["values"]["runtime_ms"])
    picks = sorted({round(i * (len(rows) - 1) / max(1, count - 1)) for i in range(count)})
    return [rows[i]["config"] for i in picks]


def measure(harness: Harness, config: dict[str, Any], built: Any, way: str, idle_s: float) -> dict[str, Any]:
    state, seconds = way.split(":")
    if state == "idle":
        time.sleep(idle_s)
    started = time.perf_counter()
    metrics, environment = harness.backend.measure(harness.spec, config, built, ["runtime_ms"], screen(float(seconds)))
    hot = next(iter(environment["shapes"].values()))["hot"]
    return {"way": way, "runtime_ms": metrics["runtime_ms"].value, "warmup_s": hot.get("warmup_s"),
            "sm_clock_mhz": hot.get("sm_clock_mhz"), "seconds": time.perf_counter() - started}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--configs", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--idle-s", type=float, default=3.0)
    parser.add_argument("--ways", default="busy:0.02,busy:0.1,idle:0.02")
    parser.add_argument("--reference", default="busy:0.1")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    ways = args.ways.split(",")
    assert args.reference in ways, "the reference must be one of the ways"
    # each way's warm-up is the one used: the floors are set aside
    gpu_harness.MIN_WARMUP_S = gpu_harness.BUSY_WARMUP_S = 0.0
    harness = Harness("triton", "gemm_bf16", ArtifactCache(Path(tempfile.mkdtemp(prefix="warmup-floor-"))),
                      screen(0.1))
    configs = spread_configs(args.configs)
    built = []
    for config in configs:
        artifact, _ = harness.built(config)
        outcome = harness.backend.check(harness.spec, config, artifact)
        assert outcome.passed, (config, outcome.details)
        built.append(artifact)
    rng = random.Random(args.seed)
    samples: list[dict[str, Any]] = []
    harness.backend.measure(harness.spec, configs[0], built[0], ["runtime_ms"], screen(1.0))  # the GPU busy
    for round_ in range(args.rounds):
        order = list(range(len(configs)))
        rng.shuffle(order)
        for turn, index in enumerate(order):
            shift = (turn + round_) % len(ways)
            for way in ways[shift:] + ways[:shift]:
                sample = measure(harness, configs[index], built[index], way, args.idle_s)
                samples.append({"config": index, "round": round_, **sample})
        print(f"round {round_ + 1} of {args.rounds} done", flush=True)
    result = {"configs": configs, "samples": samples, "args": vars(args), "screen": screen(0.0).model_dump(),
              "device": gpu_harness.device_description()}
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(tables(result))


def tables(result: dict[str, Any]) -> str:
    ways, reference = result["args"]["ways"].split(","), result["args"]["reference"]
    samples = result["samples"]
    lines = ["| config | " + " | ".join(f"{w} ms" for w in ways) + " | median SM clock MHz of the windows |",
             "| --- |" + " --- |" * (len(ways) + 1)]
    deviations: dict[str, list[float]] = {w: [] for w in ways}
    for index, config in enumerate(result["configs"]):
        mine = [s for s in samples if s["config"] == index]
        median = {w: statistics.median(s["runtime_ms"] for s in mine if s["way"] == w) for w in ways}
        clock = {w: statistics.median((s["sm_clock_mhz"] or {}).get("median", 0) for s in mine if s["way"] == w)
                 for w in ways}
        for s in mine:
            deviations[s["way"]].append(s["runtime_ms"] / median[reference] - 1)
        name = "x".join(str(config[k]) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K")) + \
            f" w{config['num_warps']} s{config['num_stages']}"
        lines.append(f"| {name} | " + " | ".join(f"{median[w]:.4f}" for w in ways) + " | "
                     + ", ".join(f"{clock[w]:.0f}" for w in ways) + " |")
    lines += ["", f"Each sample over its configuration's median by {reference}:", "",
              "| way | median | samples more than 2% off | largest deviation | median seconds per measurement |",
              "| --- | --- | --- | --- | --- |"]
    for w in ways:
        d = deviations[w]
        off = sum(abs(x) > OFF for x in d)
        seconds = statistics.median(s["seconds"] for s in samples if s["way"] == w)
        lines.append(f"| {w} | {statistics.median(d):+.4f} | {off} of {len(d)} | {max(d, key=abs):+.4f} |"
                     f" {seconds:.3f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()

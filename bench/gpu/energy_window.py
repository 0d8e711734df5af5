"""How long a hot window energy per call needs, from raw NVML counter ticks.

Each round measures a few configurations of a built-in kernel through the backend's own
measurement (compile, then `measure` as a trial runs it), with an idle gap before each as
between trials, and a long hot window. The NVML counter ticks and the CUDA-graph replay
timings of every hot window are kept, so shorter windows and other estimators can be
computed afterwards from the same data: a shorter window is the long one cut short (the GPU
does not know that more work follows).

Estimators, for a window of W seconds that skips its first S seconds:
- `rate`: energy between the first and last counter tick inside [start + S, start + W],
  divided by that span over the window's mean time per call (the harness's first method);
- `counted`: the same energy over the calls that ran between those two ticks, counted from
  the replays' GPU timestamps (`workers.measure.gpu_energy.calls_between`);
- `periods`: spans of a whole number of the power controller's one-second periods between
  ticks, over the calls counted in them (`workers.measure.gpu_energy.energy_window`, what
  the harness does now; bench/gpu/energy_reference.py checks it against a 20 s reference).
  The second table gives each estimator's median power and energy per call.

    python3 bench/gpu/energy_window.py --out energy.json [--rounds 10] [--window-s 1.6]
    python3 bench/gpu/energy_window.py --analyse energy.json
    python3 bench/gpu/energy_window.py --cycle energy.json   # the power controller's cycle
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

CONFIGS = {
    "baseline": {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "num_warps": 4, "num_stages": 3},
    "best": {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3},
    "small_tiles": {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 4, "num_stages": 4},
}
WINDOWS = (0.6, 1.0, 1.6)
SKIPS = (0.0, 0.2, 0.3)


def record(args: argparse.Namespace) -> None:
    from wire.contract import KernelSpec, MeasureSettings
    from workers.backends import get_backend
    from workers.cache import ArtifactCache
    from workers.measure import gpu_harness
    from workers.measure.gpu_energy import PERIOD_TOLERANCE_S, POWER_AVERAGING_S

    captured: dict[str, Any] = {}
    real_hot_window, real_energy_window = gpu_harness.hot_window, gpu_harness.energy_window

    def hot_window(*a: Any, **k: Any) -> Any:
        window = real_hot_window(*a, **k)
        captured["replay_ms"] = [ms * window.calls_per_replay for ms in window.per_call_ms]
        captured.update(
            busy_start=window.busy_start, busy_end=window.busy_end, calls_per_replay=window.calls_per_replay
        )
        return window

    def energy_window(
        ticks: Any,
        busy_start: float,
        busy_end: float,
        period_s: float = POWER_AVERAGING_S,
        tolerance_s: float = PERIOD_TOLERANCE_S,
    ) -> Any:
        captured["ticks"] = [[t.t, t.energy_mj] for t in ticks if busy_start - 0.5 < t.t < busy_end + 0.5]
        return real_energy_window(ticks, busy_start, busy_end, period_s, tolerance_s)

    gpu_harness.hot_window, gpu_harness.energy_window = hot_window, energy_window
    backend = get_backend(args.backend)
    spec = KernelSpec(backend=args.backend, builtin=args.kernel)
    cache = ArtifactCache(Path(args.cache))
    settings = MeasureSettings(warmup_s=0.1, min_repeats=20, max_repeats=2000, target_s=0.2, hot_window_s=args.window_s)
    built = {}
    for name, config in CONFIGS.items():
        key = backend.cache_key(spec, config)
        built[name] = cache.lookup(key) or cache.commit(key, backend.compile(spec, config, cache.staging()))
    rows = []
    names = list(CONFIGS)
    for index in range(args.rounds):
        for name in names[index % len(names) :] + names[: index % len(names)]:
            time.sleep(args.gap_s)  # idle, as between two trials
            captured.clear()
            metrics, environment = backend.measure(
                spec, CONFIGS[name], built[name], ["runtime_ms", "energy_mj", "p99_ms"], settings
            )
            hot = next(iter(environment["shapes"].values()))["hot"]
            rows.append(
                {
                    "round": index,
                    "name": name,
                    "runtime_ms": metrics["runtime_ms"].value,
                    "energy_mj": metrics["energy_mj"].value if "energy_mj" in metrics else None,
                    "sm_clock_mhz": hot.get("sm_clock_mhz"),
                    "temperature_c": hot.get("temperature_c"),
                    **captured,
                }
            )
            print(f"round {index} {name} {rows[-1]['runtime_ms']:.5f} ms {rows[-1]['energy_mj']} mJ", flush=True)
        Path(args.out).write_text(json.dumps({"configs": CONFIGS, "window_s": args.window_s, "rows": rows}))


def estimates(row: dict[str, Any], window_s: float, skip_s: float) -> dict[str, float] | None:
    """Energy per call in mJ (`rate`, `counted`, `periods`) and power in W (`*_w`) for the
    window cut to `window_s`, skipping `skip_s`."""
    from workers.measure.gpu_energy import Tick, calls_between, energy_window, window_calls

    start = row["busy_start"]
    ends, t = [], start
    for ms in row["replay_ms"]:
        t += ms / 1000.0
        ends.append(t)
    cut = min(start + window_s, ends[-1])
    inside = [(t, e) for t, e in row["ticks"] if start + skip_s < t < cut]
    if len(inside) < 2:
        return None
    (t0, e0), (t1, e1) = inside[0], inside[-1]
    replays = [end for end in ends if end <= cut]
    elapsed = replays[-1] - start
    mean_call_s = elapsed / (len(replays) * row["calls_per_replay"])
    calls = calls_between(start, row["replay_ms"], row["calls_per_replay"], t0, t1)
    energy = e1 - e0
    window = energy_window([Tick(t, e) for t, e in inside], start + skip_s, cut)
    assert window is not None
    periods_calls = window_calls(window, start, row["replay_ms"], row["calls_per_replay"])
    return {
        "rate": energy / ((t1 - t0) / mean_call_s),
        "counted": energy / calls,
        "periods": window.energy_mj / periods_calls,
        "counted_w": energy / (t1 - t0) / 1000.0,
        "periods_w": window.power_w,
        "ticks": len(inside),
    }


def analyse(path: Path) -> None:
    data = json.loads(path.read_text())
    rows = data["rows"]
    names = list(data["configs"])
    print(f"{len(rows)} hot windows of {data['window_s']} s; spread = max/min - 1 over the rounds\n")
    print("| window s | skip s | estimator | " + " | ".join(names) + " |")
    print("| --- | --- | --- | " + " | ".join("---" for _ in names) + " |")
    for window in WINDOWS:
        for skip in SKIPS:
            for estimator in ("rate", "counted", "periods"):
                cells = []
                for name in names:
                    values = [e[estimator] for r in rows if r["name"] == name and (e := estimates(r, window, skip))]
                    cells.append(f"{max(values) / min(values) - 1:.4f} (n={len(values)})" if len(values) > 1 else "-")
                print(f"| {window} | {skip} | {estimator} | " + " | ".join(cells) + " |")
    print("\nMedian over the rounds, no skip: power W (counted = first to last tick; periods) and mJ per call\n")
    columns = (f"{n} W counted | {n} W periods | {n} mJ counted | {n} mJ periods" for n in names)
    print("| window s | " + " | ".join(columns) + " |")
    print("| --- | " + " | ".join("--- | --- | --- | ---" for _ in names) + " |")
    for window in WINDOWS:
        cells = []
        for name in names:
            found = [e for r in rows if r["name"] == name and (e := estimates(r, window, 0.0))]
            for key, digits in (("counted_w", 1), ("periods_w", 1), ("counted", 2), ("periods", 2)):
                values = sorted(e[key] for e in found)
                cells.append(f"{values[len(values) // 2]:.{digits}f}" if values else "-")
        print(f"| {window} | " + " | ".join(cells) + " |")


def cycle(path: Path) -> None:
    """Power between consecutive ticks and replay time against time since the window's start
    (0.1 s buckets, all windows), and the power of one-second spans by their first tick."""
    from workers.measure.gpu_energy import POWER_AVERAGING_S

    rows = json.loads(path.read_text())["rows"]
    power: dict[float, list[float]] = {}
    slowness: dict[float, list[float]] = {}
    spans: dict[float, list[float]] = {}
    for row in rows:
        start, ticks = row["busy_start"], row["ticks"]
        for (t0, e0), (t1, e1) in zip(ticks, ticks[1:], strict=False):
            if start < t0 and t1 < row["busy_end"]:
                power.setdefault(round((t0 + t1) / 2 - start, 1), []).append((e1 - e0) / (t1 - t0) / 1000.0)
        typical, t = statistics.median(row["replay_ms"]), 0.0
        for ms in row["replay_ms"]:
            slowness.setdefault(round(t + ms / 2000.0, 1), []).append(ms / typical)
            t += ms / 1000.0
        inside = [(t, e) for t, e in ticks if start < t < row["busy_end"]]
        for i, (t0, e0) in enumerate(inside):
            for t1, e1 in inside[i + 1 :]:
                if abs(t1 - t0 - POWER_AVERAGING_S) < 0.03:
                    spans.setdefault(round(t0 - start, 1), []).append((e1 - e0) / (t1 - t0) / 1000.0)
    print("| s since start | power between ticks W (mean) | min | max | replay time / median (mean) |")
    print("| --- | --- | --- | --- | --- |")
    for key in sorted(power):
        values, slow = power[key], slowness.get(key, [float("nan")])
        print(f"| {key:.1f} | {statistics.mean(values):.0f} | {min(values):.0f} | {max(values):.0f} | "
              f"{statistics.mean(slow):.3f} |")
    print("\n| first tick s after start | one-second spans | power W median | min | max |")
    print("| --- | --- | --- | --- | --- |")
    for key in sorted(spans):
        values = spans[key]
        median = statistics.median(values)
        print(f"| {key:.1f} | {len(values)} | {median:.1f} | {min(values):.0f} | {max(values):.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="energy_window.json")
    parser.add_argument("--analyse", type=Path, default=None)
    parser.add_argument("--cycle", type=Path, default=None)
    parser.add_argument("--kernel", default="gemm_bf16")
    parser.add_argument("--backend", default="triton")
    parser.add_argument("--cache", default="/tmp/paretune-energy-cache")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--window-s", type=float, default=1.6)
    parser.add_argument("--gap-s", type=float, default=1.0)
    args = parser.parse_args()
    if args.analyse:
        analyse(args.analyse)
        return
    if args.cycle:
        cycle(args.cycle)
        return
    record(args)
    analyse(Path(args.out))


if __name__ == "__main__":
    main()

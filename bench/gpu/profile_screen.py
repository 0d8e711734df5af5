"""Where a screening trial's run phase goes, on the GPU: the built-in bf16 GEMM 4096^3's
check and screen measurement (the study document's default screen, runtime only) for a few
configurations, in one process as a warm runner would run them, with each step timed and a
cProfile of the whole printed by cumulative time.

    python3 bench/gpu/profile_screen.py --out DIR [--configs 8] [--rounds 2]

Prints a table of median seconds per step over the configurations (the first round warms
the process and is left out), and writes DIR/profile_screen.json and DIR/profile_screen.txt
(the cProfile listing).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench" / "gpu"))

from sweep import Harness, space_points  # noqa: E402

from wire.contract import MeasureSettings  # noqa: E402
from wire.failures import TrialFailure  # noqa: E402
from wire.kernels import get_builtin  # noqa: E402
from workers.cache import ArtifactCache  # noqa: E402
from workers.measure import gpu_harness, gpu_timing  # noqa: E402

# the screen's defaults (service.studies.document.Screen) over a full measurement's settings
SCREEN = MeasureSettings(warmup_s=0.1, hot_window_s=0.2, target_s=0.05, cold_samples=50, min_repeats=20,
                         max_repeats=2000)
STEPS: dict[str, list[float]] = {}


def timed(owner: Any, name: str, label: str) -> None:
    """Wrap owner.name so that each call's seconds go to STEPS[label]."""
    original = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            STEPS.setdefault(label, []).append(time.perf_counter() - started)

    setattr(owner, name, wrapper)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--configs", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    builtin = get_builtin("triton", "gemm_bf16")
    assert builtin is not None
    harness = Harness("triton", "gemm_bf16", ArtifactCache(Path(tempfile.mkdtemp())), SCREEN)
    points = space_points(builtin.space)
    random.Random(7).shuffle(points)
    configs = []
    for config in points:  # the first ones that launch
        try:
            harness.built(config)
        except TrialFailure:
            continue
        configs.append(config)
        if len(configs) == args.configs:
            break
    for owner, name, label in [
        (gpu_harness, "device_description", "device_description"),
        (gpu_harness, "estimate_call_seconds", "estimate_call_seconds"),
        (gpu_harness, "_hot", "hot (capture, warm-up, window, energy)"),
        (gpu_timing, "capture", "graph capture"),
        (gpu_harness, "NvmlSampler", "sampler construct"),
        (gpu_harness, "nvml_handle_for_torch_device", "nvml handle"),
        (gpu_harness, "workload_metrics", "workload_metrics"),
        (gpu_harness, "measure_workload", "measure_workload"),
        (harness.backend, "_prepare", "_prepare (module load)"),
        (harness.backend, "check", "check"),
        (harness.backend, "measure", "measure"),
    ]:
        timed(owner, name, label)
    backend = harness.backend
    profile = cProfile.Profile()
    rows = []
    for round_ in range(args.rounds):
        if round_ == 1:
            STEPS.clear()
            profile.enable()
        for config in configs:
            built, _ = harness.built(config)
            started = time.perf_counter()
            outcome = backend.check(harness.spec, config, built)
            checked = time.perf_counter()
            metrics, environment = backend.measure(harness.spec, config, built, ["runtime_ms"], SCREEN)
            ended = time.perf_counter()
            rows.append({"round": round_, "config": config, "passed": outcome.passed,
                         "hot_modes": [shape["hot"]["mode"] for shape in environment["shapes"].values()],
                         "check_s": checked - started, "measure_s": ended - checked,
                         "runtime_ms": metrics["runtime_ms"].value})
    profile.disable()
    medians = {label: statistics.median(values) for label, values in STEPS.items()}
    counts = {label: len(values) for label, values in STEPS.items()}
    modes = sorted({mode for row in rows for mode in row["hot_modes"]})
    print(f"hot windows replayed as: {modes} (graph: one CUDA graph per replay)")
    print(f"{'step':45} {'median s':>9} {'calls':>6}")
    for label, value in sorted(medians.items(), key=lambda item: -item[1]):
        print(f"{label:45} {value:9.4f} {counts[label]:6d}")
    listing = io.StringIO()
    pstats.Stats(profile, stream=listing).sort_stats("cumulative").print_stats(60)
    (out / "profile_screen.txt").write_text(listing.getvalue())
    print(listing.getvalue()[:6000])
    (out / "profile_screen.json").write_text(json.dumps(
        {"settings": SCREEN.model_dump(), "medians_s": medians, "calls": counts, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()

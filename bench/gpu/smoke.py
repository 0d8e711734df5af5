"""First look at a GPU machine through the paretune GPU backends.

For each built-in GPU kernel: the default configuration and a few others go through the
worker's own trial sandbox (compile process, then check+measure process), reporting the
metrics and the time each phase took; planted wrong variants must fail as wrong results; a
configuration asking for an ACF must be refused on ptxas < 13.3. Writes everything to
OUT/smoke.json and prints a table last.

    python3 bench/gpu/smoke.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from wire.contract import KernelSpec, MeasureSettings, TrialSpec  # noqa: E402
from wire.kernels import get_builtin  # noqa: E402
from workers.backends import probe_backends  # noqa: E402
from workers.cache import ArtifactCache  # noqa: E402
from workers.sandbox.context import Context  # noqa: E402
from workers.sandbox.stages import execute_trial  # noqa: E402

OBJECTIVES = ["runtime_ms", "energy_mj", "p99_ms", "latency_ms", "power_w"]
SETTINGS = MeasureSettings(warmup_s=0.1, min_repeats=20, max_repeats=2000, target_s=0.2, hot_window_s=0.5)
CONFIGS: dict[tuple[str, str], list[dict[str, Any]]] = {
    ("triton", "gemm_bf16"): [
        {},
        {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3},
        {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "num_warps": 4, "num_stages": 2},
        {"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 128, "num_warps": 8, "num_stages": 6},
        {},
    ],
    ("triton", "attention_fwd"): [
        {},
        {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3},
        {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8, "num_stages": 2},
    ],
    ("cuda", "rmsnorm"): [
        {},
        {"THREADS": 256, "ROWS_PER_CTA": 1, "VEC": 8, "CACHE_ROW": 1},
        {"THREADS": 128, "ROWS_PER_CTA": 4, "VEC": 8, "CACHE_ROW": 1, "max_register_count": 32},
        {"THREADS": 512, "ROWS_PER_CTA": 2, "VEC": 4, "CACHE_ROW": 0, "use_fast_math": True},
        {},
    ],
}
_ids = iter(range(1, 10_000))


def trial(backend: str, name: str, config: dict[str, Any], **kernel: Any) -> TrialSpec:
    spec = KernelSpec(backend=backend, builtin=name, **kernel)
    return TrialSpec(
        trial_id=next(_ids),
        study_id=0,
        number=0,
        attempt=1,
        is_baseline=not config,
        kernel=spec,
        config=config,
        objectives=OBJECTIVES,
        compile_timeout_s=300,
        run_timeout_s=300,
        measure=SETTINGS,
    )


def run(cache: ArtifactCache, spec: TrialSpec) -> dict[str, Any]:
    started = time.perf_counter()
    result = execute_trial(spec, Context(cache))
    assert result is not None
    row: dict[str, Any] = {
        "kernel": spec.kernel.builtin,
        "config": spec.config,
        "planted": bool(spec.kernel.source),
        "status": result.status,
        "reason": result.failure_reason.value if result.failure_reason else None,
        "message": result.message[:300],
        "wall_s": time.perf_counter() - started,
        "timings": result.timings,
        "metrics": {k: m.model_dump() for k, m in result.metrics.items()},
        "environment": result.environment,
        "compile_report": result.compile_report,
        "correctness": result.correctness,
    }
    if result.status == "failed":
        row["log"] = result.log[-3000:]
    return row


def planted_sources() -> list[tuple[str, str, str]]:
    gemm = get_builtin("triton", "gemm_bf16").read_source()  # type: ignore[union-attr]
    norm = get_builtin("cuda", "rmsnorm").read_source()  # type: ignore[union-attr]
    wrong_gemm = gemm.replace("tl.cdiv(K, BLOCK_K))", "tl.cdiv(K, BLOCK_K) - 1)")
    wrong_norm = norm.replace(
        "idx < VECS_PER_ROW) {\n#if CACHE_ROW\n            const",
        "idx < VECS_PER_ROW - 1) {\n#if CACHE_ROW\n            const",
    )
    assert wrong_gemm != gemm and wrong_norm != norm
    return [("triton", "gemm_bf16", wrong_gemm), ("cuda", "rmsnorm", wrong_norm)]


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "smoke-out")
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"probe": probe_backends(["triton", "cuda"]), "rows": []}
    print(json.dumps(report["probe"], indent=1, default=str), flush=True)
    cache = ArtifactCache(Path(tempfile.mkdtemp(prefix="paretune-smoke-")))
    specs = [trial(b, n, c) for (b, n), configs in CONFIGS.items() for c in configs]
    specs += [trial(b, n, {}, source=s) for b, n, s in planted_sources()]
    specs.append(trial("triton", "gemm_bf16", {"acf": "tuned"}, options={"acf_files": {"tuned": "# controls\n"}}))
    for spec in specs:
        row = run(cache, spec)
        report["rows"].append(row)
        (out / "smoke.json").write_text(json.dumps(report, indent=1, default=str))
        print(
            json.dumps({k: row[k] for k in ("kernel", "config", "status", "reason", "wall_s", "timings")}, default=str),
            flush=True,
        )
    print_table(report["rows"])


def print_table(rows: list[dict[str, Any]]) -> None:
    print(
        f"\n{'kernel':14} {'config':44} {'status':9} {'rt_ms':>8} {'p99_ms':>8} "
        f"{'E_mJ':>8} {'P_W':>6} {'clk':>5} {'wall':>5}"
    )
    for row in rows:
        m = row["metrics"]
        config = json.dumps(row["config"], separators=(",", ":"))[:44]
        if row["planted"]:
            config = "PLANTED WRONG " + config
        status = row["status"] if row["status"] == "completed" else (row["reason"] or "failed")

        def value(name: str, m: dict = m) -> str:
            return f"{m[name]['value']:.4f}" if name in m else "-"

        clocks = [s.get("sm_clock_mhz", {}).get("median") for s in row["environment"].get("shapes", {}).values()]
        clock = f"{clocks[0]:.0f}" if clocks and clocks[0] else "-"
        print(
            f"{row['kernel']:14} {config:44} {status:9} {value('runtime_ms'):>8} "
            f"{value('p99_ms'):>8} {value('energy_mj'):>8} "
            f"{m.get('power_w', {}).get('value', 0):6.0f} {clock:>5} {row['wall_s']:5.1f}"
        )


if __name__ == "__main__":
    main()

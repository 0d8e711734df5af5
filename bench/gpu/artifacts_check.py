"""GPU check of the artifact pieces that need a GPU (issue 11, phase 1), on the H200.

1. detect_target for the triton and cuda backends: the strings a validation records and a
   runtime matches against (GPU, compute capability, driver, CUDA, Triton, ptxas, NVRTC).
2. Validation jobs through the worker's own sandboxes: gemm_bf16 (Triton) with the baseline
   and two candidates, rmsnorm (CUDA) with the baseline and one candidate, each checked on
   its extended shapes (odd sizes such as 4095x4093x4091, rows 16383, cols 8168) and
   measured in interleaved rounds; the ratios with their intervals (service.artifacts.comparison).
3. The gemm candidate signed as an artifact (a throw-away key), loaded by the runtime
   module with the detected target (an exact match is expected), its triton.Config put on
   the built-in kernel with @store.autotune and run in plain PyTorch: the result against
   torch.matmul, the time against the default configuration (triton.testing.do_bench).
4. The rmsnorm artifact's NVRTC flags compiled with NVRTC itself (cuda.bindings), so a
   build that takes `paretune artifact flags --tool nvrtc` gets options NVRTC accepts.

Writes OUT/artifacts_check.json and prints a summary. `--cpu` runs steps 2 and 3 on the
cpu backend's matmul instead (a dry run of the script's plumbing on a machine without GPU).

    python3 bench/gpu/artifacts_check.py OUT_DIR [--cpu]
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from cryptography.hazmat.primitives import serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402

from service.artifacts.comparison import compare_reports  # noqa: E402
from wire.artifact import ArtifactDocument, CorrectnessSummary, Provenance, sign  # noqa: E402
from wire.artifact_controls import controls_for, kernel_identity  # noqa: E402
from wire.contract import KernelSpec, MeasureSettings, ValidationCandidate, ValidationSpec  # noqa: E402
from workers.cache import ArtifactCache  # noqa: E402
from workers.runtime import ArtifactStore, detect_target  # noqa: E402
from workers.sandbox.context import Context  # noqa: E402
from workers.validation.stages import execute_validation  # noqa: E402

SETTINGS = MeasureSettings(warmup_s=0.1, min_repeats=20, max_repeats=2000, target_s=0.2, hot_window_s=0.5)
CPU_SETTINGS = MeasureSettings(warmup_s=0.01, min_repeats=5, max_repeats=50, target_s=0.05, hot_window_s=0.2)
GEMM_CANDIDATES = [
    {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3},
    {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "num_warps": 4, "num_stages": 2},
]
NORM_CANDIDATE = {"THREADS": 256, "ROWS_PER_CTA": 1, "VEC": 8, "CACHE_ROW": 1}
CPU_CANDIDATES = [{"opt": "-O3", "TILE_M": 32, "TILE_N": 128, "TILE_K": 64}, {"opt": "-O1"}]


def validate(
    name: str,
    backend: str,
    baseline: dict,
    candidates: list[dict],
    cache: ArtifactCache,
    *,
    rounds: int,
    settings: MeasureSettings,
) -> dict[str, Any]:
    spec = ValidationSpec(
        validation_id=1,
        job_id=hash(name) % 1000,
        study_id=0,
        kernel=KernelSpec(backend=backend, builtin=name),
        baseline=baseline,
        candidates=[ValidationCandidate(candidate_id=i + 1, config=c) for i, c in enumerate(candidates)],
        objectives=["runtime_ms", "latency_ms"] if backend == "cpu" else ["runtime_ms", "energy_mj", "latency_ms"],
        rounds=rounds,
        measure=settings,
        compile_timeout_s=600,
        run_timeout_s=1800,
    )
    started = time.perf_counter()
    report = execute_validation(spec, Context(cache))
    assert report is not None
    row: dict[str, Any] = {
        "kernel": name,
        "wall_s": time.perf_counter() - started,
        "report": report.model_dump(mode="json", exclude={"fingerprint"}),
    }
    print(
        f"\n== validation of {name}: {report.status} {report.message} ({row['wall_s']:.0f} s, {report.rounds} rounds)"
    )
    print("   shapes:", [s.dims for s in report.shapes])
    print("   target:", report.target)
    comparisons = {}
    for outcome in [report.baseline, *report.candidates]:
        shapes = ", ".join(f"{'ok' if s.passed else 'WRONG'} {s.dims}" for s in outcome.correctness)
        print(f"   {outcome.candidate_id or 'baseline'}: {outcome.status} {outcome.message} | {shapes}")
        if outcome.candidate_id is not None and outcome.status == "ok":
            metrics = compare_reports([report], outcome.candidate_id, [(o, "minimize") for o in spec.objectives])
            comparisons[outcome.candidate_id] = [m.model_dump() for m in metrics]
            for m in metrics:
                print(f"      {m.objective}: ratio {m.ratio:.4f} [{m.ci_low:.4f}, {m.ci_high:.4f}] {m.verdict}")
    row["comparisons"] = comparisons
    row["spec"] = spec
    return row


def artifact_for(row: dict[str, Any], candidate_id: int, key: Ed25519PrivateKey) -> bytes:
    spec: ValidationSpec = row["spec"]
    report = row["report"]
    config = next(c.config for c in spec.candidates if c.candidate_id == candidate_id)
    target = detect_target(spec.kernel.backend)
    arch = f"sm_{target.compute_capability.replace('.', '')}" if target.compute_capability else None
    now = datetime.now(UTC)
    outcome = next(c for c in report["candidates"] if c["candidate_id"] == candidate_id)
    doc = ArtifactDocument(
        version=1,
        kernel=kernel_identity(spec.kernel),
        target=target,
        workload=[],
        controls=controls_for(spec.kernel, config, arch=arch),
        metrics=row["comparisons"][candidate_id],
        correctness=CorrectnessSummary(passed=True, shapes=outcome["correctness"]),
        provenance=Provenance(
            study_id=0,
            trial_id=0,
            validation_id=1,
            measurement_method="paretune-measure/1",
            promoted_by="check",
            promoted_at=now,
            validated_at=now,
            approved_by="check",
            approved_at=now,
        ),
    )
    return sign(doc, key).file_bytes()


def run_gemm_through_runtime(store: ArtifactStore, default: dict) -> dict[str, Any]:
    import torch
    import triton
    from triton.testing import do_bench

    from wire.kernels.gpu import gemm_bf16 as gemm

    selection = store.select("gemm_bf16")
    print("\n== runtime module:", selection.match.describe() if selection.match else "NO MATCH")
    configs = store.triton_configs("gemm_bf16", default=[])
    print("   triton.Config:", configs)
    tuned = store.autotune("gemm_bf16", key=["M", "N", "K"], default=[])(gemm.matmul_kernel)
    m = n = k = 4096
    a = torch.randn((m, k), device="cuda", dtype=torch.bfloat16)
    b = torch.randn((k, n), device="cuda", dtype=torch.bfloat16)
    c = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
    args = (a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    launch = store.launch_options("gemm_bf16")

    def grid(meta: dict) -> tuple[int]:
        return (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)

    def approved() -> None:
        tuned[grid](*args, GROUP_M=8, **launch)

    def baseline() -> None:
        meta = {k: v for k, v in default.items() if k.isupper()}
        options = {k: v for k, v in default.items() if not k.isupper()}
        gemm.matmul_kernel[grid({**meta})](*args, GROUP_M=8, **meta, **options)

    approved()
    error = ((c.float() - a.float() @ b.float()).norm() / (a.float() @ b.float()).norm()).item()
    approved_ms, baseline_ms = do_bench(approved), do_bench(baseline)
    print(
        f"   rel L2 error {error:.2e}; approved {approved_ms:.4f} ms, default {baseline_ms:.4f} ms, "
        f"ratio {approved_ms / baseline_ms:.4f}"
    )
    return {
        "match": selection.match.describe() if selection.match else None,
        "rel_l2_err": error,
        "approved_ms": approved_ms,
        "default_ms": baseline_ms,
        "configs": [str(x) for x in configs],
    }


def compile_with_nvrtc_flags(store: ArtifactStore) -> dict[str, Any]:
    from cuda.bindings import nvrtc

    from wire.kernels import get_builtin

    flags = store.flags("rmsnorm", "nvrtc") + ["-DCOLS=8192"]  # the shape macro a build adds itself
    source = get_builtin("cuda", "rmsnorm").read_source().encode()  # type: ignore[union-attr]
    _, program = nvrtc.nvrtcCreateProgram(source, b"rmsnorm.cu", 0, [], [])
    (result,) = nvrtc.nvrtcCompileProgram(program, len(flags), [f.encode() for f in flags])
    _, size = nvrtc.nvrtcGetProgramLogSize(program)
    log = b" " * size
    nvrtc.nvrtcGetProgramLog(program, log)
    ok = result == nvrtc.nvrtcResult.NVRTC_SUCCESS
    status = "compiled" if ok else "FAILED"
    print(f"\n== NVRTC with the artifact's flags {flags}: {status}\n{log.decode(errors='replace')}")
    return {"flags": flags, "compiled": ok, "log": log.decode(errors="replace")}


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "artifacts-out")
    cpu = "--cpu" in sys.argv
    out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"targets": {b: detect_target(b).model_dump() for b in ("triton", "cuda", "cpu")}}
    print("targets:", json.dumps(result["targets"], indent=1))
    cache = ArtifactCache(Path(tempfile.mkdtemp(prefix="paretune-artifacts-")))
    key = Ed25519PrivateKey.generate()
    pem = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    directory = out / "artifacts"
    directory.mkdir(exist_ok=True)
    rows = []
    if cpu:
        rows.append(validate("matmul", "cpu", {"opt": "-O2"}, CPU_CANDIDATES, cache, rounds=6, settings=CPU_SETTINGS))
    else:
        from wire.kernels import get_builtin

        gemm_default = get_builtin("triton", "gemm_bf16").default_config  # type: ignore[union-attr]
        rows.append(validate("gemm_bf16", "triton", {}, GEMM_CANDIDATES, cache, rounds=8, settings=SETTINGS))
        rows.append(validate("rmsnorm", "cuda", {}, [NORM_CANDIDATE], cache, rounds=8, settings=SETTINGS))
    for row in rows:
        if 1 in row["comparisons"]:
            (directory / f"{row['kernel']}.json").write_bytes(artifact_for(row, 1, key))
    store = ArtifactStore.load(directory, pem.decode())
    result["validations"] = [{k: v for k, v in row.items() if k != "spec"} for row in rows]
    if cpu:
        result["cpu_flags"] = store.flags("matmul", "cc")
        match = store.select("matmul").match
        print("\n== runtime module, cpu flags:", result["cpu_flags"], match.describe() if match else "NO MATCH")
    else:
        result["runtime_gemm"] = run_gemm_through_runtime(store, gemm_default)
        result["nvrtc"] = compile_with_nvrtc_flags(store)
    (out / "artifacts_check.json").write_text(json.dumps(result, indent=1, default=str))
    print(f"\nwrote {out / 'artifacts_check.json'}")


if __name__ == "__main__":
    main()

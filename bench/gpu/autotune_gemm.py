"""Triton's own `triton.autotune` on the built-in bf16 GEMM, timed from its first call: what a
team gets without paretune, to set beside a study's wall time (bench/gpu/transfer_wall.py).

The built-in has a baseline, not a list of configurations of its own, so the list autotuned
is the one Triton's matrix-multiplication tutorial autotunes for CUDA (16 configurations,
GROUP_SIZE_M 8 there as GROUP_M here) with the built-in's baseline first. A fresh process
with an empty TRITON_CACHE_DIR (the caller's) compiles every configuration on the first call,
as a first launch does; `do_bench` then times each (Triton's defaults, warm-up 25 ms,
repetitions 100 ms).

Printed and written (--out, JSON): the first call's wall time (compiles and benchmarks, the
CUDA context and inputs ready before it), Triton's own `bench_time`, its pick as a
configuration of the built-in's space, and every configuration's timing.

    python3 bench/gpu/autotune_gemm.py --dims '{"m": 2048, "n": 14336, "k": 4096}' --out autotune.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from wire.kernels import get_builtin  # noqa: E402

# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) of the tutorial's CUDA list, in its order
TUTORIAL = [
    (128, 256, 64, 8, 3), (64, 256, 32, 4, 4), (128, 128, 32, 4, 4), (128, 64, 32, 4, 4),
    (64, 128, 32, 4, 4), (128, 32, 32, 4, 4), (64, 32, 32, 2, 5), (32, 64, 32, 2, 5),
    (128, 256, 128, 8, 3), (256, 128, 128, 8, 3), (256, 64, 128, 4, 4), (64, 256, 128, 4, 4),
    (128, 128, 128, 4, 4), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4), (128, 32, 64, 4, 4),
]


def config_list(baseline: dict[str, Any]) -> list[dict[str, Any]]:
    """The built-in's baseline, then the tutorial's list (each configuration once)."""
    configs = [dict(baseline)]
    for m, n, k, warps, stages in TUTORIAL:
        config = {"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "num_warps": warps, "num_stages": stages}
        if config not in configs:
            configs.append(config)
    return configs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dims", required=True, help='the GEMM shape as JSON, {"m": ..., "n": ..., "k": ...}')
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    dims = json.loads(args.dims)

    started = time.perf_counter()
    import torch
    import triton

    from wire.kernels.gpu import gemm_bf16 as source

    builtin = get_builtin("triton", "gemm_bf16")
    assert builtin is not None
    constants = dict(builtin.options.get("constants", {}))
    configs = config_list(builtin.default_config)
    triton_configs = [
        triton.Config({"BLOCK_M": c["BLOCK_M"], "BLOCK_N": c["BLOCK_N"], "BLOCK_K": c["BLOCK_K"], **constants},
                      num_warps=c["num_warps"], num_stages=c["num_stages"])
        for c in configs
    ]
    tuned = triton.autotune(configs=triton_configs, key=["M", "N", "K"])(source.matmul_kernel)
    generator = torch.Generator(device="cuda").manual_seed(0)
    inputs = source.make_inputs(dims, "cuda", generator)
    arguments = source.arguments(inputs, dims)
    torch.cuda.synchronize()
    ready = time.perf_counter()

    tuned[lambda meta: source.grid(dims, meta)](*arguments)
    torch.cuda.synchronize()
    first_call_s = time.perf_counter() - ready

    best = tuned.best_config
    pick = {**{k: v for k, v in best.kwargs.items() if k not in constants},
            "num_warps": best.num_warps, "num_stages": best.num_stages}
    timings = []
    for config, triton_config in zip(configs, triton_configs, strict=True):
        value = tuned.configs_timings.get(triton_config)
        median = value[0] if isinstance(value, list | tuple) else value
        timings.append({"config": config, "ms": None if median is None or not math.isfinite(median) else median})
    reference = source.reference(inputs, dims)
    error = float((source.output(inputs).float() - reference).norm() / reference.norm())
    result = {
        "dims": dims, "configs": len(configs), "first_call_s": first_call_s,
        "bench_time_s": getattr(tuned, "bench_time", None), "setup_s": ready - started, "pick": pick,
        "pick_in_space": all(pick.get(p.name) in getattr(p, "choices", ()) for p in builtin.space),
        "rel_l2_error": error, "timings": timings, "triton": triton.__version__, "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0), "triton_cache_dir": os.environ.get("TRITON_CACHE_DIR"),
    }
    print(json.dumps({k: v for k, v in result.items() if k != "timings"}), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()

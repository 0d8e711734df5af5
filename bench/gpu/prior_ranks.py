"""How the GEMM's structure-model prior (wire.kernels.structure.gemm_bf16) orders each recorded
H200 sweep's configurations before anything is measured: where the configurations within 2% of
the sweep's best fall in the prior's order, how many share the prior's top value (lfbo breaks
such ties at random), the top six's runtimes over the best, and the bytes the best keeps in
flight (stages x the A and B tiles of one K step).

    python bench/gpu/prior_ranks.py [--in-flight 0,65536,131072,196608]

`--in-flight` replays the prior with other values of IN_FLIGHT_BYTES (0: without the term).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from wire.kernels import structure  # noqa: E402

SWEEPS = {
    "square 4096^3": ("bench/results/gpu_raw_2026-11-29/sweep.json", {"m": 4096, "n": 4096, "k": 4096}),
    "decode 64x8192x8192": ("bench/results/gpu_raw_2026-12-02_transfer/sweep_gemm_decode.json",
                            {"m": 64, "n": 8192, "k": 8192}),
    "prefill 8192x4096x4096": ("bench/results/gpu_raw_2026-12-02_transfer/sweep_gemm_prefill.json",
                               {"m": 8192, "n": 4096, "k": 4096}),
    "MLP 2048x14336x4096": ("bench/results/gpu_raw_2026-12-03_wall/sweep_gemm_mlp.json",
                            {"m": 2048, "n": 14336, "k": 4096}),
}


def in_flight(config: dict) -> int:
    return int(config["num_stages"]) * (int(config["BLOCK_M"]) + int(config["BLOCK_N"])) * int(config["BLOCK_K"]) * 2


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--in-flight", default=str(structure.IN_FLIGHT_BYTES))
    args = parser.parse_args()
    kept = structure.IN_FLIGHT_BYTES
    print("| IN_FLIGHT_BYTES | sweep | ranks of the configurations within 2% | configurations tied at the prior's top "
          "| the prior's top six over the best | the best's bytes in flight |")
    print("| --- | --- | --- | --- | --- | --- |")
    try:
        for value in (int(v) for v in args.in_flight.split(",")):
            structure.IN_FLIGHT_BYTES = value or 1  # 1 byte: every pipeline hides it, the term is 0
            for name, (path, dims) in SWEEPS.items():
                rows = [r for r in json.loads((REPO / path).read_text())["rows"] if r["status"] == "completed"]
                best = min(r["values"]["runtime_ms"] for r in rows)
                # ties in the prior keep the sweep's order (stable sort), as the table's ranks
                order = sorted(rows, key=lambda r: -structure.gemm_bf16(r["config"], dims).prior)
                top = structure.gemm_bf16(order[0]["config"], dims).prior
                tied = sum(1 for r in rows if abs(structure.gemm_bf16(r["config"], dims).prior - top) < 1e-9)
                ranks = [i for i, r in enumerate(order) if r["values"]["runtime_ms"] <= 1.02 * best]
                six = ", ".join(f"{r['values']['runtime_ms'] / best:.2f}" for r in order[:6])
                fastest = min(rows, key=lambda r: r["values"]["runtime_ms"])
                print(f"| {value} | {name} | {ranks} | {tied} | {six} | {in_flight(fastest['config']) // 1024} KiB |")
    finally:
        structure.IN_FLIGHT_BYTES = kept


if __name__ == "__main__":
    main()

"""What a configuration of a built-in kernel does on a GPU for one workload shape, in numbers a
search can learn from: the kernel's structure model.

A built-in may declare one beside its resource model (wire.kernels.resources). It gives, for a
configuration and a shape, features of the kernel's structure (tile area, accumulator
registers per thread, arithmetic intensity of a tile, how well the CTAs fill the GPU...) and a
prior: the log2 of a roofline-style estimate of throughput, known before anything is
measured. The `lfbo` sampler (service.scheduling.lfbo) orders its first trials by the prior
and learns from the features which configurations measure best; neither reads a measurement.
No I/O here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# A data-centre GPU's SM count (the H100 and H200 have 132, the A100 108, the B200 148). The
# prior's order of the GEMM's configurations on the recorded shapes is the same for any count
# from 108 to 170 (bench/results/gpu_gemm_cold_search.md), so one figure serves without
# asking the target.
SM_COUNT = 132
# Accumulator registers per thread over which Triton's GEMM spills: half of the 255 a thread
# may have, the rest holding addresses, loaded fragments and loop state.
ACCUMULATOR_REGISTERS = 128
SPILL_PENALTY = 4.0  # log2 units of throughput lost per doubling past ACCUMULATOR_REGISTERS
# Bytes a CTA's software pipeline must hold in flight (stages x the A and B tiles of one K step)
# to hide the latency of HBM: below it, loads stall the tile's math in proportion. Half of a
# Hopper SM's 228 KiB of shared memory; the best configurations of the recorded H200 sweeps, at
# every shape from decode (M = 64) to prefill, hold 144-192 KiB (bench/results/gpu_gemm_prior.md).
IN_FLIGHT_BYTES = 128 * 1024


@dataclass(frozen=True)
class Structure:
    features: list[float]  # the same length and meaning for every configuration of a kernel
    prior: float  # log2 of the estimated throughput: higher is expected faster


StructureModel = Callable[[dict[str, Any], dict[str, int]], Structure]


def gemm_bf16(config: dict[str, Any], dims: dict[str, int]) -> Structure:
    """C[m, n] = A[m, k] @ B[k, n] in BLOCK_M x BLOCK_N tiles, one per CTA. The estimate is
    the product of the tile's arithmetic intensity (flops per byte it loads), the share of
    the padded tiles' work that is real, the share of the SMs the CTAs occupy and the share of
    HBM's latency its pipeline hides (IN_FLIGHT_BYTES), divided by 2**SPILL_PENALTY per
    doubling of accumulator registers past what a thread holds."""
    bm, bn, bk = int(config["BLOCK_M"]), int(config["BLOCK_N"]), int(config["BLOCK_K"])
    warps, stages = int(config["num_warps"]), int(config["num_stages"])
    m, n = int(dims["m"]), int(dims["n"])
    ctas = math.ceil(m / bm) * math.ceil(n / bn)
    accumulators = math.log2(bm * bn / (32 * warps))  # fp32 accumulators per thread
    spill = max(0.0, accumulators - math.log2(ACCUMULATOR_REGISTERS))
    intensity = math.log2(bm * bn / (bm + bn))
    useful = math.log2(m * n / (math.ceil(m / bm) * bm * math.ceil(n / bn) * bn))
    fill = math.log2(min(1.0, ctas / SM_COUNT))
    tail = ctas / (math.ceil(ctas / SM_COUNT) * SM_COUNT)  # the last wave's share of the SMs
    shared = stages * (bm + bn) * bk * 2  # bf16 A and B tiles per pipeline stage
    hidden = math.log2(min(1.0, shared / IN_FLIGHT_BYTES))
    features = [math.log2(bm * bn), accumulators, spill, intensity, useful, fill, tail, math.log2(shared),
                math.log2(bk), float(stages), math.log2(warps), math.log2(ctas)]
    return Structure(features, intensity + useful + fill + hidden - SPILL_PENALTY * spill)

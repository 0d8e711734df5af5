"""A scripted GPU worker for dashboard tests and benchmarks: it speaks the real HTTP worker
protocol and reports measurements of a synthetic Triton GEMM instead of running one.

The model gives the trade-offs a real tiled GEMM shows on a power-capped card: more warps
and stages run faster but draw more power, so the fastest configurations are not the most
energy-efficient ones, and deeper pipelines take longer to compile.
"""

from __future__ import annotations

import math
import random
from typing import Any

import httpx

SPACE: list[dict[str, Any]] = [
    {"name": "BLOCK_M", "type": "categorical", "choices": [32, 64, 128, 256], "default": 64},
    {"name": "BLOCK_N", "type": "categorical", "choices": [32, 64, 128, 256], "default": 64},
    {"name": "BLOCK_K", "type": "categorical", "choices": [32, 64, 128], "default": 32},
    {"name": "num_warps", "type": "categorical", "choices": [2, 4, 8, 16], "default": 4},
    {"name": "num_stages", "type": "int", "low": 1, "high": 6, "default": 2},
    {"name": "maxrregcount", "type": "int", "low": 64, "high": 255, "default": 128},
    {"name": "opt_level", "type": "categorical", "choices": ["-O1", "-O2", "-O3"], "default": "-O3"},
]
OBJECTIVES = [
    {"name": "runtime_ms", "direction": "minimize"},
    {"name": "energy_mj", "direction": "minimize"},
    {"name": "compile_s", "direction": "minimize"},
]
FINGERPRINT = {
    "hostname": "gpu-node-07", "os": "Linux 6.8.0-49-generic", "python": "3.11.7",
    "cpu_model": "Intel(R) Xeon(R) Platinum 8480+", "cpu_count": 224,
    "gpu_name": "NVIDIA H200", "gpu_count": 1, "driver_version": "580.95.05", "cuda_version": "13.0",
    "compilers": {"ptxas": "13.0.88", "triton": "3.5.0"}, "backends": ["python", "triton"],
    "energy": True, "paretune": "0.1.0",
}


def study_document(name: str, max_trials: int, *, sampler: str = "nsga2", parallelism: int = 4,
                   seed: int = 7) -> dict[str, Any]:
    return {
        "name": name,
        "description": "bf16 GEMM 4096x4096x4096, Triton tiles and ptxas options",
        "kernel": {"backend": "python", "source": "gemm_model:run"},
        "space": SPACE,
        "objectives": OBJECTIVES,
        "sampler": {"name": sampler, "seed": seed},
        "budget": {"max_trials": max_trials},
        "parallelism": parallelism,
    }


def model(config: dict[str, Any], rng: random.Random) -> dict[str, float]:
    """Runtime (ms), power (W), energy (mJ) and compile time (s) of one configuration."""
    bm, bn, bk = int(config["BLOCK_M"]), int(config["BLOCK_N"]), int(config["BLOCK_K"])
    warps, stages = int(config["num_warps"]), int(config["num_stages"])
    regs = int(config["maxrregcount"])
    tile = math.log2(bm * bn / (128 * 128))
    occupancy_penalty = 0.18 * tile**2 + (0.25 if bm * bn * bk > 256 * 256 * 64 else 0.0)
    spill = max(0.0, (bm * bn / (warps * 32)) * 0.9 - regs) / 120
    opt = {"-O1": 0.09, "-O2": 0.02, "-O3": 0.0}[str(config["opt_level"])]
    runtime = 0.62 * (1 + occupancy_penalty) * (1 + 0.5 / stages) * (1 + 0.3 / warps) * (1 + spill + opt)
    runtime *= math.exp(rng.gauss(0, 0.015))
    power = min(700.0, 250 + 45 * math.log2(warps) + 70 * stages + 0.3 * (regs - 64) + rng.gauss(0, 6))
    compile_s = (2.2 + 0.9 * stages + 0.004 * bm * bn / 64 + 0.3 * math.log2(bk / 16)
                 + {"-O1": -0.8, "-O2": -0.3, "-O3": 0.0}[str(config["opt_level"])])
    compile_s *= math.exp(rng.gauss(0, 0.04))
    return {"runtime_ms": runtime, "power_w": power, "energy_mj": runtime * power, "compile_s": compile_s}


def _metric(value: float, unit: str, spread: float, n: int, rng: random.Random) -> dict[str, Any]:
    std = value * spread
    half = 1.96 * std / math.sqrt(n)
    return {
        "value": value, "unit": unit, "ci_low": value - half, "ci_high": value + half, "n": n,
        "stats": {"median": value, "mean": value * (1 + rng.uniform(0, spread / 4)), "std": std,
                  "p99": value * (1 + 2.6 * spread), "min": value * (1 - 2.1 * spread),
                  "max": value * (1 + 3.4 * spread)},
    }


def result_for(trial: dict[str, Any], seed: int | None = None) -> dict[str, Any]:
    """A complete worker result for a leased trial spec."""
    rng = random.Random(seed if seed is not None else trial["trial_id"])
    m = model(trial["config"], rng)
    n = rng.randint(180, 420)
    warps, stages = trial["config"]["num_warps"], trial["config"]["num_stages"]
    regs = min(int(trial["config"]["maxrregcount"]), 40 + 24 * int(stages))
    log = "\n".join([
        f"[compile] triton 3.5.0 -> ptx (num_warps={warps}, num_stages={stages})",
        f"[compile] ptxas {trial['config']['opt_level']} -maxrregcount={trial['config']['maxrregcount']} sm_90a",
        f"ptxas info    : Used {regs} registers, {8 * int(stages)}KB shared memory, 0 bytes spill stores",
        "[check] max |out - ref| = 3.05e-05 (bf16 tolerance 1e-02 rtol / 1e-02 atol): ok",
        f"[measure] hot window 1.00 s, {n} graph replays; SM clock 1755-1980 MHz",
        f"[measure] energy counter delta {m['energy_mj'] * n:.0f} mJ over {n} calls",
    ])
    return {
        "status": "completed",
        "metrics": {
            "runtime_ms": _metric(m["runtime_ms"], "ms", 0.004, n, rng),
            "energy_mj": _metric(m["energy_mj"], "mJ", 0.009, n, rng),
            "power_w": _metric(m["power_w"], "W", 0.012, n, rng),
            "compile_s": _metric(m["compile_s"], "s", 0.02, 3, rng),
        },
        "correctness": {"passed": True, "max_abs_error": 3.05e-05, "max_rel_error": 0.0041,
                        "rtol": 0.01, "atol": 0.01, "reference": "torch.matmul (fp32 accumulate)"},
        "compile_report": {"registers": regs, "shared_memory_bytes": 8192 * int(stages),
                           "spill_stores_bytes": 0, "spill_loads_bytes": 0, "ptxas": "13.0.88",
                           "target": "sm_90a", "binary_bytes": 28_416 + 1024 * int(stages)},
        "environment": {"sm_clock_mhz": rng.choice([1755, 1830, 1905, 1980]), "mem_clock_mhz": 3201,
                        "temperature_c": rng.randint(48, 63), "power_limit_w": 700,
                        "throttle_reasons": [] if m["power_w"] < 690 else ["sw_power_cap"]},
        "timings": {"compile_s": m["compile_s"], "check_s": 0.41 + rng.random() * 0.1,
                    "measure_s": 1.9 + rng.random() * 0.3},
        "log": log,
    }


class GemmWorker:
    """One fake worker agent: registers on creation, then leases and reports trials."""

    def __init__(self, url: str, token: str, *, pool: str = "default", name: str = "gpu-node-07",
                 fingerprint: dict[str, Any] | None = None) -> None:
        """`fingerprint`: what differs from FINGERPRINT (another GPU, another toolchain)."""
        self.client = httpx.Client(base_url=url, timeout=60, headers={"Authorization": f"Bearer {token}"})
        body = {"name": name, "pool": pool, "fingerprint": {**FINGERPRINT, **(fingerprint or {}), "hostname": name}}
        r = self.client.post("/v1/workers/register", json=body)
        r.raise_for_status()
        self.worker_id = int(r.json()["worker_id"])

    def lease(self, wait_s: float = 0.0) -> dict[str, Any] | None:
        r = self.client.post("/v1/leases", json={"worker_id": self.worker_id, "wait_s": wait_s})
        if r.status_code == 204:
            return None
        r.raise_for_status()
        return r.json()  # type: ignore[no-any-return]

    def report(self, lease: dict[str, Any], result: dict[str, Any] | None = None, *,
               next_lease: bool = False) -> dict[str, Any] | None:
        """Post the lease's result; with `next_lease`, the next lease the answer brings (None:
        nothing was queued)."""
        body = result if result is not None else result_for(lease["trial"])
        return self._post_result(lease, body, next_lease)

    def fail(self, lease: dict[str, Any], reason: str = "compile_error", message: str = "", *,
             next_lease: bool = False) -> dict[str, Any] | None:
        body = {"status": "failed", "failure_reason": reason, "message": message,
                "log": f"[compile] ptxas fatal: {message}"}
        return self._post_result(lease, body, next_lease)

    def _post_result(self, lease: dict[str, Any], body: dict[str, Any], next_lease: bool) -> dict[str, Any] | None:
        r = self.client.post(f"/v1/leases/{lease['token']}/result", json={**body, "next_lease": next_lease})
        r.raise_for_status()
        return r.json().get("next_lease") if next_lease else None  # type: ignore[no-any-return]

    def run(self, limit: int | None = None, fail_every: int = 0, next_lease: bool = False) -> int:
        """Lease and report until nothing is queued for a second or `limit` results were
        posted (the wait lets the study's step queue the next trials: a worker faster than
        the step would otherwise stop in the middle of a study). With `next_lease` each
        result asks for the next lease, as the worker agent does: one request per trial."""
        done = 0
        lease = None
        while limit is None or done < limit:
            lease = lease or self.lease(wait_s=1.0)
            if lease is None:
                break
            more = next_lease and (limit is None or done + 1 < limit)
            if fail_every and done % fail_every == fail_every - 1:
                lease = self.fail(lease, message="too many resources requested for launch (shared memory)",
                                  next_lease=more)
            else:
                lease = self.report(lease, next_lease=more)
            done += 1
        return done

    def close(self) -> None:
        self.client.close()

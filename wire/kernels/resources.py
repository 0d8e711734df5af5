"""Whether a configuration can launch on a GPU, computed before anything is compiled.

A built-in GPU kernel declares a resource model: what one thread block of a configuration
uses (shared memory, threads, registers per thread where the source fixes them) for one
workload shape. A configuration whose use is over the device's limits cannot launch: Triton
refuses it when it loads the kernel (OutOfResources), the CUDA driver at launch. Checking
the model first costs nothing, so such a configuration is refused before it takes a compile
or a lease (the service, where it knows the target's limits) and the sampler is told so.

The models are exact for the built-in spaces on the H200 (sm_90): every out-of-resources
failure the H200 recorded is predicted, with the very byte count Triton reported, and every
configuration it ran is predicted feasible (tests/workers/test_resources.py). No I/O here;
the limits of a worker's own GPU are read by workers.measure.gpu_limits.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from wire.contract import DeviceLimits

# Per compute capability, from the CUDA C++ Programming Guide's table of technical
# specifications (maximum shared memory per thread block, opt-in). Every one of them allows
# 1024 threads and 64 K registers per block and 255 registers per thread.
_SHARED_PER_BLOCK = {
    "7.0": 98_304, "7.2": 98_304, "7.5": 65_536,
    "8.0": 166_912, "8.6": 101_376, "8.7": 166_912, "8.9": 101_376,
    "9.0": 232_448,
    "10.0": 232_448, "10.3": 232_448, "12.0": 101_376,
}
KNOWN_LIMITS: dict[str, DeviceLimits] = {
    cc: DeviceLimits(compute_capability=cc, shared_memory_per_block=shared)
    for cc, shared in _SHARED_PER_BLOCK.items()
}


def limits_for(compute_capability: str) -> DeviceLimits | None:
    return KNOWN_LIMITS.get(compute_capability)


@dataclass(frozen=True)
class ResourceUse:
    """What one thread block of a configuration uses; None: the model does not say."""

    shared_bytes: int | None = None
    threads: int | None = None
    registers_per_thread: int | None = None


@dataclass(frozen=True)
class Violation:
    """One limit a configuration is over. `message` reads like Triton's own refusal, so a
    failure's message says the same whichever of them found it."""

    resource: str  # shared memory | threads | registers
    required: int
    limit: int

    @property
    def excess(self) -> float:
        """How far over the limit, as a fraction of it (> 0): the constraint value the
        sampler hears, so that it can tell a near miss from a far one."""
        return self.required / self.limit - 1.0

    @property
    def message(self) -> str:
        return f"out of resource: {self.resource}, Required: {self.required}, Hardware limit: {self.limit}"

    def as_dict(self) -> dict[str, Any]:
        return {"resource": self.resource, "required": self.required, "limit": self.limit,
                "excess": round(self.excess, 6)}


ResourceModel = Callable[[dict[str, Any], dict[str, int]], ResourceUse]


def violations(use: ResourceUse, limits: DeviceLimits) -> list[Violation]:
    found = []
    if use.shared_bytes is not None and use.shared_bytes > limits.shared_memory_per_block:
        found.append(Violation("shared memory", use.shared_bytes, limits.shared_memory_per_block))
    if use.threads is not None and use.threads > limits.threads_per_block:
        found.append(Violation("threads", use.threads, limits.threads_per_block))
    if use.threads is not None and use.registers_per_thread is not None:
        per_thread = min(use.registers_per_thread, limits.registers_per_thread)
        if per_thread * use.threads > limits.registers_per_block:
            found.append(Violation("registers", per_thread * use.threads, limits.registers_per_block))
    return found


def check(model: ResourceModel, config: dict[str, Any], shapes: Iterable[dict[str, int]],
          limits: DeviceLimits) -> list[Violation]:
    """The limits `config` is over on any of the workload's shapes (each resource once, at
    its largest requirement)."""
    worst: dict[str, Violation] = {}
    for dims in shapes:
        for violation in violations(model(config, dims), limits):
            if violation.resource not in worst or violation.required > worst[violation.resource].required:
                worst[violation.resource] = violation
    return list(worst.values())


def describe(found: list[Violation], limits: DeviceLimits) -> str:
    """A failure message naming every limit the configuration is over, and the target."""
    target = f"sm_{limits.compute_capability.replace('.', '')}" if limits.compute_capability else "the target"
    return f"cannot launch on {target}: " + "; ".join(v.message for v in found)


_REFUSAL = re.compile(r"out of resource: ([a-z ]+), Required: (\d+), Hardware limit: (\d+)")


def parse_refusals(message: str) -> list[Violation]:
    """The violations a refusal message names (Triton's OutOfResources text, or describe()'s)."""
    return [Violation(m.group(1), int(m.group(2)), int(m.group(3))) for m in _REFUSAL.finditer(message or "")
            if int(m.group(3)) > 0]


# --- the built-ins' models ------------------------------------------------------------------

BF16_BYTES = 2


def _stages(config: dict[str, Any]) -> int:
    return max(1, int(config.get("num_stages", 1)))


def triton_threads(config: dict[str, Any]) -> int:
    return int(config.get("num_warps", 4)) * 32


def gemm_bf16(config: dict[str, Any], dims: dict[str, int]) -> ResourceUse:
    """Triton's software pipeline keeps `num_stages` copies of the A and B tiles in shared
    memory (the epilogue reuses them)."""
    m, n, k = int(config["BLOCK_M"]), int(config["BLOCK_N"]), int(config["BLOCK_K"])
    return ResourceUse(shared_bytes=_stages(config) * (m * k + k * n) * BF16_BYTES, threads=triton_threads(config))


def attention_fwd(config: dict[str, Any], dims: dict[str, int]) -> ResourceUse:
    """The Q tile stays in shared memory; K and V tiles stream through `num_stages` buffers
    each, or one buffer at a time without pipelining (num_stages 1)."""
    head_dim = int(dims["head_dim"])
    m, n, stages = int(config["BLOCK_M"]), int(config["BLOCK_N"]), _stages(config)
    streamed = n * head_dim if stages == 1 else 2 * stages * n * head_dim
    return ResourceUse(shared_bytes=(m * head_dim + streamed) * BF16_BYTES, threads=triton_threads(config))


def rmsnorm(config: dict[str, Any], dims: dict[str, int]) -> ResourceUse:
    """One float of shared memory per warp for the reduction. `__launch_bounds__(THREADS)`
    makes the compiler fit the registers to the block (it overrides max_register_count), so
    registers never keep it from launching."""
    threads = int(config["THREADS"])
    return ResourceUse(shared_bytes=threads // 32 * 4, threads=threads)

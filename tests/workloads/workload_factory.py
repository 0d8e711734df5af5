"""A small trace written in each format, and signed artifacts measured at M buckets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from artifacts.artifact_factory import H200, make_document
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from wire.artifact import sign
from wire.contract import KernelSpec, Target, WorkloadShape

# (arrival s, prompt tokens, output tokens): the trace of test_batching_simulation's hand computation
SMALL_TRACE = [(0, 5, 3), (0, 6, 2), (1, 2, 1)]


def write_trace(directory: Path, trace_format: str, requests: list[tuple[float, int, int]]) -> Path:
    """The requests as a file of the format, as the public traces lay it out."""
    if trace_format == "azure":
        path = directory / "trace.csv"
        rows = [f"2023-11-16 18:17:{3 + t:02d}.0000000,{p},{o}" for t, p, o in requests]
        path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")
    elif trace_format == "mooncake":
        path = directory / "trace.jsonl"
        path.write_text("".join(json.dumps({"timestamp": int(t * 1000), "input_length": p, "output_length": o,
                                            "hash_ids": list(range(p // 512 + 1))}) + "\n" for t, p, o in requests))
    else:
        path = directory / "BurstGPT.csv"
        rows = [f"{t},{'ChatGPT' if i % 2 else 'GPT-4'},{p},{o},{p + o},Conversation log"
                for i, (t, p, o) in enumerate(requests)]
        header = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        path.write_text(header + "\n".join(rows) + "\n")
    return path


MOE_KERNEL = KernelSpec(backend="triton", source="# the fused MoE kernel as tuned\n", entry="fused_moe_kernel")


def moe_config(block_m: int, warps: int = 4) -> dict[str, Any]:
    return {"BLOCK_SIZE_M": block_m, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8,
            "num_warps": warps, "num_stages": 3}


def signed_artifact(key: Ed25519PrivateKey, config: dict[str, Any], ms: list[int], *, version: int = 1,
                    target: Target = H200, name: str = "fused_moe", kernel: KernelSpec = MOE_KERNEL,
                    dims: dict[str, int] | None = None) -> bytes:
    """A signed artifact of `config`, measured at m in `ms` (other dims `dims`)."""
    doc = make_document(kernel=kernel, config=config, target=target, version=version, name=name)
    workload = [WorkloadShape(dims={"m": m, **(dims or {"n": 7168, "k": 4096})}) for m in ms]
    return sign(doc.model_copy(update={"workload": workload}), key).file_bytes()

"""Fused attention forward (softmax(Q K^T * scale) V) in Triton, bf16 in and out, with its
harness.

One program per BLOCK_M query rows of one (batch, head); keys and values stream through in
BLOCK_N blocks with the online softmax (running max and sum in float32, exp2 with the
log2(e) factor folded into the scale). Causal masking is a compile-time switch taken from the
workload (`causal` dim, 0 or 1). Tensors are contiguous [batch, heads, seq, head_dim].
"""

import math

import triton
import triton.language as tl

DTYPE = "bfloat16"
LOG2E = 1.4426950408889634


@triton.jit
def attention_fwd(
    Q,
    K,
    V,
    Out,
    qk_scale,
    seq_len,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
):
    block_m = tl.program_id(0)
    head = tl.program_id(1).to(tl.int64)
    base = head * seq_len * HEAD_DIM
    rows = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols0 = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, HEAD_DIM)
    row_ok = rows[:, None] < seq_len

    q = tl.load(Q + base + rows[:, None] * HEAD_DIM + dims[None, :], mask=row_ok, other=0.0)
    running_max = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    running_sum = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)

    if CAUSAL:  # noqa: SIM108 (a constexpr branch, kept as a statement for Triton)
        end = tl.minimum((block_m + 1) * BLOCK_M, seq_len)
    else:
        end = seq_len
    for start in range(0, end, BLOCK_N):
        cols = start + cols0
        col_ok = cols < seq_len
        k = tl.load(
            K + base + cols[None, :] * HEAD_DIM + dims[:, None], mask=col_ok[None, :], other=0.0
        )
        scores = tl.dot(q, k) * qk_scale
        keep = col_ok[None, :]
        if CAUSAL:
            keep = keep & (rows[:, None] >= cols[None, :])
        scores = tl.where(keep, scores, float("-inf"))
        new_max = tl.maximum(running_max, tl.max(scores, 1))
        p = tl.math.exp2(scores - new_max[:, None])
        correction = tl.math.exp2(running_max - new_max)
        running_sum = running_sum * correction + tl.sum(p, 1)
        acc = acc * correction[:, None]
        v = tl.load(
            V + base + cols[:, None] * HEAD_DIM + dims[None, :], mask=col_ok[:, None], other=0.0
        )
        acc = tl.dot(p.to(v.dtype), v, acc)
        running_max = new_max

    acc = acc / running_sum[:, None]
    tl.store(
        Out + base + rows[:, None] * HEAD_DIM + dims[None, :],
        acc.to(Out.dtype.element_ty),
        mask=row_ok,
    )


def _shape(dims):
    return (dims["batch"], dims["heads"], dims["seq"], dims["head_dim"])


def make_inputs(dims, device, generator=None):
    import torch

    shape = _shape(dims)
    q, k, v = (
        torch.randn(shape, device=device, dtype=torch.bfloat16, generator=generator)
        for _ in range(3)
    )
    return {"q": q, "k": k, "v": v, "out": torch.empty(shape, device=device, dtype=torch.bfloat16)}


def _scale(dims):
    return 1.0 / math.sqrt(dims["head_dim"]) * LOG2E


def arguments(inputs, dims):
    return (inputs["q"], inputs["k"], inputs["v"], inputs["out"], _scale(dims), dims["seq"])


def compile_arguments(dims):
    """The runtime arguments' types (pointers) and values, for compile-only trials."""
    return ["*bf16", "*bf16", "*bf16", "*bf16", _scale(dims), dims["seq"]]


def constants(dims):
    return {"HEAD_DIM": dims["head_dim"], "CAUSAL": bool(dims.get("causal", 0))}


def grid(dims, meta):
    return (triton.cdiv(dims["seq"], meta["BLOCK_M"]), dims["batch"] * dims["heads"])


def output(inputs):
    return inputs["out"]


def reference(inputs, dims):
    import torch

    q, k, v = (inputs[n].float() for n in ("q", "k", "v"))
    return torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=bool(dims.get("causal", 0))
    )


def work(dims):
    b, h, s, d = _shape(dims)
    flops = 4.0 * b * h * s * s * d
    if dims.get("causal", 0):
        flops /= 2
    return {"flops": flops, "bytes": 2.0 * 4 * b * h * s * d}

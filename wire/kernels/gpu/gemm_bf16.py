"""bf16 GEMM C = A @ B in Triton (float32 accumulation), with its harness.

Tiles of BLOCK_M x BLOCK_N, a K loop of BLOCK_K, and GROUP_M rows of tiles scheduled
together so that neighbouring programs share A and B tiles in L2. The meta-parameters and
Triton's num_warps / num_stages are the search space.
"""

import triton
import triton.language as tl

DTYPE = "bfloat16"


@triton.jit
def matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    tiles_in_group = GROUP_M * tiles_n
    group = pid // tiles_in_group
    first_m = group * GROUP_M
    group_rows = min(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % tiles_in_group) % group_rows
    pid_n = (pid % tiles_in_group) // group_rows

    rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    cols = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    rows = tl.max_contiguous(tl.multiple_of(rows, BLOCK_M), BLOCK_M)
    cols = tl.max_contiguous(tl.multiple_of(cols, BLOCK_N), BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    a_tile = a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak
    b_tile = b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - step * BLOCK_K
        a = tl.load(a_tile, mask=ks[None, :] < k_left, other=0.0)
        b = tl.load(b_tile, mask=ks[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc)
        a_tile += BLOCK_K * stride_ak
        b_tile += BLOCK_K * stride_bk

    out_rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    out_cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_tile = c_ptr + out_rows[:, None] * stride_cm + out_cols[None, :] * stride_cn
    mask = (out_rows[:, None] < M) & (out_cols[None, :] < N)
    tl.store(c_tile, acc.to(tl.bfloat16), mask=mask)


def make_inputs(dims, device, generator=None):
    import torch

    m, n, k = dims["m"], dims["n"], dims["k"]
    a = torch.randn((m, k), device=device, dtype=torch.bfloat16, generator=generator)
    b = torch.randn((k, n), device=device, dtype=torch.bfloat16, generator=generator)
    c = torch.empty((m, n), device=device, dtype=torch.bfloat16)
    return {"a": a, "b": b, "c": c}


def arguments(inputs, dims):
    a, b, c = inputs["a"], inputs["b"], inputs["c"]
    return (
        a,
        b,
        c,
        dims["m"],
        dims["n"],
        dims["k"],
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        c.stride(0),
        c.stride(1),
    )


def compile_arguments(dims):
    """The runtime arguments' types (pointers) and values, for compile-only trials: the
    contiguous row-major tensors `make_inputs` makes."""
    m, n, k = dims["m"], dims["n"], dims["k"]
    return ["*bf16", "*bf16", "*bf16", m, n, k, k, 1, n, 1, n, 1]


def grid(dims, meta):
    return (triton.cdiv(dims["m"], meta["BLOCK_M"]) * triton.cdiv(dims["n"], meta["BLOCK_N"]),)


def output(inputs):
    return inputs["c"]


def reference(inputs, dims):
    import torch

    # float32 products without TF32: the reference must be more precise than the kernel.
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return inputs["a"].float() @ inputs["b"].float()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous


def work(dims):
    m, n, k = dims["m"], dims["n"], dims["k"]
    return {"flops": 2.0 * m * n * k, "bytes": 2.0 * (m * k + k * n + m * n)}

"""Harnesses of Liger-Kernel's RMSNorm and SwiGLU forward kernels (liger-kernel 0.8.5, pure
Triton) for studies of them given by `module:` (docs/workloads.md#third-party-kernels), and
the study documents that name them (rms_norm.yaml, swiglu.yaml). bench/gpu/liger.py runs both
on a GPU through the service and a worker.

Liger launches each kernel one program per row with `calculate_settings(n_cols)`:
BLOCK_SIZE = n_cols rounded up to a power of two and 4, 8, 16 or 32 warps as that block
reaches 2048, 8192 and 32768 (`liger_kernel.ops.utils`). `liger_settings` is that rule, for
the documents' baselines; the GPU run checks it against Liger's own function.
"""

MAX_FUSED_SIZE = 65536


def liger_settings(n_cols: int) -> tuple[int, int]:
    """Liger-Kernel 0.8.5's calculate_settings(n_cols) on an NVIDIA GPU: (BLOCK_SIZE, num_warps)."""
    block = 1 << max(0, n_cols - 1).bit_length()
    if block > MAX_FUSED_SIZE:
        raise ValueError(f"n = {n_cols} is over Liger's largest fused block, {MAX_FUSED_SIZE}")
    if block >= 32768:
        return block, 32
    if block >= 8192:
        return block, 16
    if block >= 2048:
        return block, 8
    return block, 4

"""Built-in GPU kernels: a bf16 GEMM and a fused attention forward in Triton, and RMSNorm in
CUDA C++ through cuda.core. Importing this module needs neither torch nor a GPU; the
backends import the kernels' harnesses when they run them."""

from __future__ import annotations

from wire.kernels import BuiltinKernel, register, resources, structure
from wire.space import BoolParam, CategoricalParam, Parameter

GEMM_SPACE: list[Parameter] = [
    CategoricalParam(name="BLOCK_M", type="categorical", choices=[64, 128, 256]),
    CategoricalParam(name="BLOCK_N", type="categorical", choices=[64, 128, 256]),
    CategoricalParam(name="BLOCK_K", type="categorical", choices=[32, 64, 128]),
    CategoricalParam(name="num_warps", type="categorical", choices=[4, 8]),
    CategoricalParam(name="num_stages", type="categorical", choices=[2, 3, 4, 5, 6]),
]

register(
    BuiltinKernel(
        name="gemm_bf16",
        backend="triton",
        source_file="gpu/gemm_bf16.py",
        entry="matmul_kernel",
        default_config={
            "BLOCK_M": 128,
            "BLOCK_N": 128,
            "BLOCK_K": 32,
            "num_warps": 4,
            "num_stages": 3,
        },
        space=GEMM_SPACE,
        workload=[{"dims": {"m": 4096, "n": 4096, "k": 4096}, "weight": 1.0}],
        description=(
            "bf16 GEMM C = A @ B with float32 accumulation (Triton). Tile shape, K step, "
            "warps and software-pipelining depth are the space (270 points, small enough "
            "to sweep exhaustively); GROUP_M is fixed at 8."
        ),
        options={"constants": {"GROUP_M": 8}},
        resources=resources.gemm_bf16,
        structure=structure.gemm_bf16,
    )
)

register(
    BuiltinKernel(
        name="attention_fwd",
        backend="triton",
        source_file="gpu/attention_fwd.py",
        entry="attention_fwd",
        default_config={
            "BLOCK_M": 64,
            "BLOCK_N": 64,
            "num_warps": 4,
            "num_stages": 2,
            "enable_fp_fusion": True,
        },
        space=[
            CategoricalParam(name="BLOCK_M", type="categorical", choices=[64, 128]),
            CategoricalParam(name="BLOCK_N", type="categorical", choices=[32, 64, 128]),
            CategoricalParam(name="num_warps", type="categorical", choices=[4, 8]),
            CategoricalParam(name="num_stages", type="categorical", choices=[1, 2, 3, 4]),
            BoolParam(name="enable_fp_fusion", type="bool"),
        ],
        workload=[
            {
                "dims": {"batch": 4, "heads": 16, "seq": 2048, "head_dim": 128, "causal": 1},
                "weight": 0.7,
            },
            {
                "dims": {"batch": 1, "heads": 16, "seq": 8192, "head_dim": 128, "causal": 1},
                "weight": 0.3,
            },
        ],
        description=(
            "Causal fused attention forward, bf16, online softmax (Triton). The workload "
            "mixes 2k-token batches with 8k-token single prompts."
        ),
        shape_rules={"head_dim": "fixed", "causal": "fixed"},  # head_dim: a tl.arange extent
        resources=resources.attention_fwd,
    )
)

register(
    BuiltinKernel(
        name="rmsnorm",
        backend="cuda",
        source_file="gpu/rmsnorm.cu",
        entry="rmsnorm",
        default_config={
            "THREADS": 256,
            "ROWS_PER_CTA": 1,
            "VEC": 2,
            "CACHE_ROW": 0,
            "use_fast_math": False,
            "extra_device_vectorization": False,
            "max_register_count": 0,
        },
        space=[
            CategoricalParam(name="THREADS", type="categorical", choices=[128, 256, 512, 1024]),
            CategoricalParam(name="ROWS_PER_CTA", type="categorical", choices=[1, 2, 4]),
            CategoricalParam(name="VEC", type="categorical", choices=[2, 4, 8]),
            CategoricalParam(name="CACHE_ROW", type="categorical", choices=[0, 1]),
            BoolParam(name="use_fast_math", type="bool"),
            BoolParam(name="extra_device_vectorization", type="bool"),
            CategoricalParam(name="max_register_count", type="categorical", choices=[0, 32, 64, 128]),
        ],
        workload=[{"dims": {"rows": 16384, "cols": 8192}, "weight": 1.0}],
        description=(
            "RMSNorm over bf16 rows (CUDA C++ through cuda.core/NVRTC): memory-bound. Block "
            "size, rows per block, vector width and register caching are macros; fast math, "
            "vectorisation and the register cap are NVRTC options."
        ),
        options={"harness": "wire.kernels.gpu.rmsnorm"},
        shape_rules={"cols": "multiple_of:8"},  # 16-byte vectors of bf16
        resources=resources.rmsnorm,
    )
)

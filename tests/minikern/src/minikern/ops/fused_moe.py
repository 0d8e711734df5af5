"""The fused MoE's expert GEMM as a tiled C = A @ B (M tokens, N, K), with the tile names of
vLLM's fused_moe_kernel: BLOCK_SIZE_M/N/K tiles, GROUP_SIZE_M rows of tiles walked together,
NUM_WARPS and NUM_STAGES as its unroll and prefetch depth."""

from minikern.ops.utils import CKernel

_SOURCE = r"""
#ifndef BLOCK_SIZE_M
#define BLOCK_SIZE_M 16
#endif
#ifndef BLOCK_SIZE_N
#define BLOCK_SIZE_N 64
#endif
#ifndef BLOCK_SIZE_K
#define BLOCK_SIZE_K 64
#endif
#ifndef GROUP_SIZE_M
#define GROUP_SIZE_M 1
#endif
#ifndef NUM_WARPS
#define NUM_WARPS 4
#endif
#ifndef NUM_STAGES
#define NUM_STAGES 2
#endif
#define MIN(a, b) ((a) < (b) ? (a) : (b))

void fused_moe(int M, int N, int K, const float *A, const float *B, float *C) {
    for (long i = 0; i < (long)M * N; i++) C[i] = 0.0f;
    int group_rows = GROUP_SIZE_M * BLOCK_SIZE_M;
    for (int g = 0; g < M; g += group_rows)
        for (int j0 = 0; j0 < N; j0 += BLOCK_SIZE_N)
            for (int i0 = g; i0 < MIN(g + group_rows, M); i0 += BLOCK_SIZE_M)
                for (int k0 = 0; k0 < K; k0 += BLOCK_SIZE_K)
                    for (int i = i0; i < MIN(i0 + BLOCK_SIZE_M, M); i++)
                        for (int k = k0; k < MIN(k0 + BLOCK_SIZE_K, K); k++) {
                            float a = A[(long)i * K + k];
                            const float *b = B + (long)k * N;
                            float *c = C + (long)i * N;
                            int j = j0, end = MIN(j0 + BLOCK_SIZE_N, N);
                            for (; j + NUM_WARPS <= end; j += NUM_WARPS)
                                for (int u = 0; u < NUM_WARPS; u++) c[j + u] += a * b[j + u];
                            for (; j < end; j++) c[j] += a * b[j];
                        }
}
"""

fused_moe_kernel = CKernel(_SOURCE, "fused_moe")

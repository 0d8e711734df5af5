/* Tiled single-precision matrix multiply: C (M x N) = A (M x K) * B (K x N), row-major.
 *
 * ABI of the "matmul" problem of the cpu backend:
 *   void matmul(int M, int N, int K, const float *A, const float *B, float *C);
 * C is overwritten. The tile sizes are compile-time macros so the compiler can unroll and
 * vectorise the inner loops for one fixed shape of tile; the tuner sets them with -D.
 */
#ifndef TILE_M
#define TILE_M 16
#endif
#ifndef TILE_N
#define TILE_N 64
#endif
#ifndef TILE_K
#define TILE_K 64
#endif

static inline int min_int(int a, int b) { return a < b ? a : b; }

void matmul(int M, int N, int K, const float *restrict A, const float *restrict B,
            float *restrict C)
{
    for (int i = 0; i < M * N; i++)
        C[i] = 0.0f;

    for (int i0 = 0; i0 < M; i0 += TILE_M) {
        const int i1 = min_int(i0 + TILE_M, M);
        for (int k0 = 0; k0 < K; k0 += TILE_K) {
            const int k1 = min_int(k0 + TILE_K, K);
            for (int j0 = 0; j0 < N; j0 += TILE_N) {
                const int j1 = min_int(j0 + TILE_N, N);
                for (int i = i0; i < i1; i++) {
                    float *restrict c_row = C + (long)i * N;
                    for (int k = k0; k < k1; k++) {
                        const float a = A[(long)i * K + k];
                        const float *restrict b_row = B + (long)k * N;
                        for (int j = j0; j < j1; j++)
                            c_row[j] += a * b_row[j];
                    }
                }
            }
        }
    }
}

/* Tiled 2-D five-point Jacobi stencil, single precision, row-major N x M grid.
 *
 * ABI of the "stencil" problem of the cpu backend:
 *   void stencil(int N, int M, int steps, const float *in, float *out, float *scratch);
 * One sweep computes, for every interior cell,
 *   next[i][j] = 0.5 * cur[i][j] + 0.125 * (cur[i-1][j] + cur[i+1][j] + cur[i][j-1] + cur[i][j+1])
 * and copies the boundary unchanged. After `steps` sweeps of `in`, the grid is in `out`;
 * `scratch` is an N x M buffer the kernel may use. `in` is never written.
 */
#include <string.h>

#ifndef TILE_I
#define TILE_I 32
#endif
#ifndef TILE_J
#define TILE_J 256
#endif

static inline int min_int(int a, int b) { return a < b ? a : b; }

static void sweep(int N, int M, const float *restrict cur, float *restrict next)
{
    memcpy(next, cur, sizeof(float) * (size_t)M);
    memcpy(next + (long)(N - 1) * M, cur + (long)(N - 1) * M, sizeof(float) * (size_t)M);
    for (int i = 1; i < N - 1; i++) {
        next[(long)i * M] = cur[(long)i * M];
        next[(long)i * M + M - 1] = cur[(long)i * M + M - 1];
    }
    for (int i0 = 1; i0 < N - 1; i0 += TILE_I) {
        const int i1 = min_int(i0 + TILE_I, N - 1);
        for (int j0 = 1; j0 < M - 1; j0 += TILE_J) {
            const int j1 = min_int(j0 + TILE_J, M - 1);
            for (int i = i0; i < i1; i++) {
                const float *restrict up = cur + (long)(i - 1) * M;
                const float *restrict row = cur + (long)i * M;
                const float *restrict down = cur + (long)(i + 1) * M;
                float *restrict dst = next + (long)i * M;
                for (int j = j0; j < j1; j++)
                    dst[j] = 0.5f * row[j] + 0.125f * (up[j] + down[j] + row[j - 1] + row[j + 1]);
            }
        }
    }
}

void stencil(int N, int M, int steps, const float *restrict in, float *restrict out,
             float *restrict scratch)
{
    if (steps <= 0) {
        memcpy(out, in, sizeof(float) * (size_t)N * M);
        return;
    }
    /* Ping-pong between out and scratch so that the last sweep lands in out. */
    float *dst = (steps % 2 == 1) ? out : scratch;
    float *other = (dst == out) ? scratch : out;
    const float *src = in;
    for (int s = 0; s < steps; s++) {
        sweep(N, M, src, dst);
        src = dst;
        float *t = dst;
        dst = other;
        other = t;
    }
}

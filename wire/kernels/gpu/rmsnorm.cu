// RMSNorm over the rows of a bf16 matrix: y = x / sqrt(mean(x^2) + eps) * w.
//
// Memory-bound: one read of x and one write of y. Compile-time parameters (macros):
//   COLS          row length (from the workload shape)
//   THREADS       threads per block
//   ROWS_PER_CTA  rows one block normalises at once (THREADS / ROWS_PER_CTA threads a row)
//   VEC           bf16 elements per vector load (2, 4 or 8: 4, 8 or 16 bytes)
//   CACHE_ROW     1: keep the row in registers between the two passes; 0: read it again
// bf16 is handled as raw 16-bit words so the kernel needs no headers.

#ifndef THREADS
#define THREADS 256
#endif
#ifndef ROWS_PER_CTA
#define ROWS_PER_CTA 1
#endif
#ifndef VEC
#define VEC 8
#endif
#ifndef CACHE_ROW
#define CACHE_ROW 1
#endif

#define THREADS_PER_ROW (THREADS / ROWS_PER_CTA)
#define WARPS_PER_ROW (THREADS_PER_ROW / 32)
#define VECS_PER_ROW (COLS / VEC)
#define ITEMS ((VECS_PER_ROW + THREADS_PER_ROW - 1) / THREADS_PER_ROW)

typedef unsigned short bf16_t;

template <int N>
struct __align__(2 * N) Pack {
    bf16_t v[N];
};
typedef Pack<VEC> Vec;

__device__ __forceinline__ float to_float(bf16_t h) {
    return __uint_as_float(((unsigned int)h) << 16);
}

__device__ __forceinline__ bf16_t to_bf16(float f) {
    unsigned int u = __float_as_uint(f);
    u += 0x7FFFu + ((u >> 16) & 1u);  // round to nearest even; inputs are finite
    return (bf16_t)(u >> 16);
}

extern "C" __global__ void __launch_bounds__(THREADS)
rmsnorm(const bf16_t* __restrict__ x, const bf16_t* __restrict__ w, bf16_t* __restrict__ y,
        int rows, float eps) {
    const int group = threadIdx.x / THREADS_PER_ROW;
    const int lane = threadIdx.x % THREADS_PER_ROW;
    const long long row = (long long)blockIdx.x * ROWS_PER_CTA + group;
    const bool active = row < rows;
    const Vec* xr = reinterpret_cast<const Vec*>(x + row * COLS);
    const Vec* wr = reinterpret_cast<const Vec*>(w);
    Vec* yr = reinterpret_cast<Vec*>(y + row * COLS);

    float sumsq = 0.f;
#if CACHE_ROW
    Vec cache[ITEMS];
#endif
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const int idx = lane + i * THREADS_PER_ROW;
        if (active && idx < VECS_PER_ROW) {
            Vec xv = xr[idx];
#if CACHE_ROW
            cache[i] = xv;
#endif
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                const float f = to_float(xv.v[j]);
                sumsq += f * f;
            }
        }
    }

#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        sumsq += __shfl_xor_sync(0xffffffffu, sumsq, offset);
    }
    __shared__ float partial[THREADS / 32];
    if ((threadIdx.x & 31) == 0) {
        partial[threadIdx.x >> 5] = sumsq;
    }
    __syncthreads();
    float total = 0.f;
#pragma unroll
    for (int i = 0; i < WARPS_PER_ROW; ++i) {
        total += partial[group * WARPS_PER_ROW + i];
    }
    const float inv_rms = 1.0f / sqrtf(total / (float)COLS + eps);

#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const int idx = lane + i * THREADS_PER_ROW;
        if (active && idx < VECS_PER_ROW) {
#if CACHE_ROW
            const Vec xv = cache[i];
#else
            const Vec xv = xr[idx];
#endif
            const Vec wv = wr[idx];
            Vec out;
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                out.v[j] = to_bf16(to_float(xv.v[j]) * inv_rms * to_float(wv.v[j]));
            }
            yr[idx] = out;
        }
    }
}

"""RMSNorm forward: y = x / sqrt(mean(x^2) + eps) * w, row by row. BLOCK_SIZE columns are
summed per pass, in NUM_WARPS interleaved partial sums."""

from minikern.ops.utils import CKernel

_SOURCE = r"""
#include <math.h>
#ifndef BLOCK_SIZE
#define BLOCK_SIZE 1024
#endif
#ifndef NUM_WARPS
#define NUM_WARPS 4
#endif

void rms_norm_forward(int rows, int cols, const float *x, const float *w, float *y, float eps) {
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (long)r * cols;
        float *yr = y + (long)r * cols;
        float partial[NUM_WARPS] = {0};
        for (int start = 0; start < cols; start += BLOCK_SIZE) {
            int end = start + BLOCK_SIZE < cols ? start + BLOCK_SIZE : cols;
            for (int c = start; c < end; c++) partial[c % NUM_WARPS] += xr[c] * xr[c];
        }
        float sum = 0.0f;
        for (int i = 0; i < NUM_WARPS; i++) sum += partial[i];
        float rstd = 1.0f / sqrtf(sum / cols + eps);
        for (int c = 0; c < cols; c++) yr[c] = xr[c] * rstd * w[c];
    }
}
"""

_rms_norm_forward_kernel = CKernel(_SOURCE, "rms_norm_forward")

# the weight left out: a kernel the correctness check must refuse
_rms_norm_unweighted_kernel = CKernel(_SOURCE.replace("* rstd * w[c]", "* rstd"), "rms_norm_forward")

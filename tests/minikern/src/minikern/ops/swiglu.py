"""SwiGLU forward: c = silu(a) * b elementwise, BLOCK_SIZE columns of a row at a time."""

from minikern.ops.utils import CKernel

_SOURCE = r"""
#include <math.h>
#ifndef BLOCK_SIZE
#define BLOCK_SIZE 1024
#endif
#ifndef NUM_WARPS
#define NUM_WARPS 4
#endif

void swiglu_forward(int rows, int cols, const float *a, const float *b, float *c) {
    for (int r = 0; r < rows; r++) {
        long base = (long)r * cols;
        for (int start = 0; start < cols; start += BLOCK_SIZE) {
            int end = start + BLOCK_SIZE < cols ? start + BLOCK_SIZE : cols;
            for (int j = start; j < end; j++) {
                float g = a[base + j];
                c[base + j] = g / (1.0f + expf(-g)) * b[base + j];
            }
        }
    }
}
"""

_swiglu_forward_kernel = CKernel(_SOURCE, "swiglu_forward")

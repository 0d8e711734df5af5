"""Harness of the RMSNorm CUDA C++ kernel (rmsnorm.cu): inputs, reference, launch layout."""

import numpy as np
import torch

DTYPE = "bfloat16"
EPS = 1e-6


def macros(dims, config):
    cols = dims["cols"]
    if cols % 8:
        raise ValueError(f"cols={cols} must be a multiple of 8 (16-byte vectors)")
    return {"COLS": cols}


def make_inputs(dims, device, generator=None):
    rows, cols = dims["rows"], dims["cols"]
    x = torch.randn((rows, cols), device=device, dtype=torch.bfloat16, generator=generator)
    w = (1.0 + 0.1 * torch.randn((cols,), device=device, generator=generator)).to(torch.bfloat16)
    y = torch.empty((rows, cols), device=device, dtype=torch.bfloat16)
    return {"x": x, "w": w, "y": y}


def arguments(inputs, dims, config):
    return [
        inputs["x"].data_ptr(),
        inputs["w"].data_ptr(),
        inputs["y"].data_ptr(),
        np.int32(dims["rows"]),
        np.float32(EPS),
    ]


def launch_geometry(dims, config):
    rows_per_cta = int(config.get("ROWS_PER_CTA", 1))
    threads = int(config.get("THREADS", 256))
    if threads // rows_per_cta < 32:
        raise ValueError("THREADS / ROWS_PER_CTA must be at least one warp")
    return ((dims["rows"] + rows_per_cta - 1) // rows_per_cta,), (threads,), 0


def output(inputs):
    return inputs["y"]


def reference(inputs, dims):
    x = inputs["x"].double()
    inv = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + EPS)
    return x * inv * inputs["w"].double()


def work(dims):
    elements = dims["rows"] * dims["cols"]
    return {"flops": 4.0 * elements, "bytes": 2.0 * (2 * elements + dims["cols"])}

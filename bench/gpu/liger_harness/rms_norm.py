"""Harness of Liger-Kernel's RMSNorm forward, `liger_kernel.ops.rms_norm:_rms_norm_forward_kernel`,
as Liger launches it for a Llama model (casting mode "llama", a weight, offset 0): one program
per row (`grid`), y = x * rstd (rstd in fp32, the product cast back to bf16) * w, and the
row's rstd stored beside it. Dims: rows (a forward step's tokens), cols (the hidden size).

The kernel holds a whole row in one block, so BLOCK_SIZE must be at least cols: the study's
space starts at Liger's own choice.
"""

DTYPE = "bfloat16"
EPS = 1e-6
OFFSET = 0.0
CASTING_MODE_LLAMA = 0  # liger_kernel.ops.rms_norm._CASTING_MODE_LLAMA


def constants(dims):
    return {"casting_mode": CASTING_MODE_LLAMA, "elementwise_affine": True}


def make_inputs(dims, device, generator=None):
    import torch

    rows, cols = dims["rows"], dims["cols"]
    x = torch.randn((rows, cols), device=device, dtype=torch.bfloat16, generator=generator)
    w = (1.0 + 0.1 * torch.randn((cols,), device=device, generator=generator)).to(torch.bfloat16)
    y = torch.empty((rows, cols), device=device, dtype=torch.bfloat16)
    rstd = torch.empty((rows,), device=device, dtype=torch.float32)
    return {"x": x, "w": w, "y": y, "rstd": rstd}


def arguments(inputs, dims):
    """_rms_norm_forward_kernel's runtime arguments, in order (Y, its row stride, X, W, RSTD,
    n_cols, eps, offset)."""
    x, w, y, rstd = inputs["x"], inputs["w"], inputs["y"], inputs["rstd"]
    return [y, y.stride(0), x, x.stride(0), w, w.stride(0), rstd, rstd.stride(0), dims["cols"], EPS, OFFSET]


def grid(dims, meta):
    return (dims["rows"],)


def output(inputs):
    return inputs["y"]


def reference(inputs, dims):
    x = inputs["x"].double()
    rstd = 1.0 / (x.pow(2).mean(dim=-1, keepdim=True) + EPS).sqrt()
    return x * rstd * (OFFSET + inputs["w"].double())


def work(dims):
    elements = dims["rows"] * dims["cols"]
    return {"flops": 4.0 * elements, "bytes": 2.0 * (2 * elements + dims["cols"]) + 4.0 * dims["rows"]}

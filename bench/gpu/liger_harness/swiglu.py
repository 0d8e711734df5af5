"""Harness of Liger-Kernel's SwiGLU forward, `liger_kernel.ops.swiglu:_swiglu_forward_kernel`,
as Liger launches it outside Blackwell: one program per row (`grid`), c = silu(a) * b with
silu in fp32 and cast back to bf16 before the product, gate multiplier 1. Dims: rows (a
forward step's tokens), cols (the intermediate size per GPU). `n_cols` is a constexpr of the
kernel, fixed by the shape (`constants`).

The kernel holds a whole row in one block, so BLOCK_SIZE must be at least cols: the study's
space starts at Liger's own choice.
"""

DTYPE = "bfloat16"
GATE_MULTIPLIER = 1.0


def constants(dims):
    return {"n_cols": dims["cols"]}


def make_inputs(dims, device, generator=None):
    import torch

    shape = (dims["rows"], dims["cols"])
    a = torch.randn(shape, device=device, dtype=torch.bfloat16, generator=generator)
    b = torch.randn(shape, device=device, dtype=torch.bfloat16, generator=generator)
    c = torch.empty(shape, device=device, dtype=torch.bfloat16)
    return {"a": a, "b": b, "c": c}


def arguments(inputs, dims):
    """_swiglu_forward_kernel's runtime arguments, in order (a, b, c, the row stride, the gate multiplier)."""
    c = inputs["c"]
    return [inputs["a"], inputs["b"], c, c.stride(-2), GATE_MULTIPLIER]


def grid(dims, meta):
    return (dims["rows"],)


def output(inputs):
    return inputs["c"]


def reference(inputs, dims):
    a = inputs["a"].double() * GATE_MULTIPLIER
    return a * (1.0 / (1.0 + (-a).exp())) * inputs["b"].double()


def work(dims):
    elements = dims["rows"] * dims["cols"]
    return {"flops": 6.0 * elements, "bytes": 2.0 * 3 * elements}

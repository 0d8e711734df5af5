"""Kernels in the shape of a Triton kernel library, written in C for paretune's cpu backend."""

__version__ = "0.3.1"

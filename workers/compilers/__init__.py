"""Compiler toolchains: pinned CUDA releases, ptxas, compiler controls."""

"""Workloads from a team's model and traffic: model presets (the kernels and shapes of a
layer), serving traces, a simulation of continuous batching that turns them into M buckets
and weights, and the per-token objectives over such a mix. Pure and offline (docs/workloads.md).
"""

"""Measurement helpers shared by the backends: timers, energy counters, sample statistics."""

from __future__ import annotations

from workers.measure.stats import percentile, summarize

__all__ = ["percentile", "summarize"]

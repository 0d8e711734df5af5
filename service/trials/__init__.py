"""Trials: their state machine and the lease queue."""

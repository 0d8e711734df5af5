"""The worker agent: registration, leasing, heartbeats, reports."""

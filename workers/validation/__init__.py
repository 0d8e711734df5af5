"""Validation jobs: a candidate against its baseline over the artifact's shapes."""

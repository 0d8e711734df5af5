"""Approved configuration artifacts on the service side: the signing key (signing.py)."""

"""Fixtures for the artifact tests: a signing key and realistic artifact documents."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

sys.path.insert(0, str(Path(__file__).parent))  # artifact_factory

from artifact_factory import make_document  # noqa: E402


@pytest.fixture(scope="session")
def private_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture
def document_factory() -> Any:
    return make_document


@pytest.fixture
def now() -> datetime:
    return datetime(2026, 12, 1, 12, 30, tzinfo=UTC)

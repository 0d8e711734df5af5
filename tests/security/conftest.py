"""Fixtures of the security tests (helpers live in plant.py and hostile.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from plant import Plant, start_plant  # noqa: E402


@pytest.fixture
def plant(tmp_path: Path) -> Iterator[Plant]:
    """The embedded service (SQLite in tmp_path/data); workers started by the test."""
    planted = start_plant(tmp_path)
    try:
        yield planted
    finally:
        planted.stop()
        planted.service.stop()

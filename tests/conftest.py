"""Shared pytest fixtures."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Let `.venv/bin/pytest` import `reconciler` from a plain checkout (it is not pip-installed).
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Real captures live beside the checkout, in shared/fixtures (each with a .source.txt).
FIXTURES_DIR = ROOT / ".." / "shared" / "fixtures"


@pytest.fixture
def fixtures_dir() -> Path:
    """Root of the shared real-world fixtures (``/work/shared/fixtures`` in this layout)."""
    return FIXTURES_DIR

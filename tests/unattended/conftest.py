"""Fixtures for the unattended-run tests (see tests/unattended/helpers.py)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unattended.helpers import REPO, Recorder


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    rec = Recorder()
    try:
        yield rec
    finally:
        rec.close()


@pytest.fixture
def example_dir(tmp_path: Path) -> Path:
    """A directory holding fleet.example.yaml as fleet.yaml, unchanged."""
    shutil.copy(REPO / "fleet.example.yaml", tmp_path / "fleet.yaml")
    return tmp_path

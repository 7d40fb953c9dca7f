"""The gpu tier (tests/support/gpu.py): every test here skips without an NVIDIA driver."""

from __future__ import annotations

import pytest

from tests.support.gpu import require_nvidia_gpu


@pytest.fixture(autouse=True)
def _nvidia_gpu() -> None:
    require_nvidia_gpu()

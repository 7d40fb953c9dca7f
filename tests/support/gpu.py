"""The `gpu` test tier: tests that need a real NVIDIA GPU and driver (tests/gpu/).

Without a driver (no ``nvidia-smi`` on PATH, or ``libnvidia-ml.so.1`` cannot be loaded)
such a test skips with a message saying so. Unlike a missing system package
(tests/support/system.py), NAVARCH_REQUIRE_SYSTEM_PACKAGES does not turn this skip into a
failure: CI machines have no GPU and CI does not require the tier. On a GPU machine,
NAVARCH_REQUIRE_GPU=1 (bench/on_gpu.sh's users, `pytest -m gpu`) makes a missing driver a
failure instead, so a broken driver install cannot pass as skipped.
"""

from __future__ import annotations

import ctypes
import os
import shutil

import pytest

#: Set on a GPU machine: a missing NVIDIA driver fails the gpu tier instead of skipping it.
REQUIRE_GPU_ENV = "NAVARCH_REQUIRE_GPU"
NVML_LIBRARY = "libnvidia-ml.so.1"


def nvidia_driver_missing() -> str | None:
    """Why this machine cannot run the gpu tier, or None when an NVIDIA driver is present
    (nvidia-smi on PATH and NVML's library loadable)."""
    if shutil.which("nvidia-smi") is None:
        return "no NVIDIA driver: nvidia-smi is not on PATH"
    try:
        ctypes.CDLL(NVML_LIBRARY)
    except OSError as exc:
        return f"no NVIDIA driver: {NVML_LIBRARY} cannot be loaded ({exc})"
    return None


def require_nvidia_gpu() -> None:
    """Skip the calling test unless an NVIDIA driver is present; fail instead with
    NAVARCH_REQUIRE_GPU=1. Raises pytest's Skipped or Failed outcome."""
    reason = nvidia_driver_missing()
    if reason is None:
        return
    if os.environ.get(REQUIRE_GPU_ENV) == "1":
        pytest.fail(f"{reason}; {REQUIRE_GPU_ENV}=1 makes this a failure")
    pytest.skip(f"{reason} (the gpu tier runs where an NVIDIA GPU is: bench/on_gpu.sh)")

"""Tests that need a system package (a Debian package: sshd, systemd-analyze, chromium).

On a fresh developer machine such a test skips with a message naming the package to
install; CI (.ci/run) installs every package and sets NAVARCH_REQUIRE_SYSTEM_PACKAGES=1,
which turns the skip into a failure, so a missing install step cannot hide behind a skip
.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

#: Set by .ci/run: a missing system package fails the test instead of skipping it.
REQUIRE_ENV = "NAVARCH_REQUIRE_SYSTEM_PACKAGES"


def _present(probe: str | Path | Callable[[], bool]) -> bool:
    if callable(probe):
        return bool(probe())
    text = str(probe)
    if "/" in text:
        return Path(text).exists()
    return shutil.which(text) is not None


def require_system_package(name: str, probe: str | Path | Callable[[], bool]) -> None:
    """Skip the calling test (or fixture) unless the Debian package `name` is present.

    probe: an absolute path that must exist (e.g. /usr/sbin/sshd), a program name looked
    up on PATH (e.g. "systemd-analyze"), or a callable returning True when present.
    With NAVARCH_REQUIRE_SYSTEM_PACKAGES=1 (set by .ci/run) the test fails instead.
    Raises pytest's Skipped or Failed outcome; returns None when the package is present.
    """
    if _present(probe):
        return
    message = (
        f"{probe if not callable(probe) else name} missing: "
        f"apt-get install {name} (.ci/run installs it)"
    )
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{message}; {REQUIRE_ENV}=1 makes this a failure")
    pytest.skip(message)

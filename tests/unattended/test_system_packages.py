"""tests/support/system.py: a missing system package skips, or fails under CI's variable."""

from __future__ import annotations

import pytest

from tests.support.system import REQUIRE_ENV, require_system_package


def test_present_package_passes() -> None:
    require_system_package("coreutils", "sh")


def test_missing_package_skips_naming_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(REQUIRE_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install no-such-pkg"):
        require_system_package("no-such-pkg", "/nonexistent/bin/tool")


def test_missing_package_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match="apt-get install no-such-pkg"):
        require_system_package("no-such-pkg", lambda: False)

"""docs/architecture.md is the module map: every module it names exists, and
every module of the navarch package is named there, so the map stays true."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _named() -> set[str]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    return set(re.findall(r"`(navarch/[A-Za-z0-9_/]+\.py)`", text))


def _modules() -> set[str]:
    return {
        str(p.relative_to(ROOT))
        for p in (ROOT / "navarch").rglob("*.py")
        if p.name != "__main__.py"
    }


def test_every_module_named_in_the_map_exists() -> None:
    missing = sorted(_named() - _modules())
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"


def test_every_module_is_named_in_the_map() -> None:
    unnamed = sorted(_modules() - _named())
    assert not unnamed, f"add these modules to docs/architecture.md: {unnamed}"

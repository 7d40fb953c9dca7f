"""The modules below the reconciler never import it, not even inside a function: the
results of an apply, the fleet secret, the schemas and their readers (notify, metrics,
history) sit on floors under it, so each can be read, tested and typed without it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Modules that read what the reconciler makes, or that it reads: none may look up to it.
BELOW_THE_RECONCILER = (
    "navarch/outcome.py",
    "navarch/history.py",
    "navarch/notify/metrics.py",
    "navarch/fleet/secret.py",
    "navarch/fleet/schemas.py",
    "navarch/notify/events.py",
    "navarch/notify/dispatch.py",
    "navarch/notify/state.py",
    "navarch/notify/sinks.py",
)

#: What a module on a floor this low must never import.
ABOVE = ("navarch.reconcile", "navarch.api", "navarch.cli", "navarch.fleet.load")


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, at its top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize("module", BELOW_THE_RECONCILER)
def test_results_and_their_readers_never_import_from_the_reconciler(module: str) -> None:
    up = sorted(m for m in _imports(ROOT / module) if m.startswith(ABOVE))
    assert not up, f"{module} imports from a higher floor: {up}"

"""`navarch` starts fast: a command imports the code of the verb it runs and no other, so
`--version`, `--help` and a node's `agent run --once` never pay for the planner, the
reconciler, jsonschema or requests (cron jobs and CI start the CLI on every call)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

#: Run main(argv) in a fresh interpreter; the last line of stdout lists what it imported.
PROBE = """
import json, sys
from navarch.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print()
print(json.dumps(sorted(sys.modules)))
"""

#: What only the fleet verbs need (plan, apply, status, ...), never a command that reads
#: no fleet.
FLEET_VERBS = ("navarch.api", "navarch.planner", "navarch.reconcile", "navarch.fleet.load")
#: Libraries one feature uses: HTTP notification sinks, schema validation.
HEAVY = ("requests", "jsonschema")


def _imported(argv: list[str], cwd: Path) -> set[str]:
    run = subprocess.run(
        [sys.executable, "-c", PROBE, *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return set(json.loads(run.stdout.splitlines()[-1]))


def _loaded(modules: set[str], prefixes: tuple[str, ...]) -> list[str]:
    """The modules of `modules` that are one of `prefixes` or inside one."""
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes))


@pytest.mark.parametrize(
    "argv",
    [["--version"], ["--help"], ["agent", "run", "--once", "--help"], ["plan", "--help"]],
)
def test_the_cli_loads_a_verbs_code_only_when_that_verb_runs(
    argv: list[str], fleet_dir: Path
) -> None:
    modules = _imported(argv, fleet_dir)
    assert "navarch.cli" in modules
    assert _loaded(modules, FLEET_VERBS + HEAVY) == []


def test_validate_loads_the_fleet_reader_but_not_the_reconciler(fleet_dir: Path) -> None:
    modules = _imported(["validate", "fleet.yaml"], fleet_dir)
    assert "navarch.fleet.load" in modules  # the verb ran
    assert _loaded(modules, ("navarch.planner", "navarch.reconcile", "requests")) == []

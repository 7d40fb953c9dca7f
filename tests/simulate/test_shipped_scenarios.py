"""Every shipped scenario with `assert:` lines (examples/simulate/*.yaml) holds them, run
in full at its own seed. Only steady-state-small (about 3.5 s of CPU) is cheap enough for
the normal suite, which runs it in full elsewhere; every other one takes from about 20 s
(lemons, 7 days) to tens of minutes (the months) of CPU, so they are the nightly tier
(marker `slow`, skipped unless NAVARCH_NIGHTLY=1: `NAVARCH_NIGHTLY=1 python3 -m pytest
-m slow tests/simulate`) and CI stays in its budget. The normal suite proves the same
behaviours on scenarios sized to them (tests/simulate/scenarios/: 10- and 20-node fleets,
hours rather than days; test_simulate.py) and a shortened cut of one (test_event_runs.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from navarch.simulate.engine import simulate
from navarch.simulate.report import check_asserts
from navarch.simulate.scenario import load_scenario

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "simulate"

#: Run in full by another test of the normal suite, which checks every assert.
ELSEWHERE = {"steady-state-small.yaml": "test_simulate.py"}
#: The nightly tier.
SLOW = (
    "acceptance-month-off.yaml",
    "acceptance-month-on.yaml",
    "acceptance-month-spares.yaml",
    "app-xid-storm.yaml",
    "false-signals.yaml",
    "held-out-20x-week-spares-events-acceptance.yaml",
    "held-out-20x-week-spares-events.yaml",
    "host-down.yaml",
    "ladder-reboot-first.yaml",
    "ladder-replace-only.yaml",
    "ladder-surge-any.yaml",
    "lemons.yaml",
    "spot-churn.yaml",
    "steady-state-20x-events.yaml",
    "steady-state-20x.yaml",
    "steady-state.yaml",
    "stockout-2d-replace-only.yaml",
    "store-outage.yaml",
    "zone-stockout.yaml",
)


def _with_asserts() -> list[str]:
    out = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        if isinstance(doc, dict) and doc.get("assert"):
            out.append(path.name)
    return out


def test_every_shipped_scenario_with_asserts_is_run_by_a_tier() -> None:
    tiers = [*ELSEWHERE, *SLOW]
    assert len(tiers) == len(set(tiers))
    assert sorted(tiers) == _with_asserts()


def _holds(name: str) -> None:
    scenario = load_scenario(EXAMPLES / name)
    doc = simulate(scenario)
    results = check_asserts(doc, scenario.asserts)
    assert [r for r in results if not r["ok"]] == [], (name, doc["wrongful_termination_causes"])


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW)
def test_a_long_shipped_scenario_holds_its_asserts_in_the_nightly_tier(name: str) -> None:
    _holds(name)

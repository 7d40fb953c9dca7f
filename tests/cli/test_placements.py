"""One pool across two providers, end to end on two embedded local providers.

sim-a is declared first; while every place of it answers "no capacity", apply launches on
sim-b and the plan says why. Once sim-a has capacity again (the backoff has run out), a
sim-b node that is replaced gets its replacement on sim-a.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

FLEET = """\
fleet: demo
store: file://.navarch/store
secret: {file: .navarch/fleet.secret}
providers:
  sim-a:
    type: local
    dir: .navarch/a
    unavailable: [a-1/sim-h100x8, a-2/sim-h100x8]
  sim-b:
    type: local
    dir: .navarch/b
pools:
  train:
    placements:
      - {provider: sim-a, zones: [a-1, a-2], instance_types: [sim-h100x8]}
      - {provider: sim-b, zones: [b-1], instance_types: [sim-h100x8]}
    nodes: {min: 0, target: 2, max: 3}
    health: {remediation: [replace], max_surge: 1}
"""


@pytest.fixture
def fleet_dir(tmp_path: Path) -> Path:
    """Overrides the conftest fixture: a fleet of one pool on two local providers."""
    (tmp_path / "fleet.yaml").write_text(FLEET)
    return tmp_path


def _providers(navarch) -> dict[str, str]:
    return {n["node"]: n["provider"] for n in navarch.nodes("train")}


def _end_backoff(fleet_dir: Path) -> None:
    """Time passes: every capacity backoff in the state has run out."""
    path = fleet_dir / ".navarch" / "store" / "state" / "demo.json"
    doc = json.loads(path.read_text())
    for e in doc["pools"]["train"]["exhausted"]:
        e["until"] = "2000-01-01T00:00:00Z"
    path.write_text(json.dumps(doc))


def test_two_placements_fall_over_and_come_back(navarch, fleet_dir: Path) -> None:
    out = navarch.ok("apply", "fleet.yaml", "--auto-approve").out
    assert "after 2 zones/types without capacity" in out, out
    assert set(_providers(navarch).values()) == {"sim-b"}

    # A third node: the plan names the placement and why the first one is skipped.
    doc = yaml.safe_load((fleet_dir / "fleet.yaml").read_text())
    doc["pools"]["train"]["nodes"]["target"] = 3
    (fleet_dir / "fleet.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    plan = navarch("plan", "fleet.yaml", "--detailed-exitcode")
    assert plan.code == 2, plan.out + plan.err
    assert "+ provision demo-train-0003 on sim-b b-1/sim-h100x8" in plan.out, plan.out
    assert "sim-a: all places exhausted until" in plan.out, plan.out
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    assert _providers(navarch)["demo-train-0003"] == "sim-b"

    # sim-a has capacity again; a sim-b node fails and is replaced on sim-a.
    del doc["providers"]["sim-a"]["unavailable"]
    (fleet_dir / "fleet.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    _end_backoff(fleet_dir)
    navarch.ok("local", "tick", "fleet.yaml")
    navarch.ok("local", "inject", "fleet.yaml", "demo-train-0001", "--xid", "79")
    navarch.ok("local", "tick", "fleet.yaml")
    plan = navarch.ok("plan", "fleet.yaml").out
    assert "+ provision demo-train-0004 on sim-a a-1/sim-h100x8" in plan, plan
    assert "exhausted" not in plan, plan
    for _ in range(6):
        navarch.ok("apply", "fleet.yaml", "--auto-approve")
        navarch.ok("local", "tick", "fleet.yaml")
        if navarch("plan", "fleet.yaml", "--detailed-exitcode").code == 0:
            break
    providers = _providers(navarch)
    assert "demo-train-0001" not in providers, providers
    assert providers["demo-train-0004"] == "sim-a", providers
    assert sorted(providers.values()) == ["sim-a", "sim-b", "sim-b"], providers
    assert all(n["lifecycle"] == "healthy" for n in navarch.nodes("train"))

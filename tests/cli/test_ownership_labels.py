"""A pool label can never take navarch's ownership tags from its own instances.

End to end on the embedded local provider: a fleet that runs, then a label named like an
ownership tag; every later apply must refuse the file, and no machine may be launched in
place of one that lost its tags.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.test_drift import edit_fleet


def _live_machines(fleet_dir: Path) -> list[dict]:
    local = fleet_dir / ".navarch" / "local"
    out = [json.loads(p.read_text()) for p in sorted(local.glob("*/machines/*/machine.json"))]
    return [m for m in out if m.get("state") in ("pending", "running")]


@pytest.mark.parametrize("key", ["navarch-fleet", "navarch-pool", "navarch-node", "navarch-spec"])
def test_validate_names_a_label_that_takes_an_ownership_key(
    navarch, fleet_dir: Path, key: str
) -> None:
    edit_fleet(fleet_dir / "fleet.yaml", lambda d: d["pools"]["infer"].update(labels={key: "x"}))
    checked = navarch("validate", "fleet.yaml")
    assert checked.code == 1
    assert "fleet.yaml:" in checked.err and f"pools.infer.labels.{key}" in checked.err
    assert "reserved" in checked.err


def test_an_ownership_label_never_disowns_a_running_node(navarch, fleet_dir: Path) -> None:
    key = "navarch-fleet"
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    doc_nodes = {"train": (3, 1), "infer": (2, 1)}  # target, max_surge of fleet.example.yaml
    ceiling = sum(t + s for t, s in doc_nodes.values())
    before = {m["instance_id"] for m in _live_machines(fleet_dir)}
    assert len(before) == sum(t for t, _ in doc_nodes.values())
    edit_fleet(
        fleet_dir / "fleet.yaml",
        lambda d: d["pools"]["train"].update(labels={"team": "research", key: "prod"}),
    )
    checked = navarch("validate", "fleet.yaml")
    assert checked.code == 1
    assert f"pools.train.labels.{key}" in checked.err and "reserved" in checked.err
    for _ in range(10):
        run = navarch("apply", "fleet.yaml", "--auto-approve")
        assert run.code == 1 and "reserved" in run.err
        live = _live_machines(fleet_dir)
        assert len(live) <= ceiling
        assert all(dict(m["tags"]).get("navarch-fleet") == "demo" for m in live)
    assert {m["instance_id"] for m in _live_machines(fleet_dir)} == before

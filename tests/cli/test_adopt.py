"""`navarch adopt` on the local provider: machines that already run, without navarch's tags,
become a pool's nodes in place (same boot, same launch time), after the plan is shown and
a person says yes; what the pool would replace at once is left alone."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from navarch import api
from navarch.capabilities import Capability
from navarch.providers.local import LocalProvider


@pytest.fixture(autouse=True)
def observed(fleet_dir: Path) -> None:
    """The train pool in observe: the mode adopt puts a pool in (fleet.yaml decides it)."""
    _set_mode(fleet_dir, "observe")


def _set_mode(fleet_dir: Path, mode: str) -> None:
    path = fleet_dir / "fleet.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["pools"]["train"]["mode"] = mode
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def _machines(fleet_dir: Path) -> LocalProvider:
    return LocalProvider("sim", fleet_dir / ".navarch/local/demo", fleet="demo")


def _running(sim: LocalProvider, zone: str, itype: str, tags: dict[str, str]) -> str:
    """A machine someone else started an hour ago, with these tags only."""
    iid = "i-" + uuid.uuid4().hex[:17]
    sim.write_machine(
        {
            "instance_id": iid,
            "zone": zone,
            "instance_type": itype,
            "state": "running",
            "launched_at": (datetime.now(UTC) - timedelta(hours=1)).isoformat(),
            "tags": tags,
            "spot": False,
            "boot_id": str(uuid.uuid4()),
        }
    )
    return iid


def test_adopt_makes_three_running_machines_matched_by_a_tag_the_pools_nodes_unrestarted(
    navarch, fleet_dir
) -> None:
    sim = _machines(fleet_dir)
    ours = sorted(_running(sim, "sim-1a", "sim-h100x8", {"team": "ml"}) for _ in range(3))
    other = _running(sim, "sim-1a", "sim-h100x8", {"team": "web"})
    wrong_type = _running(sim, "sim-1a", "sim-cpu", {"team": "ml"})
    before = {iid: sim.read_machine(iid) for iid in ours}

    run = navarch.ok("adopt", "fleet.yaml", "--pool", "train", "--tag", "team=ml", input="yes\n")

    for iid in ours:
        assert f"+ adopt {iid} as demo-train-000" in run.out
    assert f"leave {wrong_type}" in run.out and "no longer in instance_types" in run.out
    assert other not in run.out
    assert "pools.train.mode: observe" in run.out
    assert "Adopt complete: 3 instance(s) now nodes of pool train" in run.out
    for iid in ours:
        after = sim.read_machine(iid)
        # Same boot, same launch time, still running: nothing was restarted.
        assert {k: after[k] for k in ("boot_id", "launched_at", "state")} == {
            k: before[iid][k] for k in ("boot_id", "launched_at", "state")
        }
        assert after["tags"]["navarch-fleet"] == "demo"
        assert after["tags"]["navarch-pool"] == "train" and after["tags"]["team"] == "ml"
    assert "navarch-fleet" not in sim.read_machine(other)["tags"]
    assert "navarch-fleet" not in sim.read_machine(wrong_type)["tags"]

    nodes = navarch.nodes("train")
    assert sorted(n["instance_id"] for n in nodes) == ours
    assert sorted(n["node"] for n in nodes) == [f"demo-train-000{i}" for i in (1, 2, 3)]
    plan = json.loads(navarch.ok("plan", "fleet.yaml", "--json", "--pool", "train").out)
    assert not [a for a in plan["actions"] if a["action"] == "provision"]
    # No report yet, but the boot window runs from the adoption: booting, not unhealthy.
    assert {n["lifecycle"] for n in plan["nodes"] if n["pool"] == "train"} == {"booting"}


def test_adopt_declined_writes_no_tag(navarch, fleet_dir) -> None:
    sim = _machines(fleet_dir)
    iid = _running(sim, "sim-1a", "sim-h100x8", {"team": "ml"})
    run = navarch("adopt", "fleet.yaml", "--pool", "train", "--instance-id", iid, input="no\n")
    assert run.code == 1 and "Adopt cancelled." in run.out
    assert "navarch-fleet" not in sim.read_machine(iid)["tags"]


def test_adopt_refuses_an_empty_filter_and_a_provider_that_cannot_adopt(
    navarch, fleet_dir, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = navarch("adopt", "fleet.yaml", "--pool", "train")
    assert run.code == 1 and "adopt needs a filter" in run.err
    monkeypatch.setattr(
        LocalProvider, "capabilities", LocalProvider.capabilities & ~Capability.ADOPT
    )
    run = navarch("adopt", "fleet.yaml", "--pool", "train", "--tag", "team=ml", "--yes")
    assert run.code == 1 and "provider sim (type local) cannot adopt instances" in run.err


def test_adopt_never_takes_an_instance_another_fleet_owns(navarch, fleet_dir) -> None:
    sim = _machines(fleet_dir)
    iid = _running(sim, "sim-1a", "sim-h100x8", {"team": "ml", "navarch-fleet": "other"})
    result = api.adopt(
        fleet_dir / "fleet.yaml",
        "train",
        api.AdoptFilter(tags=(("team", "ml"),)),
        auto_approve=True,
    )
    assert result.plan.adopt == () and not result.applied
    assert sim.read_machine(iid)["tags"]["navarch-fleet"] == "other"


def test_adopt_into_a_pool_that_acts_fully_is_refused_until_fleet_yaml_says_observe(
    navarch, fleet_dir
) -> None:
    _set_mode(fleet_dir, "full")
    iid = _running(_machines(fleet_dir), "sim-1a", "sim-h100x8", {"team": "ml"})
    run = navarch("adopt", "fleet.yaml", "--pool", "train", "--tag", "team=ml", "--yes")
    assert run.code == 1 and "pools.train.mode" in run.err and "observe" in run.err
    assert "navarch-fleet" not in _machines(fleet_dir).read_machine(iid)["tags"]
    run = navarch(
        "adopt", "fleet.yaml", "--pool", "train", "--tag", "team=ml", "--mode", "full", "--yes"
    )
    assert run.code == 0, run.err

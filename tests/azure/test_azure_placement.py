"""Azure proximity placement groups and capacity reservation groups, asserted at the HTTP
boundary of the real azure-mgmt-compute client (the ARM fake keeps every VM and group PUT
body and refuses members azure-mgmt-compute's models do not know)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from navarch.errors import CapacityError
from tests.azure.test_agent_delivery_azure import arm_action
from tests.azure.test_azure_provider import provider, request
from tests.azure.test_cli_azure import FLEET, env_for, navarch, write_fleet
from tests.support.fake_arm import SUB, FakeARM

PPG = f"/subscriptions/{SUB}/resourceGroups/rg/providers/Microsoft.Compute/proximityPlacementGroups/train-ppg"
CRG = f"/subscriptions/{SUB}/resourceGroups/rg/providers/Microsoft.Compute/capacityReservationGroups/train-crg"
OPTS = {"proximity_placement_group": "train-ppg", "capacity_reservation_group": "train-crg"}


def test_a_proximity_placement_group_is_created_once_and_every_vm_joins_it_and_its_reservation(
    fake_arm: FakeARM, arm_endpoint: str
) -> None:
    fake_arm.reservation_groups[CRG.lower()] = [4, 0]
    p = provider(arm_endpoint)
    p.provision(request("f-p-0001", **OPTS))
    p.provision(request("f-p-0002", **OPTS))
    assert fake_arm.ppg_puts == [
        {
            "location": "eastus",
            "tags": {"navarch-fleet": "f"},
            "properties": {"proximityPlacementGroupType": "Standard"},
        }
    ]
    assert fake_arm.count("GET", r"/proximityPlacementGroups/train-ppg$") == 1
    for body in fake_arm.vm_puts:
        assert body["properties"]["proximityPlacementGroup"] == {"id": PPG}
        assert body["properties"]["capacityReservation"] == {
            "capacityReservationGroup": {"id": CRG}
        }
    assert fake_arm.reservation_groups[CRG.lower()] == [4, 2]


def test_a_full_capacity_reservation_group_is_a_capacity_error(
    fake_arm: FakeARM, arm_endpoint: str
) -> None:
    fake_arm.reservation_groups[CRG.lower()] = [1, 1]
    with pytest.raises(CapacityError):
        provider(arm_endpoint).provision(request("f-p-0001", **OPTS))


def test_a_full_proximity_placement_group_waits_by_default_and_says_so(
    fake_arm: FakeARM, arm_endpoint: str
) -> None:
    fake_arm.full_ppgs.add(PPG.lower())
    p = provider(arm_endpoint)
    with pytest.raises(
        CapacityError, match="proximity placement group train-ppg has no room"
    ) as err:
        p.provision(request("f-p-0001", proximity_placement_group="train-ppg"))
    assert err.value.code == "OverconstrainedAllocationRequest"
    assert [b["properties"]["proximityPlacementGroup"] for b in fake_arm.vm_puts] == [{"id": PPG}]
    assert fake_arm.vms == {} and fake_arm.nics == {}  # the refused launch left nothing


def test_a_full_proximity_placement_group_with_fallback_outside_launches_beside_it_with_a_warning(
    fake_arm: FakeARM, arm_endpoint: str, caplog: pytest.LogCaptureFixture
) -> None:
    fake_arm.full_ppgs.add(PPG.lower())
    opts = {"proximity_placement_group": "train-ppg", "placement_fallback": "outside"}
    with caplog.at_level(logging.WARNING, logger="navarch.providers.azure"):
        inst = provider(arm_endpoint).provision(request("f-p-0001", **opts))
    assert inst.node == "f-p-0001"
    first, last = fake_arm.vm_puts
    assert first["properties"]["proximityPlacementGroup"] == {"id": PPG}
    assert "proximityPlacementGroup" not in last["properties"]
    assert "proximity placement group train-ppg has no room" in caplog.text
    assert "placement_fallback: outside" in caplog.text


def test_the_fake_refuses_a_member_the_sdk_model_does_not_know(
    fake_arm: FakeARM, arm_endpoint: str
) -> None:
    from azure.core.exceptions import HttpResponseError

    p = provider(arm_endpoint)
    with pytest.raises(HttpResponseError, match="Could not find member"):
        p.compute.virtual_machines.begin_create_or_update(
            "rg", "x", {"location": "eastus", "properties": {"proximityPlacementGroupp": {}}}
        ).result()


def test_a_replacement_joins_the_same_proximity_placement_group_and_reservation(
    fake_arm: FakeARM, arm_endpoint: str, azurite: str, az_container: str, tmp_path: Path
) -> None:
    crg = CRG.replace("/rg/", "/gpu-rg/")
    fake_arm.reservation_groups[crg.lower()] = [3, 0]
    env = env_for(azurite)
    fleet = write_fleet(tmp_path, arm_endpoint, az_container, target=2)
    fleet.write_text(
        fleet.read_text()
        + "      proximity_placement_group: train-ppg\n"
        + "      capacity_reservation_group: train-crg\n"
    )
    run = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    run = navarch(
        ["apply", str(fleet), "--auto-approve", "--replace", f"{FLEET}-train-0001"], env, tmp_path
    )
    assert run.returncode == 0, run.stdout + run.stderr
    last = fake_arm.vm_puts[-1]
    assert last["properties"]["osProfile"]["computerName"] == f"{FLEET}-train-0003"
    assert last["properties"]["proximityPlacementGroup"] == {"id": PPG.replace("/rg/", "/gpu-rg/")}
    assert last["properties"]["capacityReservation"]["capacityReservationGroup"] == {"id": crg}
    assert len(fake_arm.ppg_puts) == 1


def test_status_shows_an_azure_reservation_groups_use_and_idle_reserved_capacity_is_notified(
    fake_arm: FakeARM, arm_endpoint: str, azurite: str, az_container: str, tmp_path: Path
) -> None:
    crg = CRG.replace("/rg/", "/gpu-rg/")
    fake_arm.reservation_groups[crg.lower()] = [3, 0]
    env = env_for(azurite)
    fleet = write_fleet(tmp_path, arm_endpoint, az_container, target=2)
    text = fleet.read_text().replace(
        "safety:", "reservation_idle_after: 0s\nnotify: [{type: log, path: events.jsonl}]\nsafety:"
    )
    fleet.write_text(text + "      capacity_reservation_group: train-crg\n")
    run = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    run = navarch(["status", str(fleet)], env, tmp_path)
    line = f"reservation train-crg (azr eastus-1 {fake_arm.reservation_sku}): "
    assert line + "reserved 3, running 2, idle 1 (billed)" in run.stdout, run.stdout + run.stderr
    events = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    [idle] = [e for e in events if e["kind"] == "reservation_idle"]
    # Read before this run's launches: all three were idle then.
    assert idle["message"].startswith(line + "3 of 3 reserved instances idle"), idle


def test_placement_group_and_reservation_calls_are_in_the_reconciler_role(
    fake_arm: FakeARM, arm_endpoint: str
) -> None:
    fake_arm.reservation_groups[CRG.lower()] = [1, 0]
    p = provider(arm_endpoint)
    p.provision(request("f-p-0001", **OPTS))
    [held] = p.list_reservations(["train-crg"])
    assert (held.total, held.running) == (1, 1)
    used = {arm_action(c.method, c.path) for c in fake_arm.calls}
    # A group's member reservations are their own resource type (Azure resource provider
    # operations: Microsoft.Compute/capacityReservationGroups/capacityReservations/read).
    if any(c.path.endswith("/capacityReservations") for c in fake_arm.calls):
        used.add("Microsoft.Compute/capacityReservationGroups/capacityReservations/read")
    # Deploying a VM into a capacity reservation group is its own action on the group.
    if any("capacityReservation" in b["properties"] for b in fake_arm.vm_puts):
        used.add("Microsoft.Compute/capacityReservationGroups/deploy/action")
    role = json.loads(
        (
            Path(__file__).resolve().parents[2] / "docs/policies/azure-reconciler-role.json"
        ).read_text()
    )
    assert {
        "Microsoft.Compute/proximityPlacementGroups/read",
        "Microsoft.Compute/proximityPlacementGroups/write",
    } <= used
    assert used - set(role["Actions"]) == set(), sorted(used)

"""Compute Engine compact placement policies and specific reservations, asserted at the
HTTP boundary of the real google-cloud-compute REST client (the fake Compute API records
every insert body, parsed by compute_v1's own message types)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from navarch.errors import CapacityError, ConfigError
from navarch.providers.gcp import GcpProvider
from tests.gcp.test_agent_delivery_gcp import compute_permission, role_permissions
from tests.gcp.test_cli_gcp import FLEET as CLI_FLEET
from tests.gcp.test_cli_gcp import env, navarch, write_fleet  # noqa: F401 - env is a fixture
from tests.support.providers import FLEET, gcp_provider, request_maker

ROOT = Path(__file__).resolve().parents[2]
OPTIONS = {"placement_policy": "train-compact", "reservation": "res-a"}
_request = request_maker("us-central1-a", "a3-highgpu-8g", OPTIONS)


def _provider(endpoint: str) -> GcpProvider:
    provider = gcp_provider(endpoint, FLEET)
    assert isinstance(provider, GcpProvider)
    return provider


def _bodies(fake, kind: str) -> list[dict]:
    return [body for k, body in fake.inserted if k == kind]


def test_a_compact_placement_policy_is_created_once_and_every_instance_joins_it(
    fake_compute, compute_endpoint
) -> None:
    fake_compute.reservations[("us-central1-a", "res-a")] = [4, 0]
    p = _provider(compute_endpoint)
    p.provision(_request("prod-train-0001"))
    p.provision(_request("prod-train-0002"))
    assert _bodies(fake_compute, "resourcePolicy") == [
        {
            "name": "train-compact",
            "description": f"navarch fleet {FLEET}: compact placement",
            "groupPlacementPolicy": {"collocation": "COLLOCATED"},
        }
    ]
    assert fake_compute.count("GET", r"/regions/us-central1/resourcePolicies/train-compact$") == 1
    for body in _bodies(fake_compute, "instance"):
        assert body["resourcePolicies"] == [
            "projects/navarch-test/regions/us-central1/resourcePolicies/train-compact"
        ]
        assert body["reservationAffinity"] == {
            "consumeReservationType": "SPECIFIC_RESERVATION",
            "key": "compute.googleapis.com/reservation-name",
            "values": ["res-a"],
        }
        assert body["scheduling"]["onHostMaintenance"] == "TERMINATE"
    assert fake_compute.reservations[("us-central1-a", "res-a")] == [4, 2]


def test_an_existing_placement_policy_is_used_as_it_is(fake_compute, compute_endpoint) -> None:
    fake_compute.resource_policies[("us-central1", "train-compact")] = {"name": "train-compact"}
    fake_compute.reservations[("us-central1-a", "res-a")] = [1, 0]
    _provider(compute_endpoint).provision(_request())
    assert _bodies(fake_compute, "resourcePolicy") == []


def test_a_used_up_reservation_is_a_capacity_error(fake_compute, compute_endpoint) -> None:
    fake_compute.reservations[("us-central1-a", "res-a")] = [1, 1]
    with pytest.raises(CapacityError):
        _provider(compute_endpoint).provision(_request())


def test_a_replacement_launches_into_the_same_placement_policy_and_reservation(
    fake_compute, compute_endpoint, gcs_bucket, env, tmp_path
) -> None:
    fake_compute.reservations[("us-central1-a", "res-a")] = [3, 0]
    extra = "      placement_policy: train-compact\n      reservation: res-a\n"
    fleet = write_fleet(tmp_path, compute_endpoint, gcs_bucket, target=2, zones=("us-central1-a",))
    fleet.write_text(fleet.read_text() + extra)
    run = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    run = navarch(
        ["apply", str(fleet), "--auto-approve", "--replace", f"{CLI_FLEET}-train-0001"],
        env,
        tmp_path,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    bodies = _bodies(fake_compute, "instance")
    assert sorted(b["name"] for b in bodies) == [f"{CLI_FLEET}-train-{i:04d}" for i in (1, 2, 3)]
    replacement = bodies[-1]
    assert replacement["name"] == f"{CLI_FLEET}-train-0003"  # launched by the second apply
    assert replacement["resourcePolicies"] == [
        "projects/navarch-test/regions/us-central1/resourcePolicies/train-compact"
    ]
    assert replacement["reservationAffinity"]["values"] == ["res-a"]
    assert len(_bodies(fake_compute, "resourcePolicy")) == 1


def _permissions(fake) -> set[str]:
    """The IAM permissions of every Compute call recorded (Compute Engine API reference):
    resourcePolicies get/insert, region operations, reservations aggregatedList, and an
    instance naming a policy."""
    out: set[str] = set()
    for call in fake.calls:
        segments = call.path.strip("/").split("/")
        if segments[-2:] == ["aggregated", "reservations"]:
            out.add("compute.reservations.list")  # aggregatedList: the list permission
        elif "resourcePolicies" in segments:
            out.add(
                "compute.resourcePolicies.get"
                if call.method == "GET"
                else "compute.resourcePolicies.create"
            )
        elif "regions" in segments and "operations" in segments:
            out.add("compute.regionOperations.get")
        else:
            out.add(compute_permission(call.method, call.path))
    if any(body.get("resourcePolicies") for kind, body in fake.inserted if kind == "instance"):
        out.add("compute.resourcePolicies.use")
    return out


def test_placement_policy_and_reservation_calls_are_in_the_reconciler_role(
    fake_compute, compute_endpoint
) -> None:
    fake_compute.reservations[("us-central1-a", "res-a")] = [1, 0]
    provider = _provider(compute_endpoint)
    provider.provision(_request())
    assert [r.reservation_id for r in provider.list_reservations(["res-a"])] == ["res-a"]
    used = _permissions(fake_compute)
    assert {
        "compute.reservations.list",
        "compute.resourcePolicies.get",
        "compute.resourcePolicies.create",
        "compute.resourcePolicies.use",
        "compute.regionOperations.get",
        "compute.instances.create",
    } <= used
    assert used - role_permissions() == set()


def test_a_full_placement_policy_waits_by_default_and_says_so(
    fake_compute, compute_endpoint
) -> None:
    fake_compute.resource_policies[("us-central1", "train-compact")] = {"name": "train-compact"}
    fake_compute.full_policies.add(("us-central1", "train-compact"))
    request = request_maker("us-central1-a", "a3-highgpu-8g", {"placement_policy": "train-compact"})
    with pytest.raises(CapacityError, match="placement policy train-compact has no room") as err:
        _provider(compute_endpoint).provision(request())
    assert err.value.code == "ZONE_RESOURCE_POOL_EXHAUSTED"
    assert err.value.scope == "zone"
    assert all(b["resourcePolicies"] for b in _bodies(fake_compute, "instance"))
    assert fake_compute.instances == {}


def test_a_full_placement_policy_with_fallback_outside_launches_beside_it_with_a_warning(
    fake_compute, compute_endpoint, caplog
) -> None:
    fake_compute.resource_policies[("us-central1", "train-compact")] = {"name": "train-compact"}
    fake_compute.full_policies.add(("us-central1", "train-compact"))
    opts = {"placement_policy": "train-compact", "placement_fallback": "outside"}
    request = request_maker("us-central1-a", "a3-highgpu-8g", opts)
    with caplog.at_level(logging.WARNING, logger="navarch.providers.gcp"):
        inst = _provider(compute_endpoint).provision(request("prod-train-0001"))
    assert inst.instance_id == "prod-train-0001"
    first, last = _bodies(fake_compute, "instance")
    assert first["resourcePolicies"] and "resourcePolicies" not in last
    inserts = [
        c for c in fake_compute.calls if c.method == "POST" and c.path.endswith("/instances")
    ]
    assert len({c.data["requestId"][0] for c in inserts}) == 2  # a fresh requestId outside
    assert "placement policy train-compact has no room" in caplog.text
    assert "placement_fallback: outside" in caplog.text


def test_an_unknown_placement_fallback_names_its_key_path(fake_compute, compute_endpoint) -> None:
    request = request_maker("us-central1-a", "a3-highgpu-8g", {"placement_fallback": "later"})
    with pytest.raises(ConfigError, match="placement_fallback") as err:
        _provider(compute_endpoint).provision(request())
    assert err.value.key_path == "pools.train.gcp.placement_fallback"


def test_status_shows_a_gce_reservations_use_and_idle_reserved_capacity_is_notified(
    fake_compute, compute_endpoint, gcs_bucket, env, tmp_path
) -> None:
    fake_compute.reservations[("us-central1-a", "res-a")] = [3, 0]
    fake_compute.reservation_machine_type = "n1-standard-8"
    fleet = write_fleet(tmp_path, compute_endpoint, gcs_bucket, target=2, zones=("us-central1-a",))
    text = fleet.read_text().replace(
        "safety:", "reservation_idle_after: 0s\nnotify: [{type: log, path: events.jsonl}]\nsafety:"
    )
    fleet.write_text(text + "      reservation: res-a\n")
    run = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    run = navarch(["status", str(fleet)], env, tmp_path)
    assert (
        "reservation res-a (gce us-central1-a n1-standard-8): reserved 3, running 2, idle 1 (billed)"
        in run.stdout
    ), run.stdout + run.stderr
    assert fake_compute.count("GET", r"/aggregated/reservations$") >= 1
    events = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    [idle] = [e for e in events if e["kind"] == "reservation_idle"]
    # Read before this run's launches: all three were idle then.
    assert idle["message"].startswith(
        "reservation res-a (gce us-central1-a n1-standard-8): 3 of 3 reserved instances idle"
    ), idle

"""Compute Engine's physical hosts through the real client library against the fake REST
server: the host and topology of listed instances, and instances.reportHostAsFaulty."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import yaml

from navarch.errors import NavarchError, ProviderError
from navarch.inventory import Instance, InstanceState, launch_id, ownership_tags
from navarch.providers.base import ProvisionRequest
from navarch.providers.gcp import GcpProvider
from tests.gcp.test_agent_delivery_gcp import POLICIES, compute_permission, role_permissions
from tests.support.providers import gcp_provider

FLEET = "prod"
NOW = datetime(2026, 11, 1, tzinfo=UTC)
ZONE = "us-central1-a"


def _provider(endpoint: str) -> GcpProvider:
    provider = gcp_provider(endpoint, FLEET)
    assert isinstance(provider, GcpProvider)
    return provider


def _launch(p: GcpProvider, node: str):
    lid = launch_id(FLEET, node, 0)
    return p.provision(
        ProvisionRequest(
            fleet=FLEET,
            pool="train",
            node=node,
            zone=ZONE,
            instance_type="a3-ultragpu-8g",
            spot=False,
            launch_id=lid,
            attempt=0,
            tags=ownership_tags(FLEET, "train", node, lid),
        )
    )


def test_listed_instances_carry_compute_engines_host_and_topology(
    fake_compute, compute_endpoint: str
) -> None:
    p = _provider(compute_endpoint)
    _launch(p, "prod-train-0001")
    fake_compute.set_status(
        ZONE,
        "prod-train-0001",
        "RUNNING",
        resourceStatus={
            "physicalHost": "/b1/sb2/h3",
            "physicalHostTopology": {
                "cluster": "us-central1-cluster-x",
                "block": "b1",
                "subblock": "sb2",
                "host": "h3",
            },
        },
    )
    (inst,) = p.list_instances(FLEET)
    assert inst.host_id == "/b1/sb2/h3"
    assert inst.topology == ("us-central1-cluster-x", "b1", "sb2", "h3")
    assert inst.block == "us-central1-cluster-x/b1"


def test_an_instance_without_resource_status_has_no_host(
    fake_compute, compute_endpoint: str
) -> None:
    p = _provider(compute_endpoint)
    _launch(p, "prod-train-0001")
    (inst,) = p.list_instances(FLEET)
    assert (inst.host_id, inst.topology, inst.block) == (None, (), "")


def test_a_faulty_host_is_reported_with_the_exact_request_body(
    fake_compute, compute_endpoint: str
) -> None:
    p = _provider(compute_endpoint)
    inst = _launch(p, "prod-train-0001")
    fake_compute.set_status(
        ZONE, "prod-train-0001", "RUNNING", scheduling={"provisioningModel": "RESERVATION_BOUND"}
    )
    line = p.report_faulty_host(inst, "xid:79@gpu3")
    ((zone, name, body, rid),) = fake_compute.host_reports
    assert (zone, name) == (ZONE, "prod-train-0001")
    assert body == {
        "disruptionSchedule": "IMMEDIATE",
        "faultReasons": [
            {"behavior": "UNRECOVERABLE_GPU_ERROR", "description": "navarch: xid:79@gpu3"}
        ],
    }
    assert len(rid) == 36  # a fresh UUID per hand-back
    assert "reported faulty to Compute Engine (xid:79@gpu3)" in line


def test_a_vm_outside_a_reservation_is_refused_in_the_clouds_words(
    fake_compute, compute_endpoint: str
) -> None:
    p = _provider(compute_endpoint)
    inst = _launch(p, "prod-train-0001")
    with pytest.raises(NavarchError, match="reservation-bound"):
        p.report_faulty_host(inst, "gpu_lost")
    assert fake_compute.host_reports == []


def test_a_foreign_instance_is_never_reported(fake_compute, compute_endpoint: str) -> None:
    p = _provider(compute_endpoint)
    fake_compute.add_instance(ZONE, "someone-else", {"owner": "x"})
    foreign = Instance("gcp", "someone-else", ZONE, "a3-ultragpu-8g", InstanceState.RUNNING, NOW)
    with pytest.raises(ProviderError, match="refusing"):
        p.report_faulty_host(foreign, "gpu_lost")
    assert fake_compute.count("POST", "reportHostAsFaulty") == 0


def test_the_hand_back_call_is_in_the_reconciler_role(fake_compute, compute_endpoint: str) -> None:
    p = _provider(compute_endpoint)
    inst = _launch(p, "prod-train-0001")
    fake_compute.set_status(
        ZONE, "prod-train-0001", "RUNNING", scheduling={"provisioningModel": "RESERVATION_BOUND"}
    )
    p.report_faulty_host(inst, "gpu_lost")
    used = {compute_permission(c.method, c.path) for c in fake_compute.calls}
    assert "compute.instances.reportHostAsFaulty" in used
    assert used - role_permissions() == set()
    doc = yaml.safe_load((POLICIES / "gcp-reconciler-role.yaml").read_text())
    doc["includedPermissions"].remove("compute.instances.reportHostAsFaulty")
    assert used - role_permissions(doc) == {"compute.instances.reportHostAsFaulty"}

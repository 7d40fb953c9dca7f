"""GCP provider reboot: instances.reset on the same VM, never a delete."""

from __future__ import annotations

import json

import pytest
from google.cloud import compute_v1

from navarch.errors import ProviderError
from navarch.inventory import launch_id, ownership_tags
from navarch.providers.base import ProvisionRequest
from navarch.providers.gcp import GcpProvider, to_instance
from tests.support.providers import gcp_provider

FLEET = "prod"


def _provider(endpoint: str) -> GcpProvider:
    provider = gcp_provider(endpoint, FLEET)
    assert isinstance(provider, GcpProvider)
    return provider


def _request(node: str, zone: str = "us-central1-a") -> ProvisionRequest:
    lid = launch_id(FLEET, node, 0)
    return ProvisionRequest(
        fleet=FLEET,
        pool="train",
        node=node,
        zone=zone,
        instance_type="n1-standard-8",
        spot=False,
        launch_id=lid,
        attempt=0,
        tags=ownership_tags(FLEET, "train", node, lid),
    )


def test_reboot_resets_each_instance_once_and_deletes_nothing(
    fake_compute, compute_endpoint: str
) -> None:
    p = _provider(compute_endpoint)
    a = p.provision(_request("prod-train-0001"))
    b = p.provision(_request("prod-train-0002", "us-central1-b"))
    p.reboot([a, b])
    assert fake_compute.count("POST", r"/zones/us-central1-a/instances/prod-train-0001/reset$") == 1
    assert fake_compute.count("POST", r"/zones/us-central1-b/instances/prod-train-0002/reset$") == 1
    assert fake_compute.count("DELETE", r"/instances/") == 0
    assert sorted(i.instance_id for i in p.list_instances(FLEET)) == [
        "prod-train-0001",
        "prod-train-0002",
    ]


def test_a_second_reboot_within_the_hour_is_not_swallowed(
    fake_compute, compute_endpoint: str
) -> None:
    p = _provider(compute_endpoint)
    a = p.provision(_request("prod-train-0001"))
    p.reboot([a])
    p.reboot([a])
    resets = [q for m, path, q in fake_compute.calls if m == "POST" and path.endswith("/reset")]
    assert len(resets) == 2 and resets[0]["requestId"] != resets[1]["requestId"]


def test_reboot_refuses_foreign(fake_compute, compute_endpoint: str) -> None:
    fake_compute.add_instance("us-central1-a", "foreign", {"navarch-fleet": "dev"})
    inst = to_instance(
        "gcp",
        compute_v1.Instance.from_json(
            json.dumps(fake_compute.instances[("us-central1-a", "foreign")]),
            ignore_unknown_fields=True,
        ),
    )
    assert inst is not None
    with pytest.raises(ProviderError, match="refusing"):
        _provider(compute_endpoint).reboot([inst])
    assert fake_compute.count("POST", r"/reset$") == 0

"""The Adopter contract on Compute Engine and Azure, through their real SDKs against the REST
fakes (tests/support/fake_compute.py, fake_arm.py): list_unmanaged returns the running
instances without navarch's tags that the filter selects, and adopt writes the ownership
tags beside the instance's own, in place, refusing one that is already owned."""

from __future__ import annotations

from pathlib import Path

import pytest

from navarch.errors import ProviderError
from navarch.inventory import TAG_FLEET, ownership_tags
from navarch.providers import open_provider
from navarch.providers.base import Adopter, AdoptFilter
from tests.support.fake_arm import SUB
from tests.support.providers import gcp_provider

ML = AdoptFilter(tags=(("team", "ml"),))


def _adopt_all(provider: object, fleet: str) -> list[str]:
    assert isinstance(provider, Adopter)
    found = provider.list_unmanaged(ML)
    for n, inst in enumerate(found, 1):
        node = f"{fleet}-train-{n:04d}"
        adopted = provider.adopt(inst, ownership_tags(fleet, "train", node, "a" * 32))
        assert adopted.fleet == fleet and adopted.node == node and adopted.tag("team") == "ml"
    return [i.instance_id for i in found]


def test_gce_adopt_labels_matching_running_instances_in_place(
    fake_compute, compute_endpoint: str
) -> None:
    fake_compute.add_instance("us-central1-a", "gpu-1", {"team": "ml"})
    fake_compute.add_instance("us-central1-b", "gpu-2", {"team": "ml"})
    fake_compute.add_instance("us-central1-a", "web-1", {"team": "web"})
    fake_compute.add_instance("us-central1-a", "other-fleet", {"team": "ml", TAG_FLEET: "x"})
    created = {k: v["creationTimestamp"] for k, v in fake_compute.instances.items()}
    provider = gcp_provider(compute_endpoint, fleet="prod")

    assert _adopt_all(provider, "prod") == ["gpu-1", "gpu-2"]

    for key in [("us-central1-a", "gpu-1"), ("us-central1-b", "gpu-2")]:
        inst = fake_compute.instances[key]
        assert inst["labels"][TAG_FLEET] == "prod" and inst["labels"]["team"] == "ml"
        assert inst["status"] == "RUNNING" and inst["creationTimestamp"] == created[key]
    assert TAG_FLEET not in fake_compute.instances[("us-central1-a", "web-1")]["labels"]
    assert [i.instance_id for i in provider.list_instances("prod")] == ["gpu-1", "gpu-2"]
    assert provider.list_unmanaged(ML) == []  # type: ignore[attr-defined]


def test_azure_adopt_tags_matching_vms_in_place_and_refuses_an_owned_one(
    fake_arm, arm_endpoint: str
) -> None:
    ours = fake_arm.add_vm("rg", "gpu-1", "eastus-1", {"team": "ml"})
    fake_arm.add_vm("rg", "web-1", "eastus-1", {"team": "web"})
    provider = open_provider(
        "az",
        {
            "type": "azure",
            "subscription_id": SUB,
            "resource_group": "rg",
            "base_url": arm_endpoint,
            "retry_total": 0,
        },
        base_dir=Path("."),
        fleet="prod",
    )

    assert _adopt_all(provider, "prod") == [ours]

    vm = fake_arm.vms[("rg", "gpu-1")]
    assert vm["tags"][TAG_FLEET] == "prod" and vm["tags"]["team"] == "ml"
    assert not [c for c in fake_arm.calls if "restart" in c.path or c.method == "PUT"]
    [owned] = [i for i in provider.list_instances("prod") if i.fleet == "prod"]
    assert isinstance(provider, Adopter)
    with pytest.raises(ProviderError, match="tagged navarch-fleet=prod already"):
        provider.adopt(owned, ownership_tags("prod", "train", "prod-train-0009", "b" * 32))

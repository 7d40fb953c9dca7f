"""The Provider contract (navarch/providers/base.py), run against every provider on its fake.

Each provider in conftest.PROVIDERS (the `cloud` fixture) runs every test here: local on a
temporary directory, aws on moto, gcp on the fake Compute API, lambda on the fake Lambda
Cloud API, azure on the fake ARM API. What a cloud alone does (its request bodies, its
retries, its status mapping) stays in that provider's own tests.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from navarch.errors import CapacityError, ProviderError, TransientError
from navarch.inventory import (
    TAG_FLEET,
    TAG_NODE,
    TAG_POOL,
    TAG_SPEC,
    Instance,
    InstanceHealth,
    InstanceState,
)
from navarch.providers.base import ProvisionRequest
from tests.support.providers import FLEET, Cloud, provision_request


def _request(cloud: Cloud, node: str, zone: str | None = None) -> ProvisionRequest:
    return provision_request(
        node, zone or cloud.zones[0], cloud.instance_type, options=cloud.options
    )


def _fleet_ids(cloud: Cloud) -> set[str]:
    return {i.instance_id for i in cloud.provider.list_instances(FLEET) if i.fleet == FLEET}


def test_list_finds_the_fleet_by_its_tags_and_nothing_else_as_its_own(cloud: Cloud) -> None:
    a = cloud.provider.provision(_request(cloud, "prod-train-0001"))
    b = cloud.provider.provision(_request(cloud, "prod-train-0002", cloud.zones[1]))
    cloud.add_instance(cloud.zones[0], {})  # someone else's machine in the same account
    cloud.add_instance(cloud.zones[1], {TAG_FLEET: "dev"})  # another fleet's
    listed = cloud.reopen().list_instances(FLEET)
    ours = {i.instance_id: i for i in listed if i.fleet == FLEET}
    assert set(ours) == {a.instance_id, b.instance_id}
    for inst, req in (
        (ours[a.instance_id], _request(cloud, "prod-train-0001")),
        (ours[b.instance_id], _request(cloud, "prod-train-0002", cloud.zones[1])),
    ):
        assert dict(inst.tags).items() >= dict(req.tags).items(), inst.tags
        assert (inst.pool, inst.node, inst.launch_id) == (req.pool, req.node, req.launch_id)
        assert (inst.zone, inst.instance_type) == (req.zone, req.instance_type)
        assert inst.launched_at.utcoffset() is not None
    # Foreign instances may be listed (the planner shows them), never as the fleet's.
    assert all(i.fleet != FLEET for i in listed if i.instance_id not in ours)


def test_provision_is_idempotent_on_the_launch_id(cloud: Cloud) -> None:
    request = _request(cloud, "prod-train-0001")
    first = cloud.provider.provision(request)
    # The same launch again, from a later run (a new provider object): no second instance.
    again = cloud.reopen().provision(request)
    assert again.instance_id == first.instance_id
    assert cloud.live() == 1
    assert _fleet_ids(cloud) == {first.instance_id}


def test_terminate_and_terminating_a_gone_instance_is_success(cloud: Cloud) -> None:
    a = cloud.provider.provision(_request(cloud, "prod-train-0001"))
    b = cloud.provider.provision(_request(cloud, "prod-train-0002", cloud.zones[1]))
    cloud.provider.terminate([a])
    assert _fleet_ids(cloud) == {b.instance_id}
    cloud.provider.terminate([a, b])  # a is gone already: still success, and b goes
    assert _fleet_ids(cloud) == set()
    cloud.reopen().terminate([a, b])
    assert cloud.live() == 0


def test_terminate_refuses_an_instance_without_the_fleet_tag(cloud: Cloud) -> None:
    ours = cloud.provider.provision(_request(cloud, "prod-train-0001"))
    tags = {TAG_FLEET: "dev"}
    foreign_id = cloud.add_instance(cloud.zones[0], tags)
    foreign = Instance(
        provider=cloud.provider.name,
        instance_id=foreign_id,
        zone=cloud.zones[0],
        instance_type=cloud.instance_type,
        state=InstanceState.RUNNING,
        launched_at=datetime.now(UTC),
        tags=tuple(sorted(tags.items())),
    )
    with pytest.raises(ProviderError, match="refusing"):
        cloud.provider.terminate([ours, foreign])
    assert cloud.live() == 2  # neither was touched: refused before any call
    assert _fleet_ids(cloud) == {ours.instance_id}


@pytest.mark.parametrize("key", [TAG_FLEET, TAG_POOL, TAG_NODE, TAG_SPEC, "navarch-anything"])
def test_update_tags_refuses_to_write_an_ownership_key(cloud: Cloud, key: str) -> None:
    ours = cloud.provider.provision(_request(cloud, "prod-train-0001"))
    for value in ("prod", ""):  # overwriting and clearing are both refused
        with pytest.raises(ProviderError) as info:
            cloud.provider.update_tags(ours, {"team": "x", key: value})
        assert info.value.code == "OwnershipTag"
        assert key in str(info.value)
    listed = {i.instance_id: i for i in cloud.reopen().list_instances(FLEET)}
    # Still the fleet's own, with every launch tag as it was and no label half-written.
    assert dict(listed[ours.instance_id].tags) == dict(ours.tags)


def test_no_capacity_is_capacity_error_and_the_next_zone_serves(cloud: Cloud) -> None:
    with pytest.raises(CapacityError) as info:
        cloud.provider.provision(_request(cloud, "prod-train-0001", cloud.full_zone))
    assert info.value.scope == "zone"
    assert cloud.live() == 0
    inst = cloud.provider.provision(_request(cloud, "prod-train-0001", cloud.zones[1]))
    assert inst.zone == cloud.zones[1]
    assert _fleet_ids(cloud) == {inst.instance_id}


def test_map_error_maps_every_relied_on_upstream_error(cloud: Cloud) -> None:
    if cloud.map_error is None:
        pytest.skip("no SDK behind this provider, so no upstream errors to map")
    wrong = []
    for case in cloud.errors:
        mapped = cloud.map_error(case.exc)
        scope = getattr(mapped, "scope", None)
        if type(mapped) is not case.expected or (case.scope is not None and scope != case.scope):
            wrong.append(
                f"{case.exc!r} -> {type(mapped).__name__}(scope={scope!r}), "
                f"want {case.expected.__name__}(scope={case.scope!r})"
            )
    assert cloud.errors and not wrong, "\n".join(wrong)


@pytest.mark.parametrize("status", [500, 502, 200])
def test_an_outage_page_where_the_api_answers_is_one_transient_error_line(
    cloud: Cloud, status: int
) -> None:
    if cloud.outage is None:
        pytest.skip("no API behind this provider, so no answer to misread")
    cloud.outage(status)
    with pytest.raises(TransientError) as info:
        cloud.reopen().list_instances(FLEET)
    line = str(info.value)
    # One line that says what came back, quoting no markup of the page.
    assert "\n" not in line and len(line) < 800, line
    assert "not" in line and "<" not in line, line


def test_list_carries_the_clouds_own_impaired_status(cloud: Cloud) -> None:
    assert cloud.impair is not None, "every provider reports the cloud's own view"
    sick = cloud.provider.provision(_request(cloud, "prod-train-0001"))
    well = cloud.provider.provision(_request(cloud, "prod-train-0002"))
    cloud.impair(sick)
    listed = {i.instance_id: i for i in cloud.reopen().list_instances(FLEET)}
    assert listed[sick.instance_id].cloud_status.health is InstanceHealth.IMPAIRED
    assert listed[well.instance_id].cloud_status.health is not InstanceHealth.IMPAIRED


def test_a_provision_request_never_prints_its_user_data() -> None:
    key = "nodekey-5f3a9c"  # user-data carries the node's report-signing key
    request = replace(
        provision_request("prod-train-0001", "z", "t"),
        user_data=f"#cloud-config\nnode_key: {key}\n",
    )
    assert key not in repr(request) and key not in str(request)
    assert key not in repr([request]) and key not in f"{request!r}"
    assert request.user_data.endswith(f"{key}\n")  # still there for the provider

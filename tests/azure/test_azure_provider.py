"""The azure provider against the local ARM fake: list by tags, idempotent provision by
name, spot, customData, terminate with NIC and disk, reboot, tags, and the error table."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

import pytest
from azure.core.exceptions import ClientAuthenticationError, ServiceRequestError

from navarch.errors import (
    AuthError,
    CapacityError,
    ProviderError,
    QuotaError,
    TransientError,
)
from navarch.inventory import CloudEvent, CloudStatus, InstanceHealth, launch_id, ownership_tags
from navarch.providers import open_provider
from navarch.providers.azure import ERROR_CODES, AzureProvider, map_error
from navarch.providers.base import ProvisionRequest
from tests.support.fake_arm import SUB, FakeARM, arm_error

SUBNET = f"/subscriptions/{SUB}/resourceGroups/net/providers/Microsoft.Network/virtualNetworks/v/subnets/gpu"


def provider(endpoint: str, fleet: str = "f") -> AzureProvider:
    p = open_provider(
        "az",
        {
            "type": "azure",
            "subscription_id": SUB,
            "resource_group": "rg",
            "base_url": endpoint,
            "retry_total": 0,
        },
        base_dir=__import__("pathlib").Path("."),
        fleet=fleet,
    )
    assert isinstance(p, AzureProvider)
    return p


def request(
    node: str, zone: str = "eastus-1", *, spot: bool = False, **opts: Any
) -> ProvisionRequest:
    lid = launch_id("f", node, 0)
    return ProvisionRequest(
        fleet="f",
        pool="p",
        node=node,
        zone=zone,
        instance_type="Standard_NC24ads_A100_v4",
        spot=spot,
        launch_id=lid,
        attempt=0,
        tags=ownership_tags("f", "p", node, lid),
        user_data="#cloud-config\n",
        options={"subnet_id": SUBNET, **opts},
    )


def test_provision_is_idempotent_by_name(fake_arm: FakeARM, arm_endpoint: str) -> None:
    p = provider(arm_endpoint)
    a = p.provision(request("f-p-0001"))
    b = p.provision(request("f-p-0001"))
    assert a.instance_id == b.instance_id and a.zone == "eastus-1"
    assert len(fake_arm.vms) == 1 and set(fake_arm.nics) == {"f-p-0001-nic"}
    body = next(c.data for c in fake_arm.calls if c.method == "PUT" and "virtualMachines" in c.path)
    assert base64.b64decode(body["properties"]["osProfile"]["customData"]) == b"#cloud-config\n"
    assert body["zones"] == ["1"]
    assert [i.node for i in p.list_instances("f")] == ["f-p-0001"]


def test_spot_launch(fake_arm: FakeARM, arm_endpoint: str) -> None:
    inst = provider(arm_endpoint).provision(request("f-p-0002", "westus", spot=True, max_price=2.5))
    props = fake_arm.vms[("rg", "f-p-0002")]["properties"]
    assert (props["priority"], props["evictionPolicy"]) == ("Spot", "Delete")
    assert props["billingProfile"]["maxPrice"] == 2.5
    assert inst.spot and inst.zone == "westus"


def test_capacity_error_cleans_its_nic(fake_arm: FakeARM, arm_endpoint: str) -> None:
    fake_arm.no_capacity.add("eastus-1/Standard_NC24ads_A100_v4")
    with pytest.raises(CapacityError) as err:
        provider(arm_endpoint).provision(request("f-p-0003"))
    assert err.value.code == "AllocationFailed" and err.value.scope == "zone"
    assert fake_arm.vms == {} and fake_arm.nics == {}


def test_allocation_failed_later_is_capacity_and_leaves_nothing(
    fake_arm: FakeARM, arm_endpoint: str
) -> None:
    # ARM accepts the PUT (201) and fails the operation afterwards, as it does for most
    # allocation failures; the failed VM stays behind in provisioningState Failed.
    fake_arm.fails_later.add("eastus-1/Standard_NC24ads_A100_v4")
    p = provider(arm_endpoint)
    with pytest.raises(CapacityError) as err:
        p.provision(request("f-p-0007"))
    assert err.value.code == "AllocationFailed" and err.value.scope == "zone"
    assert fake_arm.count("GET", "/operations/") == 2  # the poller saw InProgress, then Failed
    # The failed VM and its NIC are gone, so the node can launch in the next zone (ARM
    # refuses to move an existing VM to another zone).
    assert fake_arm.vms == {} and fake_arm.nics == {}
    inst = p.provision(request("f-p-0007", "eastus-2"))
    assert inst.zone == "eastus-2" and [i.node for i in p.list_instances("f")] == ["f-p-0007"]


def test_terminate_takes_vm_nic_and_disk_and_gone_is_success(
    fake_arm: FakeARM, arm_endpoint: str
) -> None:
    p = provider(arm_endpoint)
    inst = p.provision(request("f-p-0004"))
    p.terminate([inst])
    p.terminate([inst])
    assert fake_arm.vms == {} and fake_arm.nics == {} and fake_arm.disks == set()


def test_foreign_vms_are_listed_never_touched(fake_arm: FakeARM, arm_endpoint: str) -> None:
    fake_arm.add_foreign("rg", "someone-elses")
    p = provider(arm_endpoint)
    (foreign,) = p.list_instances("f")
    assert foreign.fleet is None
    for act in (
        lambda: p.terminate([foreign]),
        lambda: p.reboot([foreign]),
        lambda: p.update_tags(foreign, {"a": "b"}),
    ):
        with pytest.raises(ProviderError, match="refusing"):
            act()
    assert ("rg", "someone-elses") in fake_arm.vms


def test_reboot_and_update_tags(fake_arm: FakeARM, arm_endpoint: str) -> None:
    p = provider(arm_endpoint)
    inst = p.provision(request("f-p-0005"))
    p.reboot([inst])
    p.update_tags(inst, {"team": "ml"})
    assert fake_arm.restarts == ["f-p-0005"]
    assert fake_arm.vms[("rg", "f-p-0005")]["tags"]["team"] == "ml"
    assert fake_arm.vms[("rg", "f-p-0005")]["tags"]["navarch-node"] == "f-p-0005"


def test_bad_token_is_auth_error(
    fake_arm: FakeARM, arm_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NAVARCH_AZURE_TOKEN", "wrong")
    with pytest.raises(AuthError):
        provider(arm_endpoint).list_instances("f")


def test_throttling_is_retried_by_the_sdk_policy(fake_arm: FakeARM, arm_endpoint: str) -> None:
    p = open_provider(
        "az",
        {
            "type": "azure",
            "subscription_id": SUB,
            "resource_group": "rg",
            "base_url": arm_endpoint,
            "retry_total": 2,
        },
        base_dir=__import__("pathlib").Path("."),
        fleet="f",
    )
    fake_arm.fail("GET", "virtualMachines$", 429, "TooManyRequests", times=2)
    assert p.list_instances("f") == []
    assert fake_arm.count("GET", "virtualMachines$") == 3


#: Every code in ERROR_CODES and what it becomes (the table is the contract).
EXPECTED = {
    "SkuNotAvailable": CapacityError,
    "AllocationFailed": CapacityError,
    "ZonalAllocationFailed": CapacityError,
    "OverconstrainedAllocationRequest": CapacityError,
    "OverconstrainedZonalAllocationRequest": CapacityError,
    "QuotaExceeded": QuotaError,
    "OperationNotAllowed": QuotaError,
    "AuthorizationFailed": AuthError,
    "AuthenticationFailed": AuthError,
    "InvalidAuthenticationToken": AuthError,
    "ExpiredAuthenticationToken": AuthError,
    "LinkedAuthorizationFailed": AuthError,
    "TooManyRequests": TransientError,
    "RetryableError": TransientError,
    "InternalServerError": TransientError,
    "ServiceUnavailable": TransientError,
}


def test_the_table_lists_every_code() -> None:
    assert EXPECTED == ERROR_CODES


@pytest.mark.parametrize("code", sorted(EXPECTED))
def test_each_code_maps(code: str) -> None:
    message = (
        "Operation results in exceeding quota limits of Core"
        if code == "OperationNotAllowed"
        else "m"
    )
    got = map_error(arm_error(409, code, message), zone="eastus-1")
    assert type(got) is EXPECTED[code] and got.code == code


def test_unlisted_shapes() -> None:
    assert type(map_error(arm_error(409, "OperationNotAllowed", "not allowed"))) is ProviderError
    assert type(map_error(arm_error(503, "Whatever"))) is TransientError
    assert type(map_error(arm_error(403, "Whatever"))) is AuthError
    assert type(map_error(ServiceRequestError("refused"))) is TransientError
    assert type(map_error(ClientAuthenticationError("no creds"))) is AuthError
    assert map_error(arm_error(409, "AllocationFailed"), zone="eastus").scope == "region"


def test_nodes_get_the_pools_managed_identity(fake_arm: FakeARM, arm_endpoint: str) -> None:
    identity = (
        "/subscriptions/x/resourceGroups/r/providers/Microsoft.ManagedIdentity/"
        "userAssignedIdentities/agent"
    )
    provider(arm_endpoint).provision(request("f-p-0006", identity_id=identity))
    body = next(c.data for c in fake_arm.calls if c.method == "PUT" and "virtualMachines" in c.path)
    assert body["identity"] == {"type": "UserAssigned", "userAssignedIdentities": {identity: {}}}


def test_list_carries_azures_instance_view_in_one_call(
    fake_arm: FakeARM, arm_endpoint: str
) -> None:
    p = provider(arm_endpoint)
    for n in range(1, 5):
        p.provision(request(f"f-p-000{n}"))
    fake_arm.set_instance_view(
        "rg",
        "f-p-0001",
        {
            "statuses": [{"code": "PowerState/running"}],
            "vmHealth": {"status": {"code": "HealthState/unhealthy"}},
        },
    )
    fake_arm.set_instance_view(
        "rg",
        "f-p-0002",
        {"statuses": [{"code": "PowerState/deallocated", "time": "2026-03-02T11:50:00Z"}]},
    )
    fake_arm.set_instance_view(
        "rg",
        "f-p-0003",
        {
            "statuses": [{"code": "PowerState/running"}],
            "maintenanceRedeployStatus": {
                "isCustomerInitiatedMaintenanceAllowed": True,
                "maintenanceWindowStartTime": "2026-03-05T00:00:00Z",
            },
        },
    )
    lists = len([c for c in fake_arm.calls if c.method == "GET"])
    status = {i.node: i.cloud_status for i in p.list_instances("f")}
    assert len([c for c in fake_arm.calls if c.method == "GET"]) == lists + 1

    assert status["f-p-0001"].health is InstanceHealth.IMPAIRED
    assert status["f-p-0001"].detail == "VM health unhealthy"
    assert status["f-p-0002"].health is InstanceHealth.IMPAIRED
    assert status["f-p-0002"].since == datetime(2026, 3, 2, 11, 50, tzinfo=UTC)
    assert (status["f-p-0003"].health, status["f-p-0003"].event) == (
        InstanceHealth.OK,
        CloudEvent.SYSTEM_MAINTENANCE,
    )
    assert status["f-p-0003"].event_deadline == datetime(2026, 3, 5, tzinfo=UTC)
    assert status["f-p-0004"] == CloudStatus(InstanceHealth.OK)


def test_a_vm_on_a_dedicated_host_carries_its_host_id(fake_arm: FakeARM, arm_endpoint: str) -> None:
    p = provider(arm_endpoint)
    p.provision(request("f-p-0001"))
    p.provision(request("f-p-0002"))
    host = "/subscriptions/x/resourceGroups/rg/providers/Microsoft.Compute/hostGroups/hg/hosts/h1"
    fake_arm.set_instance_view(
        "rg", "f-p-0001", {"statuses": [{"code": "PowerState/running"}], "assignedHost": host}
    )
    hosts = {i.node: i.host_id for i in p.list_instances("f")}
    assert hosts == {"f-p-0001": host, "f-p-0002": None}

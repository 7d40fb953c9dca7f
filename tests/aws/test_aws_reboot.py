"""AWS provider reboot against moto: RebootInstances, never TerminateInstances."""

from __future__ import annotations

from pathlib import Path

import boto3
import pytest

from navarch.errors import ProviderError
from navarch.inventory import launch_id, ownership_tags
from navarch.providers import aws as awsmod
from navarch.providers.base import ProvisionRequest

AMI = "ami-12c6146b"
FLEET = "prod"


@pytest.fixture
def provider(moto) -> awsmod.AwsProvider:
    return awsmod.create(
        "aws", {"type": "aws", "region": "us-east-1"}, base_dir=Path("."), fleet=FLEET
    )


def _request(node: str) -> ProvisionRequest:
    lid = launch_id(FLEET, node, 0)
    return ProvisionRequest(
        fleet=FLEET,
        pool="train",
        node=node,
        zone="us-east-1b",
        instance_type="p5.48xlarge",
        spot=False,
        launch_id=lid,
        attempt=0,
        tags=ownership_tags(FLEET, "train", node, lid),
        options={"ami": AMI},
    )


def _record(provider: awsmod.AwsProvider, operation: str) -> list[list[str]]:
    calls: list[list[str]] = []
    provider.client("us-east-1").meta.events.register(
        f"before-call.ec2.{operation}",
        lambda params, **kw: calls.append(
            sorted(v for k, v in params["body"].items() if k.startswith("InstanceId"))
        ),
    )
    return calls


def test_reboot_calls_reboot_instances_once_and_never_terminates(provider) -> None:
    a, b = (
        provider.provision(_request("prod-train-0001")),
        provider.provision(_request("prod-train-0002")),
    )
    reboots, terminates = (
        _record(provider, "RebootInstances"),
        _record(provider, "TerminateInstances"),
    )
    provider.reboot([a, b])
    assert reboots == [sorted([a.instance_id, b.instance_id])]
    assert terminates == []
    ec2 = boto3.client("ec2")
    states = {
        i["InstanceId"]: i["State"]["Name"]
        for r in ec2.describe_instances()["Reservations"]
        for i in r["Instances"]
    }
    assert states == {a.instance_id: "running", b.instance_id: "running"}


def test_reboot_refuses_foreign_before_any_call(provider) -> None:
    ec2 = boto3.client("ec2")
    foreign_id = ec2.run_instances(ImageId=AMI, MinCount=1, MaxCount=1)["Instances"][0][
        "InstanceId"
    ]
    foreign = awsmod.to_instance(
        "aws", ec2.describe_instances(InstanceIds=[foreign_id])["Reservations"][0]["Instances"][0]
    )
    ours = provider.provision(_request("prod-train-0001"))
    reboots = _record(provider, "RebootInstances")
    with pytest.raises(ProviderError) as info:
        provider.reboot([ours, foreign])
    assert info.value.code == "ForeignInstance" and reboots == []

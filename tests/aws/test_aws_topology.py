"""EC2 instance topology through the real SDK against moto, whose missing
DescribeInstanceTopology a local stand-in answers in the API model's shapes
(tests/support/moto_server.py); the request parameters are asserted as sent."""

from __future__ import annotations

import logging
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError

from navarch.inventory import TAG_FLEET
from navarch.providers import aws as awsmod

AMI = "ami-12c6146b"
FLEET = "prod"


@pytest.fixture
def provider(moto) -> awsmod.AwsProvider:
    return awsmod.create(
        "aws", {"type": "aws", "region": "us-east-1"}, base_dir=Path("."), fleet=FLEET
    )


def _run(instance_type: str, count: int = 1) -> list[str]:
    resp = boto3.client("ec2").run_instances(
        ImageId=AMI,
        InstanceType=instance_type,
        MinCount=count,
        MaxCount=count,
        Placement={"AvailabilityZone": "us-east-1b"},
        TagSpecifications=[
            {"ResourceType": "instance", "Tags": [{"Key": TAG_FLEET, "Value": FLEET}]}
        ],
    )
    return sorted(i["InstanceId"] for i in resp["Instances"])


def test_listed_p5_instances_carry_their_network_nodes(moto, provider) -> None:
    (iid,) = _run("p5.48xlarge")
    moto.topology[iid] = ["nn-spine", "nn-block-7", "nn-leaf-42"]
    (inst,) = provider.list_instances(FLEET)
    assert inst.topology == ("nn-spine", "nn-block-7", "nn-leaf-42")
    assert inst.block == "nn-spine/nn-block-7"
    assert moto.topology_calls == [{"InstanceIds": [iid]}]


def test_types_without_a_topology_are_never_asked(moto, provider) -> None:
    _run("g5.48xlarge")
    (inst,) = provider.list_instances(FLEET)
    assert inst.topology == ()
    assert moto.topology_calls == []


def test_many_instances_are_asked_in_batches_of_one_hundred(moto, provider) -> None:
    ids = _run("p4d.24xlarge", 150)
    listed = provider.list_instances(FLEET)
    assert len(listed) == 150 and all(len(i.topology) == 3 for i in listed)
    assert moto.topology_calls == [{"InstanceIds": ids[:100]}, {"InstanceIds": ids[100:]}]


def test_the_stand_in_refuses_what_the_api_refuses(moto) -> None:
    (iid,) = _run("p5.48xlarge")
    ec2 = boto3.client("ec2")
    with pytest.raises(ClientError, match="InvalidParameterCombination"):
        ec2.describe_instance_topology(InstanceIds=[iid], MaxResults=10)
    with pytest.raises(ClientError, match="InvalidParameterValue"):
        ec2.describe_instance_topology(MaxResults=101)
    with pytest.raises(ClientError, match="InvalidInstanceID.NotFound"):
        ec2.describe_instance_topology(InstanceIds=["i-0123456789abcdef0"])


def test_an_outage_page_for_the_topology_lookup_leaves_it_unknown_with_one_warning_line(
    moto, provider, caplog: pytest.LogCaptureFixture
) -> None:
    p5, g5 = _run("p5.48xlarge")[0], _run("g5.48xlarge")[0]
    moto.pages["DescribeInstanceTopology"] = 500
    with caplog.at_level(logging.WARNING, logger="navarch"):
        listed = {i.instance_id: i for i in provider.list_instances(FLEET)}
    assert set(listed) == {p5, g5} and listed[p5].topology == ()
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.startswith("ec2:DescribeInstanceTopology failed in us-east-1: ")
    assert "topology unknown this run" in warning and "\n" not in warning
    assert "an HTML page titled '502 Bad Gateway'" in warning  # the page, not its markup


def test_a_denied_topology_lookup_lists_every_instance_and_names_the_permission(
    moto, provider, caplog: pytest.LogCaptureFixture
) -> None:
    (iid,) = _run("p5.48xlarge")
    moto.denied.add("DescribeInstanceTopology")
    with caplog.at_level(logging.WARNING, logger="navarch"):
        (inst,) = provider.list_instances(FLEET)
    assert inst.instance_id == iid and inst.topology == ()
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        "ec2:DescribeInstanceTopology denied in us-east-1: topology unknown; "
        "grant it for block-aware placement"
    ]

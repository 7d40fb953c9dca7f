"""EC2 placement groups, EFA and capacity reservations, asserted at the HTTP boundary.

The provider runs against the moto server; the EC2 calls moto lacks (placement groups,
capacity reservations) and the RunInstances fields it ignores are answered and recorded
by tests/support/ec2_standin.py inside that server, from the requests moto parsed with
botocore's EC2 model.
"""

from __future__ import annotations

import logging
from pathlib import Path

import boto3
import pytest

from navarch.errors import CapacityError, ConfigError
from navarch.inventory import launch_id, ownership_tags
from navarch.providers import aws as awsmod
from navarch.providers.base import ProvisionRequest
from tests.aws.test_e2e import navarch
from tests.support.ec2_standin import ec2_standin  # noqa: F401 - a fixture

AMI = "ami-12c6146b"
FLEET = "prod"
SECRET = "0123456789abcdef0123456789abcdef"
BUCKET = "navarch-placement"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def provider(moto) -> awsmod.AwsProvider:
    return awsmod.create(
        "aws", {"type": "aws", "region": "us-east-1"}, base_dir=Path("."), fleet=FLEET
    )


@pytest.fixture
def subnet(moto) -> str:
    ec2 = boto3.client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.20.0.0/16")["Vpc"]["VpcId"]
    return ec2.create_subnet(VpcId=vpc, CidrBlock="10.20.1.0/24", AvailabilityZone="us-east-1a")[
        "Subnet"
    ]["SubnetId"]


def request(node: str, options: dict, *, instance_type: str = "p5.48xlarge") -> ProvisionRequest:
    lid = launch_id(FLEET, node, 0)
    return ProvisionRequest(
        fleet=FLEET,
        pool="train",
        node=node,
        zone="us-east-1a",
        instance_type=instance_type,
        spot=False,
        launch_id=lid,
        attempt=0,
        tags=ownership_tags(FLEET, "train", node, lid),
        options={"ami": AMI, **options},
    )


def test_a_pool_placement_group_is_created_as_a_cluster_group_once_and_every_launch_joins_it(
    provider, ec2_standin
) -> None:
    provider.provision(request("prod-train-0001", {"placement_group": "pg-train"}))
    provider.provision(request("prod-train-0002", {"placement_group": "pg-train"}))
    assert ec2_standin.requests("DescribePlacementGroups") == [{"GroupNames": ["pg-train"]}]
    assert ec2_standin.requests("CreatePlacementGroup") == [
        {
            "GroupName": "pg-train",
            "Strategy": "cluster",
            "TagSpecifications": [
                {
                    "ResourceType": "placement-group",
                    "Tags": [{"Key": "navarch-fleet", "Value": FLEET}],
                }
            ],
        }
    ]
    runs = ec2_standin.requests("RunInstances")
    assert [r["Placement"] for r in runs] == [
        {"AvailabilityZone": "us-east-1a", "GroupName": "pg-train"}
    ] * 2


def test_an_existing_placement_group_is_used_as_it_is(provider, ec2_standin) -> None:
    boto3.client("ec2").create_placement_group(GroupName="theirs", Strategy="cluster")
    provider.provision(request("prod-train-0001", {"placement_group": "theirs"}))
    assert len(ec2_standin.requests("CreatePlacementGroup")) == 1  # theirs, not navarch's
    assert ec2_standin.requests("RunInstances")[0]["Placement"]["GroupName"] == "theirs"


def test_efa_launches_one_interface_per_network_card_the_type_allows(
    provider, ec2_standin, subnet
) -> None:
    types = boto3.client("ec2").describe_instance_types(InstanceTypes=["p5.48xlarge"])
    net = types["InstanceTypes"][0]["NetworkInfo"]
    expected = min(net["EfaInfo"]["MaximumEfaInterfaces"], net["MaximumNetworkCards"])
    assert expected > 1
    opts = {"efa": True, "subnets": {"us-east-1a": subnet}, "security_group_ids": ["sg-0abc1234"]}
    provider.provision(request("prod-train-0001", opts))
    run = ec2_standin.requests("RunInstances")[0]
    assert "SubnetId" not in run and "SecurityGroupIds" not in run
    interfaces = run["NetworkInterfaces"]
    assert len(interfaces) == expected
    assert interfaces[0] == {
        "NetworkCardIndex": 0,
        "DeviceIndex": 0,
        "InterfaceType": "efa",
        "SubnetId": subnet,
        "DeleteOnTermination": True,
        "Groups": ["sg-0abc1234"],
    }
    assert [i["InterfaceType"] for i in interfaces[1:]] == ["efa-only"] * (expected - 1)
    assert [i["NetworkCardIndex"] for i in interfaces] == list(range(expected))


def test_efa_without_a_subnet_is_a_config_error_before_any_launch(provider, ec2_standin) -> None:
    with pytest.raises(ConfigError, match="no subnet"):
        provider.provision(request("prod-train-0001", {"efa": True}))
    assert ec2_standin.requests("RunInstances") == []


def test_a_full_placement_group_waits_by_default_and_says_so(provider, ec2_standin) -> None:
    ec2_standin.groups[("us-east-1", "pg-full")] = {"GroupName": "pg-full", "Strategy": "cluster"}
    ec2_standin.full.add("pg-full")
    with pytest.raises(CapacityError, match="placement group pg-full has no room") as err:
        provider.provision(request("prod-train-0001", {"placement_group": "pg-full"}))
    assert err.value.code == "InsufficientInstanceCapacity"
    assert all(
        r["Placement"]["GroupName"] == "pg-full" for r in ec2_standin.requests("RunInstances")
    )


def test_a_full_placement_group_with_fallback_outside_launches_beside_it_with_a_warning(
    provider, ec2_standin, caplog
) -> None:
    ec2_standin.groups[("us-east-1", "pg-full")] = {"GroupName": "pg-full", "Strategy": "cluster"}
    ec2_standin.full.add("pg-full")
    opts = {"placement_group": "pg-full", "placement_fallback": "outside"}
    with caplog.at_level(logging.WARNING, logger="navarch.providers.aws"):
        inst = provider.provision(request("prod-train-0001", opts))
    assert inst.node == "prod-train-0001"
    last = ec2_standin.requests("RunInstances")[-1]
    assert last["Placement"] == {"AvailabilityZone": "us-east-1a"}
    assert last["ClientToken"] == launch_id(FLEET, "prod-train-0001", 0) + "-outside"
    assert "placement group pg-full has no room" in caplog.text


@pytest.mark.parametrize(
    ("reservation", "spec"),
    [
        (
            "cr-0123456789abcdef0",
            {"CapacityReservationTarget": {"CapacityReservationId": "cr-0123456789abcdef0"}},
        ),
        (
            "arn:aws:resource-groups:us-east-1:111122223333:group/train-crs",
            {
                "CapacityReservationTarget": {
                    "CapacityReservationResourceGroupArn": "arn:aws:resource-groups:us-east-1:111122223333:group/train-crs"
                }
            },
        ),
        ("open", {"CapacityReservationPreference": "open"}),
        ("none", {"CapacityReservationPreference": "none"}),
    ],
)
def test_a_capacity_reservation_is_named_in_the_launch(
    provider, ec2_standin, reservation, spec
) -> None:
    provider.provision(request("prod-train-0001", {"capacity_reservation": reservation}))
    run = ec2_standin.requests("RunInstances")[0]
    assert run["CapacityReservationSpecification"] == spec
    assert "InstanceMarketOptions" not in run


def test_a_capacity_block_launch_names_its_block_and_market(provider, ec2_standin) -> None:
    opts = {"capacity_reservation": "cr-0123456789abcdef0", "market": "capacity-block"}
    provider.provision(request("prod-train-0001", opts))
    run = ec2_standin.requests("RunInstances")[0]
    assert run["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert run["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": "cr-0123456789abcdef0"}
    }


def test_a_capacity_block_without_its_reservation_id_is_a_config_error(
    provider, ec2_standin
) -> None:
    with pytest.raises(ConfigError, match="capacity_reservation"):
        provider.provision(request("prod-train-0001", {"market": "capacity-block"}))


def _fleet(tmp_path: Path) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(f"""\
fleet: {FLEET}
store: s3://{BUCKET}/navarch
secret: {{env: NAVARCH_FLEET_SECRET}}
providers:
  ec2: {{type: aws, region: us-east-1}}
pools:
  train:
    provider: ec2
    instance_types: [p5.48xlarge]
    gpus_per_node: 8
    zones: [us-east-1a]
    nodes: {{min: 0, target: 2, max: 3}}
    health: {{boot_timeout: 1h}}
    aws:
      ami: {AMI}
      placement_group: pg-train
      capacity_reservation: cr-0123456789abcdef0
""")
    return path


def test_a_replacement_launches_into_the_same_placement_group_and_reservation(
    moto, ec2_standin, tmp_path, monkeypatch
) -> None:
    import os

    monkeypatch.setenv("NAVARCH_FLEET_SECRET", SECRET)
    boto3.client("s3").create_bucket(Bucket=BUCKET)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NAVARCH_")}
    env.update(NAVARCH_FLEET_SECRET=SECRET, PYTHONPATH=str(ROOT))
    fleet = _fleet(tmp_path)
    run = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    run = navarch(
        ["apply", str(fleet), "--auto-approve", "--replace", f"{FLEET}-train-0001"], env, tmp_path
    )
    assert run.returncode == 0, run.stdout + run.stderr
    launches = ec2_standin.requests("RunInstances")
    assert len(launches) == 3  # two nodes, then the replacement of prod-train-0001
    replacement = launches[-1]
    tags = {t["Key"]: t["Value"] for t in replacement["TagSpecifications"][0]["Tags"]}
    assert tags["navarch-node"] == f"{FLEET}-train-0003"
    assert replacement["Placement"] == {"AvailabilityZone": "us-east-1a", "GroupName": "pg-train"}
    assert replacement["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": "cr-0123456789abcdef0"}
    }
    assert len(ec2_standin.requests("CreatePlacementGroup")) == 1


def test_a_capacity_blocks_window_is_read_from_describe_capacity_reservations(
    provider, ec2_standin
) -> None:
    from datetime import UTC, datetime

    start = datetime(2026, 12, 1, 11, 30, tzinfo=UTC)
    end = datetime(2026, 12, 3, 11, 30, tzinfo=UTC)
    ec2_standin.reservation(
        "cr-0123456789abcdef0",
        instance_type="p5.48xlarge",
        zone="us-east-1a",
        total=4,
        available=1,
        start=start,
        end=end,
        kind="capacity-block",
        state="scheduled",
    )
    (block,) = provider.list_reservations(["cr-0123456789abcdef0", "cr-0000000000000000f"])
    assert ec2_standin.requests("DescribeCapacityReservations") == [
        {"CapacityReservationIds": ["cr-0123456789abcdef0"]},
        {"CapacityReservationIds": ["cr-0000000000000000f"]},
    ]
    assert (block.start, block.end, block.total, block.running) == (start, end, 4, 3)
    assert block.capacity_block and block.zone == "us-east-1a"

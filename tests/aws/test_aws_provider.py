"""The AWS provider against a real EC2 endpoint (moto server), faults injected by hooks."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from pathlib import Path

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import (
    NoCredentialsError,
)

from navarch.errors import (
    AuthError,
    ConfigError,
    PlacementError,
    QuotaError,
    TransientError,
)
from navarch.fleet.schemas import validator_for
from navarch.inventory import (
    CloudEvent,
    CloudStatus,
    InstanceHealth,
    InstanceState,
    launch_id,
    ownership_tags,
)
from navarch.providers import aws as awsmod
from navarch.providers import aws_errors, open_provider
from navarch.providers.base import ProvisionRequest
from tests.contracts.error_tables import AWS_RELIED_ON
from tests.support.moto_server import client_error

AMI = "ami-12c6146b"
FLEET = "prod"


def fault(code: str, status: int = 500):
    """A before-call handler answering with a synthetic EC2 error (no request sent)."""

    def handler(**kwargs):
        return (
            AWSResponse(url="", status_code=status, headers={}, raw=None),
            {
                "Error": {"Code": code, "Message": f"injected {code}"},
                "ResponseMetadata": {"HTTPStatusCode": status},
            },
        )

    return handler


@pytest.fixture
def provider(moto) -> awsmod.AwsProvider:
    return awsmod.create(
        "aws",
        {"type": "aws", "region": "us-east-1", "regions": ["us-west-2"]},
        base_dir=Path("."),
        fleet=FLEET,
    )


@pytest.fixture
def subnet(moto) -> str:
    ec2 = boto3.client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.10.0.0/16")["Vpc"]["VpcId"]
    return ec2.create_subnet(VpcId=vpc, CidrBlock="10.10.1.0/24", AvailabilityZone="us-east-1b")[
        "Subnet"
    ]["SubnetId"]


def request(
    node: str = "prod-train-0000",
    *,
    zone: str = "us-east-1b",
    spot: bool = False,
    attempt: int = 0,
    options: dict | None = None,
    pool: str = "train",
) -> ProvisionRequest:
    lid = launch_id(FLEET, node, attempt)
    tags = ownership_tags(FLEET, pool, node, lid) | {"team": "research"}
    return ProvisionRequest(
        fleet=FLEET,
        pool=pool,
        node=node,
        zone=zone,
        instance_type="p5.48xlarge",
        spot=spot,
        launch_id=lid,
        attempt=attempt,
        tags=tags,
        user_data="#cloud-config\nruncmd: [true]\n",
        options=options if options is not None else {"ami": AMI},
    )


def describe(instance_id: str, region: str = "us-east-1") -> dict:
    ec2 = boto3.client("ec2", region_name=region)
    return ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]


def all_instances(region: str = "us-east-1") -> list[dict]:
    ec2 = boto3.client("ec2", region_name=region)
    return [i for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]]


def test_provision_sets_tags_user_data_imdsv2_subnet_and_volume(provider, subnet) -> None:
    opts = {
        "ami": AMI,
        "subnets": {"us-east-1b": subnet},
        "root_volume_gb": 200,
        "root_device_name": "/dev/sda1",
        "key_name": "ops",
    }
    boto3.client("ec2").create_key_pair(KeyName="ops")
    req = request(options=opts)
    inst = provider.provision(req)

    assert inst.zone == "us-east-1b" and inst.instance_type == "p5.48xlarge"
    assert inst.state in (InstanceState.PENDING, InstanceState.RUNNING)
    assert (inst.fleet, inst.pool, inst.node, inst.launch_id) == (
        FLEET,
        "train",
        "prod-train-0000",
        req.launch_id,
    )
    assert inst.tags == tuple(sorted(inst.tags)) and ("team", "research") in inst.tags
    assert inst.spot is False and inst.address
    assert inst.launched_at.tzinfo is not None and inst.launched_at.utcoffset().total_seconds() == 0

    raw = describe(inst.instance_id)
    tags = {t["Key"]: t["Value"] for t in raw["Tags"]}
    assert tags == dict(req.tags) | {"Name": "prod-train-0000"}
    assert raw["MetadataOptions"]["HttpTokens"] == "required"
    assert raw["SubnetId"] == subnet and raw["KeyName"] == "ops"
    assert raw["ClientToken"] == req.launch_id
    attr = boto3.client("ec2").describe_instance_attribute(
        InstanceId=inst.instance_id, Attribute="userData"
    )
    assert base64.b64decode(attr["UserData"]["Value"]).decode() == req.user_data
    volumes = boto3.client("ec2").describe_volumes(
        Filters=[{"Name": "attachment.instance-id", "Values": [inst.instance_id]}]
    )["Volumes"]
    assert [v["Size"] for v in volumes] == [200]
    assert {t["Key"]: t["Value"] for t in volumes[0]["Tags"]} == tags


def test_provision_spot(provider) -> None:
    inst = provider.provision(request(spot=True, options={"ami": AMI, "spot_max_price": "12.5"}))
    assert inst.spot is True
    assert describe(inst.instance_id)["InstanceLifecycle"] == "spot"
    assert provider.list_instances(FLEET)[0].spot is True


def test_next_attempt_of_a_node_is_a_new_launch(provider) -> None:
    # The same launch id twice is one instance (tests/contracts); a new attempt is not.
    first = provider.provision(request())
    other = provider.provision(request(attempt=1))
    assert other.instance_id != first.instance_id
    assert len(all_instances()) == 2


def test_launch_killed_after_run_instances_is_found(provider) -> None:
    # What a run killed right after RunInstances leaves behind: the instance, no state.
    req = request()
    boto3.client("ec2").run_instances(**awsmod.run_instances_params(req))
    inst = provider.provision(req)
    assert inst.launch_id == req.launch_id
    assert len(all_instances()) == 1


def test_terminated_launch_is_not_returned(provider) -> None:
    first = provider.provision(request())
    provider.terminate([first])
    second = provider.provision(request())
    assert second.instance_id != first.instance_id


def test_list_instances_filters_by_fleet_and_state(provider) -> None:
    ec2 = boto3.client("ec2")
    ours = provider.provision(request("prod-train-0000"))
    west = provider.provision(request("prod-train-0001", zone="us-west-2a"))
    gone = provider.provision(request("prod-train-0002"))
    stopped = provider.provision(request("prod-train-0003"))
    provider.terminate([gone])
    ec2.stop_instances(InstanceIds=[stopped.instance_id])
    foreign = ec2.run_instances(ImageId=AMI, MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    other_fleet = ec2.run_instances(
        ImageId=AMI,
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[
            {
                "ResourceType": "instance",
                "Tags": [
                    {"Key": "navarch-fleet", "Value": "staging"},
                    {"Key": "navarch-pool", "Value": "train"},
                ],
            }
        ],
    )["Instances"][0]["InstanceId"]

    listed = provider.list_instances(FLEET)
    ids = [i.instance_id for i in listed]
    assert ids == sorted(ids)
    assert set(ids) == {ours.instance_id, west.instance_id, stopped.instance_id}
    assert foreign not in ids and other_fleet not in ids
    by_id = {i.instance_id: i for i in listed}
    assert by_id[west.instance_id].zone == "us-west-2a"
    assert by_id[stopped.instance_id].state in (InstanceState.STOPPING, InstanceState.STOPPED)
    assert all(i.provider == "aws" and i.launched_at.tzinfo == UTC for i in listed)
    assert all(i.launched_at <= datetime.now(UTC) for i in listed)
    assert provider.list_instances("staging")[0].instance_id == other_fleet


def test_list_paginates(provider, monkeypatch) -> None:
    for n in range(7):
        provider.provision(request(f"prod-train-{n:04d}"))
    monkeypatch.setattr(awsmod, "DESCRIBE_PAGE_SIZE", 5)
    pages: list[int] = []
    provider.client("us-east-1").meta.events.register(
        "before-call.ec2.DescribeInstances", lambda **kw: pages.append(1)
    )
    assert len(provider.list_instances(FLEET)) == 7
    assert len(pages) == 2


def test_terminate_batches_and_already_gone_is_success(provider, monkeypatch) -> None:
    monkeypatch.setattr(awsmod, "TERMINATE_BATCH", 2)
    insts = [provider.provision(request(f"prod-train-{n:04d}")) for n in range(5)]
    calls: list[list[str]] = []
    provider.client("us-east-1").meta.events.register(
        "before-call.ec2.TerminateInstances",
        lambda params, **kw: calls.append(
            sorted(v for k, v in params["body"].items() if k.startswith("InstanceId"))
        ),
    )
    provider.terminate(insts)
    assert [len(c) for c in calls] == [2, 2, 1]
    assert provider.list_instances(FLEET) == []
    # Again: every id already terminated (or unknown to EC2) is success.
    provider.terminate(insts)
    ghost = awsmod.to_instance(
        "aws",
        describe(insts[0].instance_id)
        | {"InstanceId": "i-0123456789abcdef0", "State": {"Name": "running"}},
    )
    provider.terminate([ghost])


def test_terminate_unknown_id_in_batch_still_terminates_others(provider) -> None:
    live = provider.provision(request("prod-train-0000"))
    ghost = awsmod.to_instance(
        "aws", describe(live.instance_id) | {"InstanceId": "i-0123456789abcdef0"}
    )
    provider.terminate([ghost, live])
    assert describe(live.instance_id)["State"]["Name"] in ("shutting-down", "terminated")


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("VcpuLimitExceeded", 400, QuotaError),
        ("RequestLimitExceeded", 503, TransientError),
        ("UnauthorizedOperation", 403, AuthError),
        ("Unsupported", 400, PlacementError),
    ],
)
def test_injected_run_instances_errors_are_mapped(provider, code, status, expected) -> None:
    provider.client("us-east-1", run=True).meta.events.register(
        "before-call.ec2.RunInstances", fault(code, status)
    )
    with pytest.raises(expected) as info:
        provider.provision(request())
    assert info.value.code == code
    assert all_instances() == []


def test_zone_outside_served_regions_is_config_error(provider) -> None:
    with pytest.raises(ConfigError):
        provider.provision(request(zone="eu-west-1a"))


def test_missing_ami_is_config_error(provider) -> None:
    with pytest.raises(ConfigError) as info:
        provider.provision(request(options={}))
    assert info.value.key_path == "pools.train.aws.ami"


def test_no_credentials_is_auth_error(moto, monkeypatch) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    prov = awsmod.create(
        "aws", {"type": "aws", "region": "us-east-1"}, base_dir=Path("."), fleet=FLEET
    )
    with pytest.raises(AuthError) as info:
        prov.list_instances(FLEET)
    assert isinstance(info.value.__cause__, NoCredentialsError)


def test_create_defaults_region_from_environment(moto) -> None:
    prov = open_provider("cloud", {"type": "aws"}, base_dir=Path("."), fleet=FLEET)
    assert isinstance(prov, awsmod.AwsProvider)
    assert prov.settings.regions == ("us-east-1",) and prov.name == "cloud"


def test_region_of() -> None:
    assert awsmod.region_of("us-east-1a") == "us-east-1"
    assert awsmod.region_of("us-west-2-lax-1a") == "us-west-2"
    assert awsmod.region_of("us-gov-west-1b") == "us-gov-west-1"
    assert awsmod.region_of("ap-southeast-2c") == "ap-southeast-2"
    with pytest.raises(ConfigError):
        awsmod.region_of("nowhere")


def test_run_instances_params_pure() -> None:
    opts = {
        "ami": AMI,
        "subnet_id": "subnet-0abc1234",
        "security_group_ids": ["sg-0abc1234"],
        "iam_instance_profile": "arn:aws:iam::123456789012:instance-profile/navarch-node",
        "spot_max_price": "3.5",
    }
    p = awsmod.run_instances_params(request(spot=True, options=opts, zone="us-east-1d"))
    assert p["SubnetId"] == "subnet-0abc1234" and p["SecurityGroupIds"] == ["sg-0abc1234"]
    assert p["IamInstanceProfile"] == {"Arn": opts["iam_instance_profile"]}
    assert p["Placement"] == {"AvailabilityZone": "us-east-1d"}
    assert p["InstanceMarketOptions"]["SpotOptions"]["MaxPrice"] == "3.5"
    assert p["MinCount"] == p["MaxCount"] == 1
    assert [s["ResourceType"] for s in p["TagSpecifications"]] == ["instance", "volume"]
    assert "BlockDeviceMappings" not in p and "KeyName" not in p
    named = awsmod.run_instances_params(
        request(options={"ami": AMI, "iam_instance_profile": "node"})
    )
    assert named["IamInstanceProfile"] == {"Name": "node"}
    assert "InstanceMarketOptions" not in named


def test_pool_options_valid_against_schema() -> None:
    validator = validator_for("providers/aws.schema.json")
    pool_schema = {"$ref": "https://navarch.dev/schemas/providers/aws.schema.json#/$defs/pool"}
    good = {
        "ami": AMI,
        "subnets": {"us-east-1a": "subnet-0abc1234"},
        "security_group_ids": ["sg-0abc1234"],
        "root_volume_gb": 500,
        "spot_max_price": "9",
    }
    assert list(validator.evolve(schema=pool_schema).iter_errors(good)) == []
    for bad in (
        {},
        {"ami": AMI, "subnet": "x"},
        {"ami": "ubuntu"},
        {"ami": AMI, "root_volume_gb": 1},
    ):
        assert list(validator.evolve(schema=pool_schema).iter_errors(bad)), bad


def test_every_mapped_ec2_code_is_in_the_contract_table() -> None:
    # The contract (tests/contracts) checks what each code becomes; this checks the table
    # names every code aws.py maps by name, and that the code is kept on the error.
    mapped = (
        aws_errors.CAPACITY_CODES
        | aws_errors.PLACEMENT_CODES
        | aws_errors.LAUNCH_SPENT_CODES
        | aws_errors.QUOTA_CODES
        | aws_errors.AUTH_CODES
        | aws_errors.TRANSIENT_CODES
    )
    assert mapped == set(AWS_RELIED_ON), "an EC2 error code is mapped but untested, or unmapped"
    for code in AWS_RELIED_ON:
        assert aws_errors.map_error(client_error(code), zone="us-east-1a").code == code


def test_a_dedicated_hosts_id_is_the_instances_host_id() -> None:
    """Lemons are counted per physical host where EC2 exposes one: Placement.HostId
    of an instance on a Dedicated Host; none for instances on shared tenancy."""
    raw = {
        "InstanceId": "i-0123456789abcdef0",
        "State": {"Name": "running"},
        "InstanceType": "p5.48xlarge",
        "LaunchTime": datetime(2026, 11, 1, tzinfo=UTC),
        "Placement": {
            "AvailabilityZone": "us-east-1a",
            "Tenancy": "host",
            "HostId": "h-0abc123def4567890",
        },
    }
    assert awsmod.to_instance("aws", raw).host_id == "h-0abc123def4567890"
    shared = raw | {"Placement": {"AvailabilityZone": "us-east-1a", "Tenancy": "default"}}
    assert awsmod.to_instance("aws", shared).host_id is None


def impair(ids: set[str], *, event: dict | None = None):
    """An after-call hook marking these instances' system status check failed (moto always
    answers ok), and optionally adding a scheduled event, in DescribeInstanceStatus."""

    def handler(parsed, **kwargs):
        for raw in parsed.get("InstanceStatuses", ()):
            if raw["InstanceId"] in ids:
                raw["SystemStatus"] = {
                    "Status": "impaired",
                    "Details": [
                        {
                            "Name": "reachability",
                            "Status": "failed",
                            "ImpairedSince": datetime(2026, 3, 2, 11, 50, tzinfo=UTC),
                        }
                    ],
                }
                if event is not None:
                    raw["Events"] = [event]

    return handler


def test_list_carries_ec2_status_checks_one_status_call_per_region(provider) -> None:
    sick, well, third = (provider.provision(request(f"prod-train-{n:04d}")) for n in range(3))
    calls: list[str] = []
    for region in ("us-east-1", "us-west-2"):
        client = provider.client(region)
        client.meta.events.register(
            "before-call.ec2.DescribeInstanceStatus",
            lambda region=region, **kw: calls.append(region),
        )
        client.meta.events.register(
            "after-call.ec2.DescribeInstanceStatus", impair({sick.instance_id})
        )
    by_id = {i.instance_id: i for i in provider.list_instances(FLEET)}
    status = by_id[sick.instance_id].cloud_status
    assert status.health is InstanceHealth.IMPAIRED
    assert status.detail == "system status check failed"
    assert status.since == datetime(2026, 3, 2, 11, 50, tzinfo=UTC)
    assert by_id[well.instance_id].cloud_status.health is InstanceHealth.OK
    assert by_id[third.instance_id].cloud_status.health is InstanceHealth.OK
    # One call for us-east-1 however many instances; us-west-2 holds none of the fleet's.
    assert calls == ["us-east-1"]


def test_a_scheduled_retirement_is_listed_as_the_instances_event(provider) -> None:
    inst = provider.provision(request())
    retire = {
        "Code": "instance-retirement",
        "Description": "The instance is running on degraded hardware",
        "NotBefore": datetime(2026, 3, 5, 0, 0, tzinfo=UTC),
    }
    done = {
        "Code": "system-reboot",
        "Description": "[Completed] scheduled reboot",
        "NotBefore": datetime(2026, 3, 1, 0, 0, tzinfo=UTC),
    }
    provider.client("us-east-1").meta.events.register(
        "after-call.ec2.DescribeInstanceStatus", impair({inst.instance_id}, event=retire)
    )
    status = provider.list_instances(FLEET)[0].cloud_status
    assert (status.event, status.event_deadline) == (
        CloudEvent.INSTANCE_RETIREMENT,
        datetime(2026, 3, 5, tzinfo=UTC),
    )
    assert awsmod.cloud_status_of(
        {
            "InstanceId": "i-1",
            "Events": [done],
            "SystemStatus": {"Status": "ok"},
            "InstanceStatus": {"Status": "initializing"},
        }
    ) == CloudStatus(InstanceHealth.UNKNOWN)


def test_describe_instance_status_errors_leave_through_the_boundary(provider) -> None:
    provider.provision(request())
    provider.client("us-east-1").meta.events.register(
        "before-call.ec2.DescribeInstanceStatus", fault("UnauthorizedOperation", 403)
    )
    with pytest.raises(AuthError, match="DescribeInstanceStatus"):
        provider.list_instances(FLEET)

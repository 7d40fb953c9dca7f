"""EC2 against moto: `navarch adopt` takes running instances under management in place, and
`navarch plan` lists every gap of a fleet's launches at once, each with its fix, and
exits non-zero before any launch (so does apply). In-process CLI runs (tests/support/cli.py)
on the session's moto server; the store is a directory."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import boto3

from tests.support.api_log import ApiLog, missing_from_policy, recording
from tests.support.cli import in_process

POLICIES = Path(__file__).resolve().parents[2] / "docs" / "policies"

AMI = "ami-12c6146b"  # one of moto's stock images (moto/ec2/resources/amis.json)
SECRET = "0123456789abcdef0123456789abcdef"


def _fleet(tmp_path: Path, pool: str, *, target: int) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(f"""\
fleet: ec2demo
store: file://store
secret: {{env: NAVARCH_FLEET_SECRET}}
providers:
  ec2: {{type: aws, region: us-east-1}}
pools:
  train:
    provider: ec2
    gpus_per_node: 8
    nodes: {{min: 0, target: {target}, max: {target + 1}}}
    health: {{boot_timeout: 30m}}
{pool}""")
    return path


def _navarch(tmp_path: Path, *args: str, input: str = "") -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NAVARCH_")}
    env["NAVARCH_FLEET_SECRET"] = SECRET
    return in_process(args, cwd=tmp_path, env=env, input=input)


def _instances(ec2: Any) -> dict[str, dict[str, Any]]:
    return {
        i["InstanceId"]: i
        for r in ec2.describe_instances()["Reservations"]
        for i in r["Instances"]
        if i["State"]["Name"] != "terminated"
    }


def test_adopt_on_ec2_tags_three_running_instances_in_place_and_the_pool_counts_them(
    moto, tmp_path: Path
) -> None:
    ec2 = boto3.client("ec2", region_name="us-east-1")

    def run(n: int, team: str) -> list[str]:
        tags = [{"ResourceType": "instance", "Tags": [{"Key": "team", "Value": team}]}]
        got = ec2.run_instances(
            ImageId=AMI,
            InstanceType="p5.48xlarge",
            MinCount=n,
            MaxCount=n,
            Placement={"AvailabilityZone": "us-east-1a"},
            TagSpecifications=tags,
        )
        return sorted(i["InstanceId"] for i in got["Instances"])

    ours, other = run(3, "ml"), run(1, "web")
    before = _instances(ec2)
    fleet = _fleet(
        tmp_path,
        "    zones: [us-east-1a]\n    instance_types: [p5.48xlarge]\n    aws: {ami: " + AMI + "}\n"
        "    mode: observe\n",
        target=3,
    )

    with recording(ApiLog()) as calls:
        code, out, err = _navarch(
            tmp_path, "adopt", str(fleet), "--pool", "train", "--tag", "team=ml", input="yes\n"
        )

    assert code == 0, out + err
    for iid in ours:
        assert f"+ adopt {iid} as ec2demo-train-000" in out
    assert other[0] not in out
    after = _instances(ec2)
    for iid in ours:
        # Not restarted: still running, same launch time; navarch's tags beside the team's.
        assert after[iid]["State"]["Name"] == "running"
        assert after[iid]["LaunchTime"] == before[iid]["LaunchTime"]
        tags = {t["Key"]: t["Value"] for t in after[iid]["Tags"]}
        assert tags["navarch-fleet"] == "ec2demo" and tags["navarch-pool"] == "train"
        assert tags["team"] == "ml"
    assert "navarch-fleet" not in {t["Key"] for t in after[other[0]]["Tags"]}
    # The person running adopt needs the adopt policy beside the reconciler's; the
    # reconciler's alone cannot write ownership tags.
    policies = [
        json.loads((POLICIES / n).read_text()) for n in ("aws-reconciler.json", "aws-adopt.json")
    ]
    both = {"Statement": policies[0]["Statement"] + policies[1]["Statement"]}
    assert "ec2:CreateTags" in calls.actions()
    assert missing_from_policy(calls.calls, both) == []
    assert missing_from_policy(calls.calls, policies[0]) != []

    code, out, err = _navarch(tmp_path, "plan", str(fleet), "--json")
    assert code == 0, out + err
    doc = json.loads(out)
    assert sorted(n["instance_id"] for n in doc["nodes"] if n["pool"] == "train") == ours
    assert not [a for a in doc["actions"] if a["action"] == "provision"]
    assert sorted(_instances(ec2)) == sorted(ours + other)


def test_plan_lists_every_missing_launch_prerequisite_at_once_and_nothing_launches(
    moto, tmp_path: Path
) -> None:
    ec2 = boto3.client("ec2", region_name="us-east-1")
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24", AvailabilityZone="us-east-1a")
    subnet_a = subnet["Subnet"]["SubnetId"]
    fleet = _fleet(
        tmp_path,
        f"""\
    zones: [us-east-1a, us-east-1e]
    instance_types: [p5.48xlarge, p4d.24xlarge]
    aws:
      ami: {AMI}
      iam_instance_profile: navarch-node
      security_group_ids: [sg-0123456789abcdef0]
      subnets: {{us-east-1a: {subnet_a}}}
""",
        target=2,
    )

    code, out, err = _navarch(tmp_path, "plan", str(fleet))

    assert code == 1, out + err
    assert "Preflight: 4 gaps before the first launch" in out
    gaps = [line for line in out.splitlines() if line.startswith("  ! ")]
    assert len(gaps) == 4, out
    said = "\n".join(gaps)
    assert (
        "instance profile navarch-node: no such instance profile -> aws iam create-instance-profile"
        in said
    )
    assert "security group sg-0123456789abcdef0: not found in us-east-1 -> create it" in said
    assert (
        "subnet for us-east-1e: no subnet declared for this zone -> add aws.subnets.us-east-1e"
        in said
    )
    assert "p4d.24xlarge in us-east-1e: instance type not offered in this zone -> drop" in said
    assert "preflight found gaps" in err

    code, out, err = _navarch(tmp_path, "apply", str(fleet), "--auto-approve")
    assert code == 1 and "no such instance profile" in out + err
    assert _instances(ec2) == {}

    # A read the policy does not allow is skipped, naming the action, and is not a gap.
    moto.denied.add("DescribeInstanceTypeOfferings")
    code, out, err = _navarch(tmp_path, "plan", str(fleet))
    assert "Preflight: 3 gaps" in out
    assert "not checked: the policy denies it (needs ec2:DescribeInstanceTypeOfferings)" in out

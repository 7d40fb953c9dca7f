"""Least privilege for placement groups, EFA and capacity reservations: every EC2 call an
`apply` of a pool with all three makes (recorded at the moto server, the calls moto lacks
answered by tests/support/ec2_standin.py) is allowed by docs/policies/aws-reconciler.json."""

from __future__ import annotations

import os
from pathlib import Path

import boto3

from tests.aws.test_e2e import navarch
from tests.aws.test_least_privilege import AMI, BUCKET, FLEET, SECRET, policy
from tests.support.api_log import ApiLog, missing_from_policy, recording
from tests.support.ec2_standin import ec2_standin  # noqa: F401 - a fixture

REPO = Path(__file__).resolve().parents[2]


def test_placement_group_efa_and_reservation_calls_are_in_the_reconciler_policy(
    moto, ec2_standin, tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("NAVARCH_FLEET_SECRET", SECRET)
    boto3.client("s3").create_bucket(Bucket=BUCKET)
    ec2 = boto3.client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.30.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.30.1.0/24", AvailabilityZone="us-east-1a")
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(f"""\
fleet: {FLEET}
store: s3://{BUCKET}/{FLEET}
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
    aws:
      ami: {AMI}
      subnets: {{us-east-1a: {subnet["Subnet"]["SubnetId"]}}}
      placement_group: pg-train
      efa: true
      capacity_reservation: cr-0123456789abcdef0
""")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NAVARCH_")}
    env.update(NAVARCH_FLEET_SECRET=SECRET, PYTHONPATH=str(REPO))
    log = ApiLog()
    with recording(log):
        run = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    for action in (
        "ec2:DescribePlacementGroups",
        "ec2:CreatePlacementGroup",
        "ec2:DescribeInstanceTypes",
        "ec2:RunInstances",
    ):
        assert action in log.actions(), sorted(log.actions())
    assert missing_from_policy(log.calls, policy("aws-reconciler.json")) == []

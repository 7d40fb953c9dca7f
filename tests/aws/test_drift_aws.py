"""Drift and destroy end to end on AWS: `navarch` subprocesses against moto.

The instance type and the AMI change in fleet.yaml; repeated agent reports + applies
replace the node surge first; at the end only instances of the new type and AMI remain
and the old one is terminated. `navarch destroy --force` leaves no instance with the
fleet's tags.
"""

from __future__ import annotations

from pathlib import Path

import boto3

from tests.aws.test_e2e import (  # noqa: F401 - env is a fixture
    AMI,
    FLEET,
    ec2_instances,
    env,
    fleet_nodes,
    navarch,
    s3_report,
    tags,
    write_fleet,
)


def _other_ami() -> str:
    """An AMI moto knows besides the one the fleet starts with."""
    images = boto3.client("ec2").describe_images(Owners=["amazon"])["Images"]
    return next(i["ImageId"] for i in images if i["ImageId"] != AMI)


def test_changed_instance_type_and_ami_roll_to_new_instances(env, tmp_path: Path) -> None:  # noqa: F811
    fleet = write_fleet(tmp_path, target=1, max_nodes=1)
    run = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    [(old_node, old_id)] = fleet_nodes().items()
    assert ec2_instances()[old_id]["InstanceType"] == "p5.48xlarge"

    new_ami = _other_ami()
    text = fleet.read_text().replace("[p5.48xlarge, p4d.24xlarge]", "[p4d.24xlarge]")
    fleet.write_text(text.replace(f"ami: {AMI}", f"ami: {new_ami}"))
    plan = navarch(["plan", str(fleet), "--detailed-exitcode"], env, tmp_path)
    assert plan.returncode == 2, plan.stdout + plan.stderr
    assert "instance type p5.48xlarge is no longer in instance_types" in plan.stdout
    assert f"launch settings changed (ami {AMI} -> {new_ami})" in plan.stdout

    for _ in range(6):  # surge, retire once the replacement reports healthy, terminate
        for node, iid in fleet_nodes().items():
            s3_report(node, tmp_path, instance_id=iid)
        if navarch(["plan", str(fleet), "--detailed-exitcode"], env, tmp_path).returncode == 0:
            break
        run = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
        assert run.returncode == 0, run.stdout + run.stderr
        assert len(fleet_nodes()) <= 2  # max 1 + max_surge 1
    live = ec2_instances()
    nodes = fleet_nodes()
    assert old_node not in nodes and len(nodes) == 1
    [new_id] = nodes.values()
    assert live[new_id]["InstanceType"] == "p4d.24xlarge"
    assert live[new_id]["ImageId"] == new_ami
    assert tags(live[new_id])["navarch-spec"]  # the launch-settings hash, for drift later
    assert ec2_instances(live_only=False)[old_id]["State"]["Name"] in (
        "shutting-down",
        "terminated",
    )


def test_changed_label_is_set_in_place_on_ec2(env, tmp_path: Path) -> None:  # noqa: F811
    fleet = write_fleet(tmp_path, target=1)
    assert navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path).returncode == 0
    before = fleet_nodes()
    fleet.write_text(fleet.read_text().replace("labels: {team: research}", "labels: {team: ml}"))
    run = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "update tags" in run.stdout
    assert fleet_nodes() == before
    [iid] = before.values()
    assert tags(ec2_instances()[iid])["team"] == "ml"


def test_an_ownership_label_never_disowns_an_ec2_instance(env, tmp_path: Path) -> None:  # noqa: F811
    fleet = write_fleet(tmp_path, target=1)
    assert navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path).returncode == 0
    before = fleet_nodes()
    fleet.write_text(
        fleet.read_text().replace(
            "labels: {team: research}", "labels: {team: research, navarch-fleet: prod}"
        )
    )
    for _ in range(3):
        run = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
        assert run.returncode == 1 and "reserved" in run.stderr, run.stdout + run.stderr
        assert fleet_nodes() == before  # still the fleet's, and nothing launched beside it
    [iid] = before.values()
    assert tags(ec2_instances()[iid])["navarch-fleet"] == FLEET


def test_destroy_force_leaves_no_fleet_instance(env, tmp_path: Path) -> None:  # noqa: F811
    fleet = write_fleet(tmp_path, target=3)
    assert navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path).returncode == 0
    foreign = boto3.client("ec2").run_instances(ImageId=AMI, MinCount=1, MaxCount=1)
    foreign_id = foreign["Instances"][0]["InstanceId"]
    run = navarch(["destroy", str(fleet), "--force", "--auto-approve"], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert fleet_nodes() == {}
    assert foreign_id in ec2_instances()
    status = navarch(["status", str(fleet), "--json"], env, tmp_path)
    assert '"nodes": []' in status.stdout
    events = boto3.client("s3").list_objects_v2(
        Bucket="navarch-e2e", Prefix=f"navarch/events/{FLEET}/"
    )
    assert events.get("KeyCount", 0) > 0

"""navarch's CLI end to end on AWS: `navarch` subprocesses against the moto server.

The child process reaches moto only through the standard AWS environment
(AWS_ENDPOINT_URL and dummy credentials). Runs are interrupted deterministically by
gating moto's own RunInstances handler (moto runs in this process), never by sleeping.
Capacity fallback is tested in-process (navarch.cli.main) with a botocore event hook on
every EC2 client the provider creates.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse

from navarch import cli
from navarch.providers import aws as awsmod
from navarch.reconcile.state import STORE_CLOCK_SLACK_S
from navarch.report.signing import derive_node_key
from tests.support.cli import kill_apply_mid_launch, run_navarch
from tests.support.fake_agent import agent_report
from tests.support.userdata import bundle_source

FLEET = "e2e"
SECRET = "0123456789abcdef0123456789abcdef"
BUCKET = "navarch-e2e"
#: The fake GPU backend's faults: GPU 0 fell off the bus.
GPU_0_LOST = {"gpu_lost": [0]}
AMI = "ami-12c6146b"
ROOT = Path(__file__).resolve().parents[2]
LOCK_KEY = f"navarch/state/{FLEET}.lock"


def write_fleet(
    tmp_path: Path,
    *,
    target: int = 3,
    max_nodes: int | None = None,
    lock_ttl: str = "15m",
    max_parallel: int = 8,
    offline_after: str = "10m",
    surge_on: str = "replace",
) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(
        f"""\
fleet: {FLEET}
store: s3://{BUCKET}/navarch
secret: {{env: NAVARCH_FLEET_SECRET}}
providers:
  ec2: {{type: aws, region: us-east-1, max_parallel: {max_parallel}}}
safety:
  lock_ttl: {lock_ttl}
pools:
  train:
    provider: ec2
    instance_types: [p5.48xlarge, p4d.24xlarge]
    gpus_per_node: 1
    zones: [us-east-1a, us-east-1b]
    nodes: {{min: 0, target: {target}, max: {max_nodes if max_nodes is not None else target + 1}}}
    labels: {{team: research}}
    health:
      unhealthy_after: 1
      boot_timeout: 1h
      offline_after: {offline_after}
      surge_on: {surge_on}
    aws:
      ami: {AMI}
      root_volume_gb: 100
"""
    )
    return path


def navarch(
    args: list[str], env: dict[str, str], cwd: Path, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return run_navarch(args, cwd=cwd, env=env, inherit=False, timeout=timeout)


@pytest.fixture
def env(moto, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The child's environment: moto's AWS settings, the fleet secret, nothing else of ours."""
    monkeypatch.setenv("NAVARCH_FLEET_SECRET", SECRET)
    boto3.client("s3").create_bucket(Bucket=BUCKET)
    e = {k: v for k, v in os.environ.items() if not k.startswith("NAVARCH_")}
    e.update(NAVARCH_FLEET_SECRET=SECRET, PYTHONPATH=str(ROOT))
    return e


def ec2_instances(*, live_only: bool = True) -> dict[str, dict[str, Any]]:
    """instance id -> description, for every instance moto holds (ours or not)."""
    out = {}
    for r in boto3.client("ec2").describe_instances()["Reservations"]:
        for i in r["Instances"]:
            if not live_only or i["State"]["Name"] in awsmod.LIVE_STATES:
                out[i["InstanceId"]] = i
    return out


def tags(inst: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in inst.get("Tags", ())}


def fleet_nodes(*, live_only: bool = True) -> dict[str, str]:
    """navarch-node -> instance id for the fleet's instances."""
    return {
        tags(i)["navarch-node"]: iid
        for iid, i in ec2_instances(live_only=live_only).items()
        if tags(i).get("navarch-fleet") == FLEET
    }


@dataclass
class RunGate:
    """Holds moto's RunInstances handler at its n-th call until released (in-process)."""

    hold_at: int = 1
    calls: int = 0
    entered: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    mutex: threading.Lock = field(default_factory=threading.Lock)


@pytest.fixture
def run_gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[RunGate]:
    from moto.ec2.models.instances import InstanceBackend  # a second of import, for a few tests

    gate = RunGate()
    original = InstanceBackend.run_instances

    def gated(self, *args, **kwargs):
        with gate.mutex:
            gate.calls += 1
            mine = gate.calls == gate.hold_at
        if not mine:
            return original(self, *args, **kwargs)
        gate.entered.set()
        gate.release.wait(120)
        try:
            return original(self, *args, **kwargs)
        finally:
            gate.done.set()

    monkeypatch.setattr(InstanceBackend, "run_instances", gated)
    yield gate
    gate.release.set()


def test_apply_converges_with_tags_and_user_data_then_no_op(env, tmp_path) -> None:
    fleet = write_fleet(tmp_path, target=3)
    plan = navarch(["plan", str(fleet), "--detailed-exitcode"], env, tmp_path)
    assert plan.returncode == 2, plan.stdout + plan.stderr
    run = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr

    nodes = fleet_nodes()
    assert len(nodes) == 3
    assert all(re.fullmatch(r"e2e-train-[0-9]{4}", n) for n in nodes)
    from navarch.agent.bootstrap import render_cloud_init
    from navarch.fleet.load import load_fleet

    spec = load_fleet(fleet)
    ec2 = boto3.client("ec2")
    placed = []
    for node, iid in nodes.items():
        inst = ec2_instances()[iid]
        t = tags(inst)
        assert t["navarch-fleet"] == FLEET and t["navarch-pool"] == "train"
        assert t["navarch-node"] == node and t["team"] == "research" and t["Name"] == node
        assert len(t["navarch-launch"]) == 32
        assert inst["MetadataOptions"]["HttpTokens"] == "required"
        placed.append((inst["Placement"]["AvailabilityZone"], inst["InstanceType"]))
        raw = ec2.describe_instance_attribute(InstanceId=iid, Attribute="userData")
        user_data = base64.b64decode(raw["UserData"]["Value"]).decode()
        key = derive_node_key(SECRET.encode(), FLEET, node)
        source = bundle_source(user_data)  # the pre-signed URL differs per apply
        assert user_data == render_cloud_init(spec, "train", node, key, bundle=lambda s=source: s)
        assert key.hex() in user_data and node in user_data

    # Three nodes spread over the pool's two zones, on its first instance type.
    assert sorted(placed) == [("us-east-1a", "p5.48xlarge")] * 2 + [("us-east-1b", "p5.48xlarge")]

    # The second run changes nothing: plan says so, apply launches nothing.
    again = navarch(["plan", str(fleet), "--detailed-exitcode"], env, tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    run = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert fleet_nodes(live_only=False) == nodes

    status = navarch(["status", str(fleet), "--json"], env, tmp_path)
    assert status.returncode == 0, status.stderr
    assert all(iid in status.stdout for iid in nodes.values())


@pytest.mark.parametrize("hold_at", [1, 4])
def test_killed_apply_then_apply_leaves_exactly_target(
    env, tmp_path, run_gate, moto, hold_at
) -> None:
    """SIGKILL while launches run in parallel (one held inside moto's RunInstances, others
    in flight or done): the next run adopts what was launched and launches the rest."""
    fleet = write_fleet(tmp_path, target=6, max_nodes=7, max_parallel=4)
    run_gate.hold_at = hold_at
    kill_apply_mid_launch(fleet, cwd=tmp_path, reached=run_gate.entered, env=env, inherit=False)
    # The killed run's held RunInstances was already in flight: EC2 still launches it.
    run_gate.release.set()
    assert run_gate.done.wait(60)
    assert hold_at <= len(fleet_nodes()) <= 6

    # Its lease (15m here) is still held: the next run is refused with exit 4...
    blocked = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
    assert blocked.returncode == 4, blocked.stdout + blocked.stderr
    lock = json.loads(boto3.client("s3").get_object(Bucket=BUCKET, Key=LOCK_KEY)["Body"].read())
    assert lock["lock_id"] in blocked.stderr
    # ...until a human removes it; then the fleet ends at exactly target.
    unlock = navarch(["force-unlock", str(fleet), lock["lock_id"]], env, tmp_path)
    assert unlock.returncode == 0, unlock.stdout + unlock.stderr
    run = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert len(fleet_nodes()) == 6
    assert len(fleet_nodes(live_only=False)) == 6  # nothing launched twice, never above max
    assert navarch(["plan", str(fleet), "--detailed-exitcode"], env, tmp_path).returncode == 0


def test_killed_apply_lease_lapses_within_one_ttl(env, tmp_path, run_gate, moto) -> None:
    """With a short lease the next run needs no human: once the lease has been silent past
    its TTL and the store clock's slack by S3's whole-second LastModified (so one second
    more), it takes the lease over (and says whose it was) and converges without
    duplicates."""
    ttl_s = 3
    fleet = write_fleet(tmp_path, target=4, max_nodes=5, lock_ttl=f"{ttl_s}s", max_parallel=4)
    run_gate.hold_at = 2
    kill_apply_mid_launch(fleet, cwd=tmp_path, reached=run_gate.entered, env=env, inherit=False)
    killed_at = time.monotonic()
    run_gate.release.set()
    assert run_gate.done.wait(60)
    lapsed_after_s = ttl_s + STORE_CLOCK_SLACK_S + 1.5  # + S3's one-second resolution
    time.sleep(max(0.0, killed_at + lapsed_after_s - time.monotonic()))
    run = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "took over the expired lease" in run.stderr
    assert len(fleet_nodes()) == 4
    assert len(fleet_nodes(live_only=False)) == 4


def test_runners_with_clocks_3_minutes_apart_never_both_act_on_s3(
    env, tmp_path, run_gate, moto
) -> None:
    """The lease is timed by S3's clock (LastModified), not by the runners': a runner 3
    minutes fast finds a live 2-minute lease held and launches nothing; once its holder is
    killed and the lease has been silent past its TTL by S3's clock, a runner 3 minutes
    slow takes it over and the fleet ends at exactly target."""
    fleet = write_fleet(tmp_path, target=3, max_nodes=3, lock_ttl="2m", max_parallel=1)
    run_gate.hold_at = 1
    holder = subprocess.Popen(
        [sys.executable, "-m", "navarch", "apply", str(fleet), "--auto-approve"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert run_gate.entered.wait(120), "the first apply never reached RunInstances"
        fast = navarch(
            ["apply", str(fleet), "--auto-approve"],
            {**env, "NAVARCH_NOW": (datetime.now(UTC) + timedelta(minutes=3)).isoformat()},
            tmp_path,
        )
        assert fast.returncode == 4, fast.stdout + fast.stderr
        assert "took over" not in fast.stderr
        assert run_gate.calls == 1  # only the holder's launch
        run_gate.release.set()
        out, err = holder.communicate(timeout=120)
    finally:
        run_gate.release.set()
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert holder.returncode == 0, out + err
    assert [op for op, key in moto.lock_log if key == LOCK_KEY] == ["put", "delete"]
    assert len(fleet_nodes(live_only=False)) == 3

    # A lapsed lease: its holder was killed; a runner 3 minutes slow still takes it over.
    write_fleet(tmp_path, target=4, max_nodes=4, lock_ttl="3s", max_parallel=1)
    run_gate.hold_at = run_gate.calls + 1
    run_gate.entered, run_gate.release = threading.Event(), threading.Event()
    run_gate.done = threading.Event()
    kill_apply_mid_launch(fleet, cwd=tmp_path, reached=run_gate.entered, env=env, inherit=False)
    run_gate.release.set()
    assert run_gate.done.wait(60)
    time.sleep(3 + 2)  # the TTL, the store's one-second resolution, a margin
    slow = navarch(
        ["apply", str(fleet), "--auto-approve"],
        {**env, "NAVARCH_NOW": (datetime.now(UTC) - timedelta(minutes=3)).isoformat()},
        tmp_path,
    )
    assert slow.returncode == 0, slow.stdout + slow.stderr
    assert "took over the expired lease" in slow.stderr
    assert len(fleet_nodes()) == 4
    assert len(fleet_nodes(live_only=False)) == 4


def test_untagged_and_other_fleet_instances_are_never_touched(env, tmp_path) -> None:
    ec2 = boto3.client("ec2")
    untagged = ec2.run_instances(ImageId=AMI, MinCount=1, MaxCount=1)["Instances"][0]
    lookalike = ec2.run_instances(
        ImageId=AMI,
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[
            {
                "ResourceType": "instance",
                "Tags": [
                    {"Key": "navarch-fleet", "Value": "other"},
                    {"Key": "navarch-pool", "Value": "train"},
                    {"Key": "navarch-node", "Value": "e2e-train-0000"},
                ],
            }
        ],
    )["Instances"][0]
    foreign = {untagged["InstanceId"], lookalike["InstanceId"]}
    fleet = write_fleet(tmp_path, target=1)
    run = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert len(fleet_nodes()) == 1
    # Remove the fleet's nodes (destroy --force: a node that never reported is never
    # picked by scale-down, doubt never acts): only the fleet's own instance goes.
    run = navarch(["destroy", str(fleet), "--force", "--auto-approve"], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert fleet_nodes() == {}
    live = ec2_instances()
    assert foreign <= set(live)
    assert all(live[i]["State"]["Name"] == "running" for i in foreign)


def s3_report(node: str, tmp_path: Path, **agent: Any) -> dict[str, Any]:
    """The real agent's report for `node` of this fleet, written to the bucket (agent_report;
    agent: its keyword arguments, e.g. instance_id)."""
    return agent_report(
        f"s3://{BUCKET}/navarch", node, tmp_path, fleet=FLEET, secret=SECRET, **agent
    )


def test_reports_in_s3_drive_a_replacement(env, tmp_path) -> None:
    # The runs below step 31 minutes ahead; S3 stamps reports with its own time, so the
    # healthy node's report must not count as offline by then.
    # surge_on: any, so the sick node's first rung (a reboot) launches the replacement too.
    fleet = write_fleet(tmp_path, target=2, offline_after="1h", surge_on="any")
    assert navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path).returncode == 0
    nodes = fleet_nodes()
    for node, iid in nodes.items():
        assert s3_report(node, tmp_path, instance_id=iid)["status"] == "healthy"
    keys = boto3.client("s3").list_objects_v2(Bucket=BUCKET, Prefix=f"navarch/health/{FLEET}/")
    assert sorted(o["Key"] for o in keys["Contents"]) == sorted(
        f"navarch/health/{FLEET}/train/{n}.json" for n in nodes
    )
    assert navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path).returncode == 0
    assert fleet_nodes() == nodes

    sick, healthy = sorted(nodes)
    assert (
        s3_report(sick, tmp_path, instance_id=nodes[sick], faults=GPU_0_LOST)["status"]
        == "unhealthy"
    )
    run = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "cordon" in run.stdout and "provision" in run.stdout, run.stdout
    assert len(fleet_nodes()) == 3  # the surge replacement, within max (2 + 1)

    # With scheduler none a drain ends at drain_timeout (30m): the next runs happen 31
    # minutes later (NAVARCH_NOW); the agents' reports of that time are stamped by S3 now.
    later = datetime.now(UTC) + timedelta(minutes=31)
    env_later = env | {"NAVARCH_NOW": later.isoformat().replace("+00:00", "Z")}
    assert (
        s3_report(healthy, tmp_path, instance_id=nodes[healthy], now=later)["status"] == "healthy"
    )
    s3_report(sick, tmp_path, instance_id=nodes[sick], faults=GPU_0_LOST, now=later)
    for _ in range(3):  # terminate, within a few runs, never forever
        run = navarch(["apply", str(fleet), "--auto-approve"], env_later, tmp_path)
        assert run.returncode == 0, run.stdout + run.stderr
        if sick not in fleet_nodes():
            break
    got = fleet_nodes()
    assert sick not in got and healthy in got
    assert len(got) == 2
    assert ec2_instances(live_only=False)[nodes[sick]]["State"]["Name"] in (
        "shutting-down",
        "terminated",
    )
    # Never above max (target 2 + 1) at any point: at most 3 instances were ever launched.
    assert len(fleet_nodes(live_only=False)) == 3


def test_eight_concurrent_applies_one_lock_holder(env, tmp_path, run_gate, moto) -> None:
    fleet = write_fleet(tmp_path, target=3, max_nodes=3)
    run_gate.hold_at = 1  # the lock holder stops in its first launch until the rest are done
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "navarch", "apply", str(fleet), "--auto-approve"],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(8)
    ]
    outputs: dict[int, tuple[str, str]] = {}
    try:
        assert run_gate.entered.wait(120), "no apply reached RunInstances"
        holder = json.loads(
            boto3.client("s3").get_object(Bucket=BUCKET, Key=LOCK_KEY)["Body"].read()
        )
        waiting = {i: p for i, p in enumerate(procs)}
        # Every run but the holder must give up by itself while the holder is stuck.
        while len(waiting) > 1:
            for i, p in list(waiting.items()):
                if p.poll() is not None:
                    outputs[i] = p.communicate()
                    del waiting[i]
            time.sleep(0.05)
        run_gate.release.set()
        for i, p in waiting.items():
            outputs[i] = p.communicate(timeout=120)
    finally:
        run_gate.release.set()
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    codes = sorted(p.returncode for p in procs)
    assert codes == [0] + [4] * 7, outputs
    for i, p in enumerate(procs):
        if p.returncode == 4:
            err = outputs[i][1]
            assert f"locked by {holder['holder']}" in err, err
            assert "taken" in err and "s ago" in err and holder["lock_id"] in err
    # The lock was created and released exactly once: never two holders.
    assert [op for op, key in moto.lock_log if key == LOCK_KEY] == ["put", "delete"]
    assert len(fleet_nodes()) == 3
    assert len(fleet_nodes(live_only=False)) == 3  # never above max (3)
    assert navarch(["plan", str(fleet), "--detailed-exitcode"], env, tmp_path).returncode == 0


def _ice(predicate):
    """A before-call handler answering InsufficientInstanceCapacity where predicate(params)."""

    def handler(params, **kwargs):
        body = params["body"]
        if predicate(body.get("Placement.AvailabilityZone"), body.get("InstanceType")):
            return (
                AWSResponse(url="", status_code=500, headers={}, raw=None),
                {
                    "Error": {
                        "Code": "InsufficientInstanceCapacity",
                        "Message": "We currently do not have sufficient capacity.",
                    },
                    "ResponseMetadata": {"HTTPStatusCode": 500},
                },
            )
        return None

    return handler


def _state() -> dict[str, Any]:
    body = boto3.client("s3").get_object(Bucket=BUCKET, Key=f"navarch/state/{FLEET}.json")
    return json.loads(body["Body"].read())


def test_capacity_falls_over_to_next_zone_in_process(env, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(
        awsmod,
        "CLIENT_EVENT_HANDLERS",
        [("before-call.ec2.RunInstances", _ice(lambda zone, itype: zone == "us-east-1a"))],
    )
    fleet = write_fleet(tmp_path, target=2)
    assert cli.main(["apply", str(fleet), "--auto-approve"]) == 0
    live = [ec2_instances()[iid] for iid in fleet_nodes().values()]
    assert len(live) == 2
    assert {(i["Placement"]["AvailabilityZone"], i["InstanceType"]) for i in live} == {
        ("us-east-1b", "p5.48xlarge")
    }
    exhausted = _state()["pools"]["train"]["exhausted"]
    assert [(e["zone"], e["instance_type"]) for e in exhausted] == [("us-east-1a", "p5.48xlarge")]


def test_capacity_falls_over_to_next_type_in_process(env, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(
        awsmod,
        "CLIENT_EVENT_HANDLERS",
        [("before-call.ec2.RunInstances", _ice(lambda zone, itype: itype == "p5.48xlarge"))],
    )
    fleet = write_fleet(tmp_path, target=1)
    assert cli.main(["apply", str(fleet), "--auto-approve"]) == 0
    (iid,) = fleet_nodes().values()
    inst = ec2_instances()[iid]
    assert (inst["Placement"]["AvailabilityZone"], inst["InstanceType"]) == (
        "us-east-1a",
        "p4d.24xlarge",
    )
    exhausted = _state()["pools"]["train"]["exhausted"]
    assert sorted((e["zone"], e["instance_type"]) for e in exhausted) == [
        ("us-east-1a", "p5.48xlarge"),
        ("us-east-1b", "p5.48xlarge"),
    ]

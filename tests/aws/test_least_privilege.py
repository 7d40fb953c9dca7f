"""Least privilege, tested against the code: every AWS call the reconciler and the agent
make over a fleet's life (launch, publish the bundle, a node's reports, labels changed in
place, a reboot, a scale-down, the status page and notification state) is allowed by the
policy files under docs/policies/, and the agent's calls only touch its own report."""

from __future__ import annotations

import base64
import copy
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest

from navarch.reconcile.state import acquire_lock, release_lock
from navarch.stores import open_store
from tests.aws.test_e2e import navarch
from tests.support.api_log import ApiLog, Call, missing_from_policy, recording
from tests.support.userdata import run_installed_agent, run_user_data

REPO = Path(__file__).resolve().parents[2]
POLICIES = REPO / "docs" / "policies"
# The names the policy files use (docs/aws.md): fleet research, bucket my-navarch-state.
FLEET = "research"
BUCKET = "my-navarch-state"
SECRET = "0123456789abcdef0123456789abcdef"
AMI = "ami-12c6146b"


def policy(name: str) -> dict[str, Any]:
    return json.loads((POLICIES / name).read_text())


def write_fleet(tmp_path: Path, *, target: int, team: str) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(f"""\
fleet: {FLEET}
store: s3://{BUCKET}/{FLEET}
secret: {{env: NAVARCH_FLEET_SECRET}}
status_page: true
notify: [{{type: log}}]
providers:
  ec2: {{type: aws, region: us-east-1}}
pools:
  train:
    provider: ec2
    instance_types: [p5.48xlarge]
    gpus_per_node: 1
    zones: [us-east-1a]
    nodes: {{min: 0, target: {target}, max: 3}}
    labels: {{team: {team}}}
    health: {{boot_timeout: 1h}}
    aws: {{ami: {AMI}, iam_instance_profile: navarch-node}}
""")
    return path


@pytest.fixture
def env(moto, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("NAVARCH_FLEET_SECRET", SECRET)
    boto3.client("s3").create_bucket(Bucket=BUCKET)
    # The fleet's pools launch with this profile; preflight refuses a plan without it.
    boto3.client("iam").create_instance_profile(InstanceProfileName="navarch-node")
    e = {k: v for k, v in os.environ.items() if not k.startswith("NAVARCH_")}
    e.update(NAVARCH_FLEET_SECRET=SECRET, PYTHONPATH=str(REPO))
    return e


def nodes() -> dict[str, str]:
    out = {}
    for r in boto3.client("ec2").describe_instances()["Reservations"]:
        for i in r["Instances"]:
            tags = {t["Key"]: t["Value"] for t in i.get("Tags", ())}
            if tags.get("navarch-fleet") == FLEET and i["State"]["Name"] == "running":
                out[tags["navarch-node"]] = i["InstanceId"]
    return out


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory, moto_server) -> tuple[ApiLog, ApiLog]:
    """(reconciler calls, agent calls) over one fleet's life on moto."""
    tmp_path = tmp_path_factory.mktemp("least-privilege")
    mp = pytest.MonkeyPatch()
    moto_server.reset()
    for name, value in moto_server.env().items():
        mp.setenv(name, value)
    mp.setenv("NAVARCH_FLEET_SECRET", SECRET)
    boto3.client("s3").create_bucket(Bucket=BUCKET)
    boto3.client("iam").create_instance_profile(InstanceProfileName="navarch-node")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NAVARCH_")}
    env.update(NAVARCH_FLEET_SECRET=SECRET, PYTHONPATH=str(REPO))
    reconciler, agent = ApiLog(), ApiLog()

    def cli(*args: str) -> None:
        with recording(reconciler):
            run = navarch(list(args), env, tmp_path)
        assert run.returncode in (0, 2), run.stdout + run.stderr

    try:
        fleet = write_fleet(tmp_path, target=2, team="research")
        cli("apply", str(fleet), "--auto-approve")
        aws = {k: v for k, v in env.items() if k.startswith("AWS_")}
        for node, iid in sorted(nodes().items()):
            raw = boto3.client("ec2").describe_instance_attribute(
                InstanceId=iid, Attribute="userData"
            )
            installed = run_user_data(
                base64.b64decode(raw["UserData"]["Value"]).decode(), tmp_path / node
            )
            for _ in range(2):  # the second run reads the first report back
                with recording(agent):
                    run = run_installed_agent(installed, {**aws, "NAVARCH_FAKE_GPU": "true"})
                assert run.returncode == 0, run.stdout + run.stderr
        cli("plan", str(fleet))
        write_fleet(tmp_path, target=2, team="ml")
        cli("apply", str(fleet), "--auto-approve")  # labels: CreateTags on running instances
        cli("reboot", str(fleet), sorted(nodes())[0], "--force")
        # Another run holds the lease: the refused run reads the store's clock (a probe).
        store = open_store(f"s3://{BUCKET}/{FLEET}")
        held = acquire_lock(store, FLEET, "apply elsewhere", 120, datetime.now(UTC))
        with recording(reconciler):
            blocked = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
        assert blocked.returncode == 4, blocked.stdout + blocked.stderr
        release_lock(store, FLEET, held)
        cli("destroy", str(fleet), "--force", "--auto-approve")  # TerminateInstances
    finally:
        mp.undo()
    return reconciler, agent


def test_every_reconciler_call_is_in_the_reconciler_policy(recorded) -> None:
    reconciler, _ = recorded
    for expected in (
        "ec2:RunInstances",
        "ec2:CreateTags",
        "ec2:RebootInstances",
        "ec2:TerminateInstances",
        "s3:PutObject",
        "s3:ListBucket",
        # preflight's reads before the first launch
        "ec2:DescribeInstanceTypeOfferings",
        "ec2:DescribeImages",
        "iam:GetInstanceProfile",
        "servicequotas:GetServiceQuota",
    ):
        assert expected in reconciler.actions(), sorted(reconciler.actions())
    probe = Call("s3:PutObject", BUCKET, f"{FLEET}/state/{FLEET}.lock.probe")
    assert probe in reconciler.calls  # a run that found the lease held read S3's clock
    assert missing_from_policy(reconciler.calls, policy("aws-reconciler.json")) == []


def test_the_agent_reads_and_writes_only_its_own_report(recorded) -> None:
    _, agent = recorded
    assert agent.actions() == {"s3:GetObject", "s3:PutObject"}
    keys = {c.key for c in agent.calls}
    assert keys == {
        f"{FLEET}/health/{FLEET}/train/{n}.json" for n in {k.rsplit("/", 1)[1][:-5] for k in keys}
    }
    assert missing_from_policy(agent.calls, policy("aws-node.json")) == []


def test_a_policy_without_an_action_it_needs_fails_the_check(recorded) -> None:
    reconciler, _ = recorded
    doc = copy.deepcopy(policy("aws-reconciler.json"))
    for statement in doc["Statement"]:
        actions = (
            statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        )
        statement["Action"] = [a for a in actions if a != "ec2:RebootInstances"] or ["none:None"]
    assert missing_from_policy(reconciler.calls, doc) == [Call("ec2:RebootInstances")]


def test_the_reconciler_policy_cannot_take_ownership_of_a_machine() -> None:
    doc = policy("aws-reconciler.json")
    grab = Call("ec2:CreateTags", key="navarch-fleet,navarch-node")
    label = Call("ec2:CreateTags", key="team")
    assert missing_from_policy([grab, label], doc) == [grab]


def test_the_node_policy_does_not_reach_another_pools_reports_or_the_state(recorded) -> None:
    doc = policy("aws-node.json")
    others = [
        Call("s3:PutObject", BUCKET, f"{FLEET}/state/{FLEET}.json"),
        Call("s3:PutObject", BUCKET, f"{FLEET}/state/{FLEET}.lock"),
        Call("s3:PutObject", BUCKET, f"{FLEET}/state/{FLEET}.lock.probe"),
        Call("s3:PutObject", BUCKET, f"{FLEET}/state/{FLEET}.reports-cache.json"),
        Call("s3:PutObject", BUCKET, f"{FLEET}/status/{FLEET}/index.html"),
        Call("s3:PutObject", BUCKET, f"{FLEET}/agent/0.1.0-{'0' * 64}.pyz"),
        Call("s3:PutObject", BUCKET, f"{FLEET}/health/{FLEET}/infer/x.json"),
        Call("s3:DeleteObject", BUCKET, f"{FLEET}/health/{FLEET}/train/x.json"),
    ]
    assert missing_from_policy(others, doc) == sorted(others)

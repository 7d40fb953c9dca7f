"""The agent reaches a new EC2 node with no package index: apply publishes the bundle to
S3, the user-data fetches it by pre-signed URL, checks its sha256 and installs the units;
the installed agent runs once under `python3 -I -S` on fake GPUs, and the next plan
accepts its signed report. Everything over moto on 127.0.0.1."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
from pathlib import Path

import boto3
import pytest

from navarch import __version__
from tests.aws.test_e2e import BUCKET, FLEET, env, fleet_nodes, navarch, write_fleet
from tests.support.userdata import bundle_source, run_installed_agent, run_user_data

__all__ = ["env"]  # the fixture, imported for its side effects on moto


def user_data_of(iid: str) -> str:
    raw = boto3.client("ec2").describe_instance_attribute(InstanceId=iid, Attribute="userData")
    return base64.b64decode(raw["UserData"]["Value"]).decode()


def bundle_keys() -> list[str]:
    listed = boto3.client("s3").list_objects_v2(Bucket=BUCKET, Prefix="navarch/agent/")
    return [o["Key"] for o in listed.get("Contents", [])]


@pytest.fixture
def applied(env: dict[str, str], tmp_path: Path) -> tuple[Path, dict[str, str]]:
    fleet = write_fleet(tmp_path, target=2)
    run = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    return fleet, fleet_nodes()


def test_apply_publishes_one_content_addressed_bundle(applied) -> None:
    keys = bundle_keys()
    assert len(keys) == 1
    (key,) = keys
    assert key.startswith(f"navarch/agent/{__version__}-") and key.endswith(".pyz")
    data = boto3.client("s3").get_object(Bucket=BUCKET, Key=key)["Body"].read()
    assert key == f"navarch/agent/{__version__}-{hashlib.sha256(data).hexdigest()}.pyz"
    _, nodes = applied
    sources = {bundle_source(user_data_of(iid)) for iid in nodes.values()}
    assert len(sources) == 1
    assert next(iter(sources)).sha256 == hashlib.sha256(data).hexdigest()


def test_a_second_apply_never_overwrites_the_bundle(applied, env, tmp_path) -> None:
    s3 = boto3.client("s3")
    (key,) = bundle_keys()
    before = s3.head_object(Bucket=BUCKET, Key=key)
    fleet, _ = applied
    s3.delete_object(Bucket=BUCKET, Key=f"navarch/state/{FLEET}.json")  # forget: relaunch
    for iid in fleet_nodes().values():
        boto3.client("ec2").terminate_instances(InstanceIds=[iid])
    run = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert bundle_keys() == [key]
    after = s3.head_object(Bucket=BUCKET, Key=key)
    assert after["LastModified"] == before["LastModified"] and after["ETag"] == before["ETag"]


def test_user_data_installs_the_bundle_and_the_next_plan_accepts_its_report(
    applied, env, tmp_path
) -> None:
    fleet, nodes = applied
    node, iid = sorted(nodes.items())[0]
    root = tmp_path / "node-root"
    installed = run_user_data(user_data_of(iid), root)  # no AWS credentials in its env
    bundle = root / "usr/local/lib/navarch/navarch-agent.pyz"
    assert (
        hashlib.sha256(bundle.read_bytes()).hexdigest() == bundle_source(user_data_of(iid)).sha256
    )
    assert (root / "etc/navarch/agent.yaml").stat().st_mode & 0o777 == 0o600
    assert installed.exec_start[:4] == ("/usr/bin/env", "python3", "-I", "-S")

    # The instance role's credentials stand in as moto's dummy keys.
    aws = {k: v for k, v in env.items() if k.startswith("AWS_")}
    run = run_installed_agent(installed, {**aws, "NAVARCH_FAKE_GPU": "true"})
    assert run.returncode == 0, run.stdout + run.stderr
    assert '"report_written"' in run.stdout

    report = json.loads(
        boto3.client("s3")
        .get_object(Bucket=BUCKET, Key=f"navarch/health/{FLEET}/train/{node}.json")["Body"]
        .read()
    )
    assert report["node"] == node and report["status"] == "healthy"

    status = navarch(["status", str(fleet), "--json"], env, tmp_path)
    assert status.returncode == 0, status.stderr
    views = {n["node"]: n for p in json.loads(status.stdout)["pools"] for n in p["nodes"]}
    assert views[node]["lifecycle"] == "healthy"
    others = [v["lifecycle"] for name, v in views.items() if name != node]
    assert others and "healthy" not in others  # only the node that ran the agent


def test_a_bundle_with_another_hash_is_refused(applied, tmp_path) -> None:
    _, nodes = applied
    user_data = user_data_of(sorted(nodes.values())[0])
    source = bundle_source(user_data)
    # Only the checksum line: the bundle's key holds its hash too, and a forged URL fails
    # its download instead of the checksum.
    line = f"SHA256={source.sha256}"
    assert user_data.count(line) == 1, user_data
    forged = user_data.replace(line, "SHA256=" + "0" * 64)
    with pytest.raises(subprocess.CalledProcessError) as err:
        run_user_data(forged, tmp_path / "node-root")
    assert "agent bundle sha256 is not " + "0" * 64 in err.value.stderr
    assert "cannot download" not in err.value.stderr
    assert not (tmp_path / "node-root/usr/local/lib/navarch/navarch-agent.pyz").exists()

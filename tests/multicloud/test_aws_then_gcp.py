"""One pool on AWS (moto as a server) first and GCP (the fake Compute API)
second, through the CLI as a subprocess.

While every AWS place answers InsufficientInstanceCapacity (moto's RunInstances, gated in
this process), apply launches on GCP and the plan says why. Once AWS has capacity again and
its backoff has run out, a GCP node that fails is replaced on AWS.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.aws.test_e2e import (  # noqa: F401 - env is a fixture
    AMI,
    BUCKET,
    FLEET,
    env,
    fleet_nodes,
    navarch,
    s3_report,
)
from tests.gcp.test_cli_gcp import instances as gce_instances
from tests.support.fake_agent import ecc_uncorrected


def _sick_if_first(node: str, instance_id: str, tmp_path: Path) -> None:
    """The agent's report for `node` in S3: uncorrected ECC errors on node 0001, else healthy."""
    faults = ecc_uncorrected(3) if node.endswith("0001") else {}
    s3_report(node, tmp_path, instance_id=instance_id, faults=faults)


def write_fleet(tmp_path: Path, endpoint: str, target: int) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(f"""\
fleet: {FLEET}
store: s3://{BUCKET}/navarch
secret: {{env: NAVARCH_FLEET_SECRET}}
providers:
  ec2: {{type: aws, region: us-east-1}}
  gce: {{type: gcp, project: navarch-test, api_endpoint: {endpoint}, anonymous: true,
         retry_deadline_s: 2}}
pools:
  train:
    gpus_per_node: 1
    placements:
      - provider: ec2
        zones: [us-east-1a, us-east-1b]
        instance_types: [p5.48xlarge]
        aws: {{ami: {AMI}}}
      - provider: gce
        zones: [us-central1-a]
        instance_types: [n1-standard-8]
        gcp:
          accelerators:
            n1-standard-8: {{type: nvidia-tesla-t4, count: 1}}
    nodes: {{min: 0, target: {target}, max: {target + 1}}}
    health: {{unhealthy_after: 1, boot_timeout: 1h, remediation: [replace]}}
""")
    return path


class _AwsCapacity:
    """Makes moto's RunInstances answer InsufficientInstanceCapacity while `out` is set."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from moto.ec2.exceptions import EC2ClientError
        from moto.ec2.models.instances import InstanceBackend  # a second of import

        self.out = True
        self.refused = 0
        original = InstanceBackend.run_instances

        def run_instances(backend: Any, *args: Any, **kwargs: Any) -> Any:
            if self.out:
                self.refused += 1
                raise EC2ClientError(
                    "InsufficientInstanceCapacity", "We currently do not have sufficient capacity."
                )
            return original(backend, *args, **kwargs)

        monkeypatch.setattr(InstanceBackend, "run_instances", run_instances)


def _end_backoff() -> None:
    """Time passes: every capacity backoff in the state (in S3) has run out."""
    s3 = boto3.client("s3")
    key = f"navarch/state/{FLEET}.json"
    doc = json.loads(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    for e in doc["pools"]["train"]["exhausted"]:
        e["until"] = "2000-01-01T00:00:00Z"
    s3.put_object(Bucket=BUCKET, Key=key, Body=json.dumps(doc).encode())


def _status(child_env: dict[str, str], fleet: Path, cwd: Path) -> dict[str, dict[str, Any]]:
    run = navarch(["status", str(fleet), "--json"], child_env, cwd)
    assert run.returncode == 0, run.stdout + run.stderr
    return {n["node"]: n for p in json.loads(run.stdout)["pools"] for n in p["nodes"]}


def test_aws_first_gcp_second_and_back(
    env,
    fake_compute,
    compute_endpoint,
    tmp_path,  # noqa: F811
    monkeypatch,
) -> None:
    aws = _AwsCapacity(monkeypatch)
    fleet = write_fleet(tmp_path, compute_endpoint, target=2)
    run = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert aws.refused >= 2 and fleet_nodes() == {}
    on_gce = gce_instances(fake_compute)
    assert sorted(on_gce) == [f"{FLEET}-train-0001", f"{FLEET}-train-0002"]

    fleet.write_text(fleet.read_text().replace("target: 2, max: 3", "target: 3, max: 4"))
    plan = navarch(["plan", str(fleet)], env, tmp_path)
    assert f"+ provision {FLEET}-train-0003 on gce us-central1-a/n1-standard-8" in plan.stdout, (
        plan.stdout + plan.stderr
    )
    assert "ec2: all places exhausted until" in plan.stdout, plan.stdout
    fleet.write_text(fleet.read_text().replace("target: 3, max: 4", "target: 2, max: 3"))

    # AWS has capacity again; a GCP node has uncorrected ECC errors and is replaced on AWS.
    aws.out = False
    _end_backoff()
    nodes = _status(env, fleet, tmp_path)
    for node, info in nodes.items():
        _sick_if_first(node, info["instance_id"], tmp_path)
    plan = navarch(["plan", str(fleet)], env, tmp_path)
    assert f"+ provision {FLEET}-train-0003 on ec2 us-east-1a/p5.48xlarge" in plan.stdout, (
        plan.stdout + plan.stderr
    )
    outputs = []
    for _ in range(4):
        run = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
        assert run.returncode == 0, run.stdout + run.stderr
        outputs.append(run.stdout)
        for node, info in _status(env, fleet, tmp_path).items():
            _sick_if_first(node, info["instance_id"], tmp_path)
        if navarch(["plan", str(fleet), "--detailed-exitcode"], env, tmp_path).returncode == 0:
            break
    assert list(fleet_nodes()) == [f"{FLEET}-train-0003"]
    assert sorted(gce_instances(fake_compute)) == [f"{FLEET}-train-0002"], "\n".join(outputs)

"""docs/getting-started/aws.md runs as written: its `sh` blocks, in page order, as one bash
script against moto (the boto3 snippet that creates the bucket, network, role and key pair,
then validate, plan, apply, the mode raised and apply again, status); only install lines
(`pip`, `pipx`, `uv`, the venv) are left out, since the test runs from this checkout. The
page is read at test time, so a changed command is tested as the reader sees it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import boto3

from tests.support.moto_server import REGION, Moto

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "getting-started" / "aws.md"
INSTALL = re.compile(r"^(pip|pipx|uv) |^python3 -m venv ")


def page_script() -> str:
    """The page's `sh` blocks, joined, without the install lines."""
    blocks = re.findall(r"```sh\n(.*?)```", PAGE.read_text(), re.S)
    lines = [line for b in blocks for line in b.splitlines() if not INSTALL.match(line)]
    return "\n".join(lines) + "\n"


def _shims(bin_dir: Path) -> None:
    """`navarch` and `python3` on PATH as this checkout's interpreter runs them."""
    bin_dir.mkdir()
    for name, argv in (("navarch", f"{sys.executable} -m navarch"), ("python3", sys.executable)):
        shim = bin_dir / name
        shim.write_text(f'#!/bin/sh\nexec {argv} "$@"\n')
        shim.chmod(0o755)


def test_aws_getting_started_page_runs_on_moto_and_launches_its_fleet(
    moto: Moto, tmp_path: Path
) -> None:
    script = page_script()
    assert "python3 - > navarch-aws.env" in script and "navarch apply fleet.yaml" in script
    _shims(tmp_path / "bin")
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("NAVARCH_", "AWS_"))}
    env = {
        **keep,
        **moto.env(),
        "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(REPO),
        "HOME": str(tmp_path),
        "NO_COLOR": "1",
    }
    run = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, f"the page's commands failed:\n{run.stdout}\n{run.stderr}"
    assert "fleet.yaml: valid. Fleet research" in run.stdout
    # The first apply, in observe, launched nothing and said what it would do.
    assert "would provision" in run.stdout
    assert re.search(r"research-train-0001 .* booting .*waiting for the first report", run.stdout)

    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=moto.endpoint)
    found = ec2.describe_instances(Filters=[{"Name": "tag:navarch-fleet", "Values": ["research"]}])[
        "Reservations"
    ]
    instances = [i for r in found for i in r["Instances"]]
    assert len(instances) == 2
    ids = dict(line.split("=", 1) for line in _exports(tmp_path / "navarch-aws.env"))
    assert {i["SubnetId"] for i in instances} == {ids["SUBNET_A"], ids["SUBNET_B"]}
    assert all(i["ImageId"] == ids["AMI"] for i in instances)
    assert all(i["KeyName"] == "navarch" for i in instances)
    assert all(i["IamInstanceProfile"]["Arn"].endswith("/navarch-node") for i in instances)
    assert all(
        [g["GroupId"] for g in i["SecurityGroups"]] == [ids["SECURITY_GROUP"]] for i in instances
    )
    s3 = boto3.client("s3", region_name=REGION, endpoint_url=moto.endpoint)
    state = s3.list_objects_v2(Bucket="my-navarch-state-111122223333", Prefix="research/state/")
    assert state.get("KeyCount", 0) >= 1
    assert (tmp_path / "navarch-key.pem").stat().st_mode & 0o077 == 0


def _exports(path: Path) -> list[str]:
    """NAME=VALUE pairs of the `export A=1 B=2` lines the page's snippet wrote."""
    return [pair for line in path.read_text().splitlines() for pair in line.split()[1:]]

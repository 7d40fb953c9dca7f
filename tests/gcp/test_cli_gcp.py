"""navarch's CLI end to end as a subprocess, on GCP: the fake Compute API + fake-gcs-server.

The child process reaches the fakes only through configuration: the fleet's
`api_endpoint` + `anonymous: true` for Compute, STORAGE_EMULATOR_HOST for GCS.
"""

from __future__ import annotations

import json
import os
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from tests.support.cli import concurrent_applies, kill_apply_mid_launch, run_navarch
from tests.support.fake_agent import agent_report, ecc_uncorrected

FLEET = "e2e"
SECRET = "0123456789abcdef0123456789abcdef"
ROOT = Path(__file__).resolve().parents[2]


def write_fleet(
    tmp_path: Path,
    endpoint: str,
    bucket: str,
    *,
    target: int = 3,
    zones: tuple[str, ...] = ("us-central1-a", "us-central1-b"),
    extra_pool: str = "",
) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(
        f"""\
fleet: {FLEET}
store: gs://{bucket}/navarch
secret: {{env: NAVARCH_FLEET_SECRET}}
providers:
  gce:
    type: gcp
    project: navarch-test
    api_endpoint: {endpoint}
    anonymous: true
    retry_deadline_s: 2
safety:
  lock_ttl: 15m
pools:
  train:
    provider: gce
    instance_types: [n1-standard-8, g2-standard-8]
    gpus_per_node: 1
    zones: [{", ".join(zones)}]
    nodes: {{min: 0, target: {target}, max: {target + 2}}}
    labels: {{team: ml}}
    health:
      unhealthy_after: 1
      boot_timeout: 1h
    gcp:
      accelerators:
        n1-standard-8: {{type: nvidia-tesla-t4, count: 1}}
{extra_pool}"""
    )
    return path


def navarch(
    args: list[str], env: dict[str, str], cwd: Path, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return run_navarch(args, cwd=cwd, env=env, inherit=False, timeout=timeout)


@pytest.fixture
def env(gcs_env: str) -> dict[str, str]:
    e = {
        k: v for k, v in os.environ.items() if not k.startswith(("GOOGLE_", "NAVARCH_", "CLOUDSDK"))
    }
    e.update(
        STORAGE_EMULATOR_HOST=gcs_env,
        GOOGLE_CLOUD_PROJECT="navarch-test",
        NAVARCH_FLEET_SECRET=SECRET,
        PYTHONPATH=str(ROOT),
    )
    return e


def instances(fake) -> dict[str, dict[str, Any]]:
    """name -> instance of the fleet in the fake."""
    return {
        name: inst
        for (_, name), inst in fake.instances.items()
        if inst.get("labels", {}).get("navarch-fleet") == FLEET
    }


def bucket_client() -> storage.Client:
    return storage.Client(project="navarch-test", credentials=AnonymousCredentials())


def test_converge_then_no_op(fake_compute, compute_endpoint, gcs_bucket, env, tmp_path) -> None:
    fleet = write_fleet(tmp_path, compute_endpoint, gcs_bucket)
    plan = navarch(["plan", str(fleet), "--detailed-exitcode"], env, tmp_path)
    assert plan.returncode == 2, plan.stderr
    run = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    got = instances(fake_compute)
    assert sorted(got) == [f"{FLEET}-train-{i:04d}" for i in range(1, 4)]
    for inst in got.values():
        assert inst["labels"]["navarch-pool"] == "train"
        assert inst["labels"]["team"] == "ml"
        assert inst["guestAccelerators"][0]["acceleratorType"].endswith("nvidia-tesla-t4")
        # The node's agent configuration arrives as cloud-init user-data.
        [item] = inst["metadata"]["items"]
        assert item["key"] == "user-data"
        assert item["value"].startswith("#cloud-config")
        assert f"# navarch node {inst['name']} of fleet {FLEET}" in item["value"]
        assert "/etc/navarch/agent.yaml" in item["value"]
    again = navarch(["plan", str(fleet), "--detailed-exitcode"], env, tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    # State lives in GCS.
    names = [b.name for b in bucket_client().list_blobs(gcs_bucket)]
    assert f"navarch/state/{FLEET}.json" in names
    assert f"navarch/state/{FLEET}.lock" not in names


def test_stockout_falls_over_to_next_zone(
    fake_compute, compute_endpoint, gcs_bucket, env, tmp_path
) -> None:
    fake_compute.stockout_zones.add("us-central1-a")
    fleet = write_fleet(tmp_path, compute_endpoint, gcs_bucket, target=2)
    run = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    got = instances(fake_compute)
    assert len(got) == 2
    assert {i["zone"].rsplit("/", 1)[-1] for i in got.values()} == {"us-central1-b"}
    assert {i["machineType"].rsplit("/", 1)[-1] for i in got.values()} == {"n1-standard-8"}
    # The stockout was seen on the operation, then zone b was tried.
    assert fake_compute.count("POST", r"/zones/us-central1-a/instances$") >= 1
    assert navarch(["plan", str(fleet), "--detailed-exitcode"], env, tmp_path).returncode == 0


def test_every_zone_out_falls_over_to_next_type(
    fake_compute, compute_endpoint, gcs_bucket, env, tmp_path
) -> None:
    fake_compute.stockout_zones.update({"us-central1-a"})
    fleet = write_fleet(tmp_path, compute_endpoint, gcs_bucket, target=1, zones=("us-central1-a",))
    run = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
    # Both types are out in the only zone: the action fails, nothing is launched.
    assert run.returncode == 1
    assert instances(fake_compute) == {}
    inserted = [c for c in fake_compute.calls if c[0] == "POST" and c[1].endswith("/instances")]
    assert len(inserted) == 2  # n1-standard-8, then g2-standard-8, each once


def test_killed_apply_does_not_duplicate(
    fake_compute, compute_endpoint, gcs_bucket, env, tmp_path
) -> None:
    fleet = write_fleet(tmp_path, compute_endpoint, gcs_bucket, target=3)
    fake_compute.hold_nth = 2  # the second instances.insert
    kill_apply_mid_launch(
        fleet, cwd=tmp_path, reached=fake_compute.holding, env=env, inherit=False, timeout_s=60
    )
    # The launch the killed run asked for still happens (its request was in flight).
    fake_compute.release.set()
    assert fake_compute.held_done.wait(30)
    # Launches run in parallel: the third insert may have gone through before the kill.
    assert len(instances(fake_compute)) in (2, 3)
    # The dead run's lock is still there: the next run is refused (exit 4)...
    blocked = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
    assert blocked.returncode == 4, blocked.stdout + blocked.stderr
    lock = json.loads(
        bucket_client().bucket(gcs_bucket).blob(f"navarch/state/{FLEET}.lock").download_as_bytes()
    )
    # ...until a human removes it.
    unlock = navarch(["force-unlock", str(fleet), lock["lock_id"]], env, tmp_path)
    assert unlock.returncode == 0, unlock.stderr
    run = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    got = instances(fake_compute)
    assert len(got) == 3
    assert len({i["labels"]["navarch-node"] for i in got.values()}) == 3
    assert navarch(["plan", str(fleet), "--detailed-exitcode"], env, tmp_path).returncode == 0


def test_foreign_instances_untouched(
    fake_compute, compute_endpoint, gcs_bucket, env, tmp_path
) -> None:
    fake_compute.add_instance("us-central1-a", "someone-elses-vm", {"team": "ml"})
    fake_compute.add_instance("us-central1-a", "other-fleet-vm", {"navarch-fleet": "other"})
    fake_compute.add_instance(
        "us-central1-b",
        "e2e-lookalike",
        {"navarch-pool": "train", "navarch-node": "e2e-train-0001"},
    )
    fleet = write_fleet(tmp_path, compute_endpoint, gcs_bucket, target=1)
    run = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    # Remove the fleet's nodes (destroy --force: a node that never reported is never
    # picked by scale-down, doubt never acts): only the fleet's own instance goes.
    run = navarch(["destroy", str(fleet), "--force", "--auto-approve"], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert instances(fake_compute) == {}
    assert {name for (_, name) in fake_compute.instances} == {
        "someone-elses-vm",
        "other-fleet-vm",
        "e2e-lookalike",
    }
    deleted = {c[1].rsplit("/", 1)[-1] for c in fake_compute.calls if c[0] == "DELETE"}
    assert deleted.isdisjoint({"someone-elses-vm", "other-fleet-vm", "e2e-lookalike"})


def _hours_from_now(hours: float) -> str:
    return (datetime.now(UTC) + timedelta(hours=hours)).isoformat()


def gcs_report(bucket: str, node: str, tmp_path: Path, **agent: Any) -> dict[str, Any]:
    """The real agent's report for `node` of this fleet, written to GCS (agent_report;
    agent: its keyword arguments)."""
    return agent_report(
        f"gs://{bucket}/navarch", node, tmp_path, fleet=FLEET, secret=SECRET, **agent
    )


def test_reports_in_gcs_drive_a_replacement(
    fake_compute, compute_endpoint, gcs_bucket, env, tmp_path
) -> None:
    fleet = write_fleet(tmp_path, compute_endpoint, gcs_bucket, target=2)
    # The replace path: a ladder without reset or reboot (tests/gcp/test_ladder_gcp.py).
    fleet.write_text(
        fleet.read_text().replace(
            "      boot_timeout: 1h\n", "      boot_timeout: 1h\n      remediation: [replace]\n"
        )
    )
    assert navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path).returncode == 0
    nodes = sorted(instances(fake_compute))
    sick, well = nodes
    assert gcs_report(gcs_bucket, well, tmp_path)["status"] == "healthy"
    assert (
        gcs_report(gcs_bucket, sick, tmp_path, faults=ecc_uncorrected(3))["status"] == "unhealthy"
    )

    # Run 1: the sick node is cordoned and drained, and its replacement surges in.
    run = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"cordon {sick}" in run.stdout
    got = instances(fake_compute)
    assert len(got) == 3 and {sick, well} < set(got)
    [replacement] = set(got) - {sick, well}
    assert got[replacement]["labels"]["navarch-pool"] == "train"

    # Its next report (no GPU processes left) shows the drain finished: run 2 terminates it.
    gcs_report(gcs_bucket, sick, tmp_path, faults=ecc_uncorrected(3))
    gcs_report(gcs_bucket, replacement, tmp_path)
    run = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert sorted(instances(fake_compute)) == sorted([well, replacement])


def test_eight_concurrent_applies_end_at_target(
    fake_compute, compute_endpoint, gcs_bucket, env, tmp_path
) -> None:
    fleet = write_fleet(tmp_path, compute_endpoint, gcs_bucket, target=3)
    concurrent_applies(fleet, cwd=tmp_path, env=env)
    got = instances(fake_compute)
    assert len(got) == 3
    assert len({i["labels"]["navarch-node"] for i in got.values()}) == 3
    assert navarch(["plan", str(fleet), "--detailed-exitcode"], env, tmp_path).returncode == 0

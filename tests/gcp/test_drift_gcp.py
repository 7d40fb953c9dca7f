"""Drift end to end on GCP: a changed machine type rolls the pool to new
instances on the local fake of the Compute API, reports in GCS (fake-gcs-server)."""

from __future__ import annotations

from pathlib import Path

from tests.gcp.test_cli_gcp import (  # noqa: F401 - env is a fixture
    env,
    gcs_report,
    instances,
    navarch,
    write_fleet,
)


def test_changed_machine_type_rolls_to_new_instances(
    fake_compute,
    compute_endpoint,
    gcs_bucket,
    env,
    tmp_path: Path,  # noqa: F811
) -> None:
    fleet = write_fleet(tmp_path, compute_endpoint, gcs_bucket, target=1)
    run = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    [old] = instances(fake_compute)
    assert instances(fake_compute)[old]["machineType"].endswith("/n1-standard-8")

    fleet.write_text(fleet.read_text().replace("[n1-standard-8, g2-standard-8]", "[g2-standard-8]"))
    plan = navarch(["plan", str(fleet), "--detailed-exitcode"], env, tmp_path)
    assert plan.returncode == 2, plan.stdout + plan.stderr
    assert "instance type n1-standard-8 is no longer in instance_types" in plan.stdout

    for _ in range(6):  # surge, retire once the replacement reports healthy, terminate
        for node in instances(fake_compute):
            gcs_report(gcs_bucket, node, tmp_path)
        if navarch(["plan", str(fleet), "--detailed-exitcode"], env, tmp_path).returncode == 0:
            break
        run = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
        assert run.returncode == 0, run.stdout + run.stderr
        assert len(instances(fake_compute)) <= 3  # max (target 1 + 2) + surge 1 never passed
    got = instances(fake_compute)
    assert old not in got and len(got) == 1
    assert all(i["machineType"].endswith("/g2-standard-8") for i in got.values())

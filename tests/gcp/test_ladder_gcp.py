"""The remediation ladder's reboot on GCP: the fake Compute API and fake-gcs-server.

A node whose agent reports uncorrectable ECC errors is cordoned and drained, then restarted
in place through instances.reset (never deleted), and returns to service after
return_after healthy reports from its new boot.
"""

from __future__ import annotations

from tests.gcp.test_cli_gcp import env, gcs_report, instances, navarch, write_fleet  # noqa: F401
from tests.support.fake_agent import ecc_uncorrected


def test_ecc_fault_resets_the_vm_in_place_and_returns_it(
    fake_compute, compute_endpoint, gcs_bucket, env, tmp_path
) -> None:  # noqa: F811
    fleet = write_fleet(tmp_path, compute_endpoint, gcs_bucket, target=1)
    fleet.write_text(
        fleet.read_text().replace(
            "      boot_timeout: 1h\n",
            "      boot_timeout: 1h\n      replacement: after-terminate\n      return_after: 2\n",
        )
    )
    apply = ["apply", str(fleet), "--auto-approve"]
    assert navarch(apply, env, tmp_path).returncode == 0
    [node] = instances(fake_compute)
    started = instances(fake_compute)[node].get("lastStartTimestamp")

    report = gcs_report(gcs_bucket, node, tmp_path, boot_id="boot-a", faults=ecc_uncorrected(3))
    assert report["status"] == "unhealthy", report
    run = navarch(apply, env, tmp_path)
    assert f"cordon {node}" in run.stdout, run.stdout + run.stderr

    out = ""
    for _ in range(5):  # a report made after the drain began shows no GPU processes
        gcs_report(gcs_bucket, node, tmp_path, boot_id="boot-a", faults=ecc_uncorrected(3))
        out = navarch(apply, env, tmp_path).stdout
        if f"~ reboot {node}" in out:
            break
    assert f"~ reboot {node}" in out, out
    assert instances(fake_compute)[node].get("lastStartTimestamp") != started  # reset

    for _ in range(2):  # return_after 2 healthy reports from the new boot
        assert gcs_report(gcs_bucket, node, tmp_path, boot_id="boot-b")["status"] == "healthy"
        run = navarch(apply, env, tmp_path)
        assert run.returncode == 0, run.stdout + run.stderr
    assert f"~ uncordon {node}" in run.stdout, run.stdout
    assert list(instances(fake_compute)) == [node]  # the same VM, never deleted
    assert navarch(["plan", str(fleet), "--detailed-exitcode"], env, tmp_path).returncode == 0

"""A node replaced for a hardware fault on GCP, end to end through the CLI, the fake
Compute API and fake-gcs-server: its host is reported with instances.reportHostAsFaulty
before the VM is deleted, and `history` names the host and topology."""

from __future__ import annotations

from tests.gcp.test_cli_gcp import env, gcs_report, instances, navarch, write_fleet  # noqa: F401
from tests.support.fake_agent import ecc_uncorrected

HOST = "/b1/sb2/h3"
TOPOLOGY = {"cluster": "us-central1-cluster-x", "block": "b1", "subblock": "sb2", "host": "h3"}


def test_an_ecc_replacement_reports_its_host_then_deletes_the_vm(
    fake_compute, compute_endpoint, gcs_bucket, env, tmp_path
) -> None:  # noqa: F811
    fleet = write_fleet(tmp_path, compute_endpoint, gcs_bucket, target=1)
    fleet.write_text(
        fleet.read_text().replace(
            "      boot_timeout: 1h\n",
            "      boot_timeout: 1h\n      replacement: after-terminate\n"
            "      remediation: [replace]\n",
        )
    )
    apply = ["apply", str(fleet), "--auto-approve"]
    assert navarch(apply, env, tmp_path).returncode == 0
    [node] = instances(fake_compute)
    zone = instances(fake_compute)[node]["zone"].rsplit("/", 1)[-1]
    fake_compute.set_status(
        zone,
        node,
        "RUNNING",
        scheduling={"provisioningModel": "RESERVATION_BOUND"},
        resourceStatus={"physicalHost": HOST, "physicalHostTopology": TOPOLOGY},
    )

    out = ""
    for _ in range(5):  # cordon, drain, then (no GPU processes) terminate
        gcs_report(gcs_bucket, node, tmp_path, boot_id="boot-a", faults=ecc_uncorrected(3))
        out = navarch(apply, env, tmp_path).stdout
        if f"- terminate {node}" in out:
            break
    assert f"- terminate {node}" in out, out
    assert f"host {HOST} reported faulty to Compute Engine" in out, out
    ((where, name, body, _),) = fake_compute.host_reports
    assert (where, name) == (zone, node)
    assert body["disruptionSchedule"] == "IMMEDIATE"
    assert body["faultReasons"][0]["behavior"] == "UNRECOVERABLE_GPU_ERROR"
    assert node not in instances(fake_compute)
    history = navarch(["history", str(fleet), node], env, tmp_path).stdout
    assert f"host {HOST}, topology us-central1-cluster-x/b1/sb2/h3" in history, history

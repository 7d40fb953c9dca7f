"""The remediation ladder's reboot on GCP: the fake Compute API and fake-gcs-server.

A node whose agent reports uncorrectable ECC errors is cordoned and drained, then restarted
in place through instances.reset (never deleted), and returns to service after
return_after healthy reports from its new boot.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.gcp.test_cli_gcp import FLEET, SECRET, env, instances, navarch, write_fleet  # noqa: F401


def _report(
    bucket: str, node: str, tmp_path: Path, boot_id: str, *, ecc_errors: int = 0
) -> dict[str, Any]:
    """Run the real agent once for `node` (fake GPU) booted as boot_id; write it to GCS."""
    from navarch.agent import AgentConfig, run_once
    from navarch.signing import derive_node_key

    faults = tmp_path / f"{node}.faults.json"
    faults.write_text(json.dumps({"ecc_uncorrected": {"0": ecc_errors}} if ecc_errors else {}))
    config = AgentConfig(
        fleet=FLEET,
        pool="train",
        node=node,
        instance_id=node,
        store=f"gs://{bucket}/navarch",
        key=derive_node_key(SECRET.encode(), FLEET, node).hex(),
        gpus_per_node=1,
        state_file=str(tmp_path / f"{node}.agent.json"),
        kernel_log=str(tmp_path / f"{node}.{boot_id}.kern.log"),
        fake_gpu=True,
        gpu_count=1,
        faults_file=str(faults),
        boot_id=boot_id,
        metadata="none",
    )
    return run_once(config)


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

    report = _report(gcs_bucket, node, tmp_path, "boot-a", ecc_errors=3)
    assert report["status"] == "unhealthy", report
    run = navarch(apply, env, tmp_path)
    assert f"cordon {node}" in run.stdout, run.stdout + run.stderr

    out = ""
    for _ in range(5):  # a report made after the drain began shows no GPU processes
        _report(gcs_bucket, node, tmp_path, "boot-a", ecc_errors=3)
        out = navarch(apply, env, tmp_path).stdout
        if f"~ reboot {node}" in out:
            break
    assert f"~ reboot {node}" in out, out
    assert instances(fake_compute)[node].get("lastStartTimestamp") != started  # reset

    for _ in range(2):  # return_after 2 healthy reports from the new boot
        assert _report(gcs_bucket, node, tmp_path, "boot-b")["status"] == "healthy"
        run = navarch(apply, env, tmp_path)
        assert run.returncode == 0, run.stdout + run.stderr
    assert f"~ uncordon {node}" in run.stdout, run.stdout
    assert list(instances(fake_compute)) == [node]  # the same VM, never deleted
    assert navarch(["plan", str(fleet), "--detailed-exitcode"], env, tmp_path).returncode == 0

"""navarch's CLI end to end as a subprocess on Azure: the local ARM fake for Compute and
Network, Azurite for Blob Storage (reports, state, lock).

The child reaches the fakes only through configuration: the provider's `base_url` plus
NAVARCH_AZURE_TOKEN for ARM, AZURE_STORAGE_CONNECTION_STRING for Blob.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from azure.storage.blob import BlobServiceClient

from tests.support.azure_servers import ACCOUNT
from tests.support.cli import concurrent_applies, kill_apply_mid_launch, run_navarch
from tests.support.fake_agent import agent_report, ecc_uncorrected
from tests.support.fake_arm import SUB, TOKEN, FakeARM

FLEET = "e2e"
SECRET = "0123456789abcdef0123456789abcdef"
ROOT = Path(__file__).resolve().parents[2]
SUBNET = f"/subscriptions/{SUB}/resourceGroups/net/providers/Microsoft.Network/virtualNetworks/v/subnets/gpu"
SMALL, LARGE = "Standard_NC4as_T4_v3", "Standard_NC8as_T4_v3"


def write_fleet(
    tmp_path: Path, endpoint: str, container: str, *, target: int = 3, remediation: str = ""
) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(f"""\
fleet: {FLEET}
store: az://{ACCOUNT}/{container}/navarch
secret: {{env: NAVARCH_FLEET_SECRET}}
providers:
  azr:
    type: azure
    subscription_id: {SUB}
    resource_group: gpu-rg
    base_url: {endpoint}
    retry_total: 1
safety:
  lock_ttl: 15m
pools:
  train:
    provider: azr
    instance_types: [{SMALL}, {LARGE}]
    gpus_per_node: 1
    zones: [eastus-1, eastus-2]
    nodes: {{min: 0, target: {target}, max: {target + 2}}}
    labels: {{team: ml}}
    health:
      unhealthy_after: 1
      boot_timeout: 1h
{remediation}    azure:
      subnet_id: {SUBNET}
""")
    return path


def env_for(azurite: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("AZURE_", "NAVARCH_"))}
    e.update(
        AZURE_STORAGE_CONNECTION_STRING=azurite,
        NAVARCH_AZURE_TOKEN=TOKEN,
        NAVARCH_FLEET_SECRET=SECRET,
        PYTHONPATH=str(ROOT),
    )
    return e


def navarch(
    args: list[str], env: dict[str, str], cwd: Path, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return run_navarch(args, cwd=cwd, env=env, inherit=False, timeout=timeout)


def vms(fake: FakeARM) -> dict[str, dict[str, Any]]:
    """name -> VM of the fleet in the fake."""
    return {
        name: vm
        for (_, name), vm in fake.vms.items()
        if vm.get("tags", {}).get("navarch-fleet") == FLEET
    }


def blob_names(azurite: str, container: str) -> list[str]:
    client = BlobServiceClient.from_connection_string(azurite).get_container_client(container)
    return [b.name for b in client.list_blobs()]


def test_converge_then_no_op(
    fake_arm: FakeARM, arm_endpoint: str, azurite: str, az_container: str, tmp_path: Path
) -> None:
    env = env_for(azurite)
    fleet = write_fleet(tmp_path, arm_endpoint, az_container)
    plan = navarch(["plan", str(fleet), "--detailed-exitcode"], env, tmp_path)
    assert plan.returncode == 2, plan.stdout + plan.stderr
    run = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    got = vms(fake_arm)
    assert sorted(got) == [f"{FLEET}-train-{i:04d}" for i in range(1, 4)]
    for vm in got.values():
        assert vm["tags"]["team"] == "ml" and vm["tags"]["navarch-pool"] == "train"
        user_data = base64.b64decode(vm["properties"]["osProfile"]["customData"]).decode()
        assert user_data.startswith("#cloud-config")
        assert "/etc/navarch/agent.yaml" in user_data
        # The agent reads Azure Scheduled Events (spot eviction, maintenance).
        assert 'metadata: "azure"' in user_data
    again = navarch(["plan", str(fleet), "--detailed-exitcode"], env, tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    names = blob_names(azurite, az_container)
    assert f"navarch/state/{FLEET}.json" in names
    assert f"navarch/state/{FLEET}.lock" not in names


@pytest.mark.parametrize("when", ["no_capacity", "fails_later"])
def test_allocation_failed_falls_over_to_next_zone(
    fake_arm: FakeARM,
    arm_endpoint: str,
    azurite: str,
    az_container: str,
    tmp_path: Path,
    when: str,
) -> None:
    # no_capacity: the VM PUT is refused (409); fails_later: it is accepted and its
    # operation ends Failed with AllocationFailed, leaving a Failed VM behind.
    env = env_for(azurite)
    getattr(fake_arm, when).add(f"eastus-1/{SMALL}")
    fleet = write_fleet(tmp_path, arm_endpoint, az_container, target=2)
    run = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    got = vms(fake_arm)
    assert len(got) == 2
    assert {tuple(vm["zones"]) for vm in got.values()} == {("2",)}
    assert {vm["properties"]["hardwareProfile"]["vmSize"] for vm in got.values()} == {SMALL}
    # No NIC is left behind by the failed launches.
    assert set(fake_arm.nics) == {f"{n}-nic" for n in got}
    assert navarch(["plan", str(fleet), "--detailed-exitcode"], env, tmp_path).returncode == 0


def test_killed_apply_does_not_duplicate(
    fake_arm: FakeARM, arm_endpoint: str, azurite: str, az_container: str, tmp_path: Path
) -> None:
    env = env_for(azurite)
    fleet = write_fleet(tmp_path, arm_endpoint, az_container, target=3)
    fake_arm.hold_nth = 2  # the second VM PUT
    kill_apply_mid_launch(
        fleet, cwd=tmp_path, reached=fake_arm.holding, env=env, inherit=False, timeout_s=60
    )
    fake_arm.release.set()
    assert fake_arm.held_done.wait(30)
    # Launches run in parallel: the others finished while the second PUT was held.
    assert 2 <= len(vms(fake_arm)) <= 3
    blocked = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
    assert blocked.returncode == 4, blocked.stdout + blocked.stderr
    client = BlobServiceClient.from_connection_string(azurite).get_container_client(az_container)
    lock = json.loads(client.download_blob(f"navarch/state/{FLEET}.lock").readall())
    unlock = navarch(["force-unlock", str(fleet), lock["lock_id"]], env, tmp_path)
    assert unlock.returncode == 0, unlock.stderr
    run = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    got = vms(fake_arm)
    assert len(got) == 3 and len({vm["tags"]["navarch-node"] for vm in got.values()}) == 3
    assert navarch(["plan", str(fleet), "--detailed-exitcode"], env, tmp_path).returncode == 0


def test_foreign_vms_untouched(
    fake_arm: FakeARM, arm_endpoint: str, azurite: str, az_container: str, tmp_path: Path
) -> None:
    env = env_for(azurite)
    fake_arm.add_foreign("gpu-rg", "someone-elses-vm")
    fleet = write_fleet(tmp_path, arm_endpoint, az_container, target=1)
    assert navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path).returncode == 0
    fleet = write_fleet(tmp_path, arm_endpoint, az_container, target=0)
    run = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    # Scale-down cordons and drains first; with no report the drain ends at drain_timeout,
    # so later runs are told (NAVARCH_NOW) that they run hours later.
    for hours in (2, 4, 6):
        later = {**env, "NAVARCH_NOW": (datetime.now(UTC) + timedelta(hours=hours)).isoformat()}
        run = navarch(["apply", str(fleet), "--auto-approve"], later, tmp_path)
        assert run.returncode == 0, run.stdout + run.stderr
        if not vms(fake_arm):
            break
    assert vms(fake_arm) == {}, run.stdout
    assert [name for (_, name) in fake_arm.vms] == ["someone-elses-vm"]
    deleted = {c.path.rsplit("/", 1)[-1] for c in fake_arm.calls if c.method == "DELETE"}
    assert "someone-elses-vm" not in deleted


def blob_report(container: str, node: str, tmp_path: Path, **agent: Any) -> dict[str, Any]:
    """The real agent's report for `node` of this fleet, written to Blob (agent_report;
    agent: its keyword arguments)."""
    store = f"az://{ACCOUNT}/{container}/navarch"
    return agent_report(store, node, tmp_path, fleet=FLEET, secret=SECRET, **agent)


def test_reports_in_blob_drive_a_replacement(
    fake_arm: FakeARM, arm_endpoint: str, azurite: str, az_container: str, tmp_path: Path
) -> None:
    env = env_for(azurite)
    fleet = write_fleet(
        tmp_path, arm_endpoint, az_container, target=2, remediation="      remediation: [replace]\n"
    )
    assert navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path).returncode == 0
    sick, well = sorted(vms(fake_arm))
    assert blob_report(az_container, well, tmp_path)["status"] == "healthy"
    assert (
        blob_report(az_container, sick, tmp_path, faults=ecc_uncorrected(3))["status"]
        == "unhealthy"
    )
    run = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"cordon {sick}" in run.stdout
    got = vms(fake_arm)
    assert len(got) == 3 and {sick, well} < set(got)
    [replacement] = set(got) - {sick, well}
    # Blob Last-Modified has one-second resolution: a report stored in the second the drain
    # began may look older than it, and a drain only counts reports stored after it began
    # (the node then waits one more report, the safe side). Step past that second.
    time.sleep(1.1)
    blob_report(az_container, sick, tmp_path, faults=ecc_uncorrected(3))
    blob_report(az_container, replacement, tmp_path)
    run = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert sorted(vms(fake_arm)) == sorted([well, replacement])
    # The sick node's VM went with its NIC and OS disk.
    assert f"{sick}-nic" not in fake_arm.nics and f"{sick}-osdisk" not in fake_arm.disks


def test_eight_concurrent_applies_end_at_target(
    fake_arm: FakeARM, arm_endpoint: str, azurite: str, az_container: str, tmp_path: Path
) -> None:
    env = env_for(azurite)
    fleet = write_fleet(tmp_path, arm_endpoint, az_container, target=3)
    concurrent_applies(fleet, cwd=tmp_path, env=env)
    got = vms(fake_arm)
    assert len(got) == 3 and len({vm["tags"]["navarch-node"] for vm in got.values()}) == 3
    assert navarch(["plan", str(fleet), "--detailed-exitcode"], env, tmp_path).returncode == 0

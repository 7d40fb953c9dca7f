"""The agent on Azure, end to end on the ARM fake and Azurite: apply publishes the bundle
to Blob Storage and the VM's customData fetches it through a read-only SAS; the installed
agent runs once under `python3 -I -S` and writes its report with its own stdlib Blob
client (Shared Key from the connection string here, the managed identity's token on a
VM); the next plan accepts it."""

from __future__ import annotations

import base64
import hashlib
import json
import urllib.parse
from pathlib import Path

from tests.azure.test_cli_azure import FLEET, env_for, navarch, vms, write_fleet
from tests.support.fake_arm import FakeARM
from tests.support.userdata import bundle_source, run_installed_agent, run_user_data


def test_azure_node_installs_the_bundle_by_sas_and_plan_accepts_its_report(
    fake_arm: FakeARM, arm_endpoint: str, azurite: str, az_container: str, tmp_path: Path
) -> None:
    env = env_for(azurite)
    fleet = write_fleet(tmp_path, arm_endpoint, az_container, target=2)
    run = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    node, vm = sorted(vms(fake_arm).items())[0]
    user_data = base64.b64decode(vm["properties"]["osProfile"]["customData"]).decode()
    source = bundle_source(user_data)
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(source.url).query))
    assert query["sp"] == "r" and "se" in query and "sig" in query  # read-only, expiring

    installed = run_user_data(user_data, tmp_path / "node-root")
    bundle = tmp_path / "node-root/usr/local/lib/navarch/navarch-agent.pyz"
    assert hashlib.sha256(bundle.read_bytes()).hexdigest() == source.sha256
    agent = run_installed_agent(
        installed, {"NAVARCH_FAKE_GPU": "true", "AZURE_STORAGE_CONNECTION_STRING": azurite}
    )
    assert agent.returncode == 0, agent.stdout + agent.stderr

    status = navarch(["status", str(fleet), "--json"], env, tmp_path)
    assert status.returncode == 0, status.stderr
    views = {n["node"]: n for p in json.loads(status.stdout)["pools"] for n in p["nodes"]}
    assert views[node]["lifecycle"] == "healthy"
    assert FLEET in node


def arm_action(method: str, path: str) -> str:
    """The Azure RBAC action of one ARM REST call (Azure resource provider operations)."""
    segments = path.split("?")[0].strip("/").split("/")
    if "providers" not in segments:
        return f"unknown:{method} {path}"
    i = segments.index("providers")
    namespace, kind = segments[i + 1], segments[i + 2]
    rest = segments[i + 3 :]
    if method == "GET" and kind == "locations" and rest[1:] == ["usages"]:
        return f"{namespace}/locations/usages/read"  # a location's quota usages
    if len(rest) >= 2 and method == "POST":
        return f"{namespace}/{kind}/{rest[1]}/action"
    verb = {"GET": "read", "PUT": "write", "PATCH": "write", "DELETE": "delete"}[method]
    return f"{namespace}/{kind}/{verb}"


def test_every_arm_call_is_in_the_reconciler_role(
    fake_arm: FakeARM, arm_endpoint: str, azurite: str, az_container: str, tmp_path: Path
) -> None:
    env = env_for(azurite)
    fleet = write_fleet(tmp_path, arm_endpoint, az_container, target=1)
    assert navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path).returncode == 0
    (node,) = vms(fake_arm)
    fleet.write_text(fleet.read_text().replace("labels: {team: ml}", "labels: {team: ai}"))
    assert navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path).returncode == 0
    run = navarch(["reboot", str(fleet), node, "--force"], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    run = navarch(["destroy", str(fleet), "--force", "--auto-approve"], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    used = {arm_action(c.method, c.path) for c in fake_arm.calls}
    policies = Path(__file__).resolve().parents[2] / "docs/policies"
    role = json.loads((policies / "azure-reconciler-role.json").read_text())
    # Preflight's subscription-level reads: their own role, assigned on the subscription.
    preflight = json.loads((policies / "azure-preflight-role.json").read_text())
    assert "Microsoft.Compute/virtualMachines/restart/action" in used
    assert "Microsoft.Compute/virtualMachines/delete" in used
    assert set(preflight["Actions"]) <= used
    assert used - set(role["Actions"]) - set(preflight["Actions"]) == set(), sorted(used)

"""The agent on GCP, delivered and held to least privilege: apply publishes the bundle to
GCS; a node's user-data (from the fake Compute API's instance metadata) installs it in a
scratch root; the agent runs once under `python3 -I -S` and writes its report through its
own stdlib GCS client; the next plan accepts it. Every Compute and GCS request of the
reconciler and the agent is recorded and must be allowed by docs/policies/."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.gcp.test_cli_gcp import env, navarch  # noqa: F401 - env is a fixture
from tests.support.gcs_log import GcsCall, GcsLog, recording_proxy
from tests.support.userdata import bundle_source, run_installed_agent, run_user_data

REPO = Path(__file__).resolve().parents[2]
POLICIES = REPO / "docs" / "policies"
FLEET = "research"  # the names the policy files use
POOL = "train"


def role_permissions(doc: dict[str, Any] | None = None) -> set[str]:
    doc = doc or yaml.safe_load((POLICIES / "gcp-reconciler-role.yaml").read_text())
    return set(doc["includedPermissions"])


def node_binding() -> dict[str, Any]:
    return json.loads((POLICIES / "gcp-node-binding.json").read_text())


def node_allows(call: GcsCall, bucket: str, binding: dict[str, Any]) -> bool:
    """Does the nodes' conditional binding allow call on bucket (the policy's bucket name
    replaced by the test's)?"""
    expression = binding["binding"]["condition"]["expression"].replace("my-navarch-state", bucket)
    starts = re.findall(r'startsWith\("([^"]*)"\)', expression)
    ends = re.findall(r'endsWith\("([^"]*)"\)', expression)
    resource = f"projects/_/buckets/{bucket}/objects/{call.name}"
    return (
        call.permission in binding["role"]["includedPermissions"]
        and all(resource.startswith(s) for s in starts)
        and all(resource.endswith(e) for e in ends)
    )


def compute_permission(method: str, path: str) -> str:
    """The Compute Engine IAM permission of one REST call (Compute Engine API reference)."""
    segments = path.split("?")[0].strip("/").split("/")
    if "operations" in segments:
        return "compute.zoneOperations.get"
    read = _preflight_permission(segments) if method == "GET" else None
    if read is not None:
        return read
    if "instances" not in segments:
        return f"compute.unknown:{method} {path}"
    rest = segments[segments.index("instances") + 1 :]
    if not rest:
        return "compute.instances.list" if method == "GET" else "compute.instances.create"
    if len(rest) == 1:
        return {"GET": "compute.instances.get", "DELETE": "compute.instances.delete"}.get(
            method, f"compute.unknown:{method} {path}"
        )
    return f"compute.instances.{rest[1]}"


def _preflight_permission(segments: list[str]) -> str | None:
    """The permission of one of preflight's reads (projects.get, zones.get,
    machineTypes.get, images.get / getFromFamily, regions.get), else None."""
    after = segments[segments.index("projects") + 2 :]
    if not after:
        return "compute.projects.get"
    if "machineTypes" in after:
        return "compute.machineTypes.get"
    if after[:2] == ["global", "images"]:
        family = after[2:3] == ["family"]
        return "compute.images.getFromFamily" if family else "compute.images.get"
    if len(after) == 2 and after[0] in ("zones", "regions"):
        return f"compute.{after[0]}.get"
    return None


def write_fleet(tmp_path: Path, endpoint: str, bucket: str, team: str) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(f"""\
fleet: {FLEET}
store: gs://{bucket}/{FLEET}
secret: {{env: NAVARCH_FLEET_SECRET}}
status_page: true
providers:
  gce: {{type: gcp, project: navarch-test, api_endpoint: {endpoint}, anonymous: true,
         retry_deadline_s: 2}}
pools:
  {POOL}:
    provider: gce
    instance_types: [n1-standard-8]
    gpus_per_node: 1
    zones: [us-central1-a]
    nodes: {{min: 0, target: 2, max: 3}}
    labels: {{team: {team}}}
    health: {{boot_timeout: 1h}}
    gcp:
      accelerators:
        n1-standard-8: {{type: nvidia-tesla-t4, count: 1}}
""")
    return path


@pytest.fixture
def journey(fake_compute, compute_endpoint, gcs_bucket, env, tmp_path):  # noqa: F811
    """Run a fleet's life through a recording GCS proxy; returns what was seen."""
    reconciler, agent = GcsLog(), GcsLog()
    with (
        recording_proxy(env["STORAGE_EMULATOR_HOST"], reconciler) as proxy_r,
        recording_proxy(env["STORAGE_EMULATOR_HOST"], agent) as proxy_a,
    ):
        renv = {**env, "STORAGE_EMULATOR_HOST": proxy_r}

        def cli(*args: str) -> None:
            run = navarch(list(args), renv, tmp_path)
            assert run.returncode in (0, 2), run.stdout + run.stderr

        fleet = write_fleet(tmp_path, compute_endpoint, gcs_bucket, "ml")
        cli("apply", str(fleet), "--auto-approve")
        nodes = {
            n: i
            for (_, n), i in fake_compute.instances.items()
            if i.get("labels", {}).get("navarch-fleet") == FLEET
        }
        node = sorted(nodes)[0]
        [item] = nodes[node]["metadata"]["items"]
        user_data = item["value"]
        installed = run_user_data(user_data, tmp_path / "node-root")
        run = run_installed_agent(
            installed, {"NAVARCH_FAKE_GPU": "true", "STORAGE_EMULATOR_HOST": proxy_a}
        )
        assert run.returncode == 0, run.stdout + run.stderr
        status = navarch(["status", str(fleet), "--json"], renv, tmp_path)
        assert status.returncode == 0, status.stderr
        views = {n["node"]: n for p in json.loads(status.stdout)["pools"] for n in p["nodes"]}
        write_fleet(tmp_path, compute_endpoint, gcs_bucket, "research")
        cli("apply", str(fleet), "--auto-approve")  # labels in place: setLabels
        cli("reboot", str(fleet), node, "--force")  # reset
        cli("destroy", str(fleet), "--force", "--auto-approve")  # delete
    compute = {compute_permission(c.method, c.path) for c in fake_compute.calls}
    return {
        "reconciler": reconciler,
        "agent": agent,
        "compute": compute,
        "node": node,
        "views": views,
        "user_data": user_data,
        "bucket": gcs_bucket,
    }


def test_gcp_node_installs_the_published_bundle_and_plan_accepts_its_report(journey) -> None:
    source = bundle_source(journey["user_data"])
    assert f"/o/{FLEET}%2Fagent%2F0.1.0-{source.sha256}.pyz" in source.url
    assert journey["views"][journey["node"]]["lifecycle"] == "healthy"


def test_every_gcp_call_is_in_the_reconciler_role(journey) -> None:
    compute, storage = journey["compute"], journey["reconciler"].permissions()
    for expected in (
        "compute.instances.create",
        "compute.instances.setLabels",
        "compute.instances.reset",
        "compute.instances.delete",
        "storage.objects.create",
        "storage.objects.list",
    ):
        assert expected in compute | storage, sorted(compute | storage)
    assert (compute | storage) - role_permissions() == set()
    doc = copy.deepcopy(yaml.safe_load((POLICIES / "gcp-reconciler-role.yaml").read_text()))
    doc["includedPermissions"].remove("compute.instances.reset")
    assert (compute | storage) - role_permissions(doc) == {"compute.instances.reset"}


def test_the_gcp_node_writes_only_its_own_report(journey) -> None:
    calls = journey["agent"].calls
    own = f"{FLEET}/health/{FLEET}/{POOL}/{journey['node']}.json"
    assert {c.name for c in calls} == {own}
    binding = node_binding()
    assert all(node_allows(c, journey["bucket"], binding) for c in calls)
    for elsewhere in (
        f"{FLEET}/state/{FLEET}.lock",
        f"{FLEET}/status/{FLEET}/index.html",
        f"{FLEET}/health/{FLEET}/infer/x.json",
        f"{FLEET}/agent/x.pyz",
    ):
        assert not node_allows(
            GcsCall("storage.objects.create", elsewhere), journey["bucket"], binding
        )

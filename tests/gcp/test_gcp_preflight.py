"""GCE preflight through the real google-cloud-compute REST client against the fake Compute
API (tests/support/fake_compute.py: projects.get, zones.get, machineTypes.get, images.get /
getFromFamily, regions.get), and `navarch plan` on it: every gap at once, each naming the
fleet.yaml key to change; a denied read is a note naming the permission, never a stop."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from navarch.providers.gcp import GcpProvider
from navarch.providers.gcp_preflight import image_reference
from navarch.providers.preflight import Check, LaunchNeeds, Preflight, Verdict
from tests.support.cli import in_process
from tests.support.fake_compute import FakeCompute
from tests.support.providers import FLEET, gcp_provider, train_needs

SECRET = "0123456789abcdef0123456789abcdef"


def _provider(endpoint: str, **extra: object) -> GcpProvider:
    provider = gcp_provider(endpoint, FLEET, **extra)
    assert isinstance(provider, GcpProvider)
    return provider


def _need(
    zones: tuple[str, ...] = ("us-central1-a", "us-central1-b"),
    types: tuple[str, ...] = ("a3-highgpu-8g",),
    **kw: Any,
) -> LaunchNeeds:
    return train_needs(zones, types, **kw)


def test_a_machine_type_a_zone_does_not_offer_is_a_gap_naming_instance_types(
    fake_compute: FakeCompute, compute_endpoint: str
) -> None:
    fake_compute.unoffered.add(("us-central1-b", "a3-highgpu-8g"))
    result = Preflight.of(_provider(compute_endpoint).preflight([_need()]))
    (gap,) = result.gaps
    assert (gap.check, gap.where) == (Check.OFFERING, "gcp")
    assert gap.line() == (
        "pool train: a3-highgpu-8g in us-central1-b: machine type not offered in this zone -> "
        "drop us-central1-b from zones or a3-highgpu-8g from instance_types (or move them to "
        "a placement of their own) (pools.train.instance_types)"
    )
    assert result.blocks
    assert fake_compute.count("GET", r"/zones/us-central1-b/machineTypes/a3-highgpu-8g$") == 1


def test_a_fleet_that_fits_the_project_has_no_findings(
    fake_compute: FakeCompute, compute_endpoint: str
) -> None:
    fake_compute.region_quotas["us-central1"] = {"NVIDIA_H100_GPUS": (64, 0)}
    assert _provider(compute_endpoint).preflight([_need()]) == []


def test_a_zone_that_does_not_exist_and_a_missing_image_family_are_gaps_with_their_keys(
    fake_compute: FakeCompute, compute_endpoint: str
) -> None:
    fake_compute.missing_zones.add("us-central1-q")
    fake_compute.missing_images.add("my-images/family/gpu-node")
    need = _need(
        ("us-central1-a", "us-central1-q"), image="projects/my-images/global/images/family/gpu-node"
    )
    gaps = {f.check: f for f in Preflight.of(_provider(compute_endpoint).preflight([need])).gaps}
    assert set(gaps) == {Check.ZONE, Check.IMAGE}  # the missing zone's machine type: unread
    assert gaps[Check.ZONE].key_path == "pools.train.zones"
    assert gaps[Check.ZONE].subject == "pool train: zone us-central1-q"
    assert gaps[Check.IMAGE].key_path == "pools.train.gcp.image"
    assert "no such image family in project my-images" in gaps[Check.IMAGE].detail


def test_the_regional_gpu_quota_of_the_machine_types_accelerator_is_checked(
    fake_compute: FakeCompute, compute_endpoint: str
) -> None:
    fake_compute.region_quotas["us-central1"] = {
        "NVIDIA_H100_GPUS": (4, 0),  # below one node of 8
        "PREEMPTIBLE_NVIDIA_H100_GPUS": (12, 0),  # one node, not the pool's max of 2
    }
    provider = _provider(compute_endpoint)
    (gap,) = provider.preflight([_need()])
    assert (gap.check, gap.verdict) == (Check.QUOTA, Verdict.GAP)
    assert gap.subject == "pool train: GPU quota NVIDIA_H100_GPUS in us-central1 (a3-highgpu-8g)"
    assert gap.detail == "4 GPUs allowed, one node needs 8"
    (note,) = provider.preflight([_need(spot=True)])  # Spot VMs: the preemptible quota
    assert note.verdict is Verdict.WARNING
    assert note.detail == "12 GPUs allowed, the pool's max needs 16"


def test_an_n1_pools_attached_gpus_count_against_their_quota_and_the_projects_total(
    fake_compute: FakeCompute, compute_endpoint: str
) -> None:
    fake_compute.region_quotas["us-central1"] = {"NVIDIA_T4_GPUS": (8, 7)}
    fake_compute.project_quotas["GPUS_ALL_REGIONS"] = (0, 0)
    need = _need(
        ("us-central1-a",),
        ("n1-standard-8",),
        accelerators={"n1-standard-8": {"type": "nvidia-tesla-t4", "count": 2}},
    )
    found = {f.subject: f for f in _provider(compute_endpoint).preflight([need])}
    total = found["pool train: GPU quota GPUS_ALL_REGIONS (n1-standard-8)"]
    assert (total.verdict, total.detail) == (Verdict.GAP, "0 GPUs allowed, one node needs 2")
    t4 = found["pool train: GPU quota NVIDIA_T4_GPUS in us-central1 (n1-standard-8)"]
    assert (t4.verdict, t4.detail) == (Verdict.WARNING, "1 of 8 GPUs free, one node needs 2")


def test_a_denied_read_is_skipped_naming_the_permission_and_does_not_block(
    fake_compute: FakeCompute, compute_endpoint: str
) -> None:
    fake_compute.fail("GET", r"/machineTypes/", 403, "forbidden", "Required permission", times=-1)
    fake_compute.fail("GET", r"/zones/us-central1-a$", 403, "rateLimitExceeded", times=-1)
    result = Preflight.of(_provider(compute_endpoint).preflight([_need()]))
    assert not result.blocks
    skipped = [f for f in result.findings if f.verdict is Verdict.SKIPPED]
    assert {f.permission for f in skipped} == {"compute.machineTypes.get"}
    assert "(needs compute.machineTypes.get) -> grant compute.machineTypes.get" in result.text()
    (throttled,) = [f for f in result.findings if f.verdict is Verdict.WARNING]
    assert throttled.subject == "zone us-central1-a"  # a rate limit is no permission problem


def test_a_project_that_does_not_exist_is_one_gap_naming_the_providers_project(
    fake_compute: FakeCompute, compute_endpoint: str
) -> None:
    provider = _provider(compute_endpoint, project="no-such-project")
    (gap,) = provider.preflight([_need()])
    assert (gap.check, gap.verdict) == (Check.ACCOUNT, Verdict.GAP)
    assert gap.key_path == "providers.gcp.project"
    assert fake_compute.count("GET", r"/machineTypes/") == 0  # nothing else is read


def test_image_references_resolve_to_project_and_name_or_family() -> None:
    assert image_reference("projects/debian-cloud/global/images/family/debian-12", "p") == (
        "debian-cloud",
        "debian-12",
        True,
    )
    url = "https://www.googleapis.com/compute/v1/projects/x/global/images/node-v3"
    assert image_reference(url, "p") == ("x", "node-v3", False)
    assert image_reference("global/images/family/gpu", "p") == ("p", "gpu", True)
    assert image_reference("ubuntu", "p") is None


def test_plan_on_gce_lists_the_gaps_and_apply_launches_nothing(
    fake_compute: FakeCompute, compute_endpoint: str, tmp_path: Path
) -> None:
    fake_compute.unoffered.add(("us-central1-b", "g2-standard-4"))
    fake_compute.region_quotas["us-central1"] = {"NVIDIA_L4_GPUS": (0, 0)}
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(f"""\
fleet: gcedemo
store: file://store
secret: {{env: NAVARCH_FLEET_SECRET}}
providers:
  gce: {{type: gcp, project: navarch-test, api_endpoint: "{compute_endpoint}", anonymous: true, retry_deadline_s: 2}}
pools:
  train:
    provider: gce
    gpus_per_node: 1
    instance_types: [g2-standard-4]
    zones: [us-central1-a, us-central1-b]
    nodes: {{min: 0, target: 1, max: 2}}
    health: {{boot_timeout: 30m}}
""")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NAVARCH_")}
    env["NAVARCH_FLEET_SECRET"] = SECRET
    code, out, err = in_process(("plan", str(fleet)), cwd=tmp_path, env=env)
    assert code == 1, out + err
    assert "Preflight: 2 gaps before the first launch" in out
    assert "g2-standard-4 in us-central1-b: machine type not offered in this zone" in out
    assert "(pools.train.instance_types)" in out
    assert "NVIDIA_L4_GPUS in us-central1 (g2-standard-4): 0 GPUs allowed" in out
    code, out, err = in_process(("apply", str(fleet), "--auto-approve"), cwd=tmp_path, env=env)
    assert code == 1 and "machine type not offered" in out + err
    assert fake_compute.inserted == []


def test_an_outage_page_instead_of_an_answer_is_a_note_not_a_stop(
    fake_compute: FakeCompute, compute_endpoint: str
) -> None:
    fake_compute.fail_page("GET", r"/machineTypes/", 502, times=-1)
    result = Preflight.of(_provider(compute_endpoint).preflight([_need(("us-central1-a",))]))
    assert not result.blocks
    (note,) = result.findings
    assert note.verdict is Verdict.WARNING and note.detail.startswith("not checked: ")
    assert note.fix == "it is checked again next run"

"""GcpProvider through the real google-cloud-compute REST client against the fake Compute API."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import jsonschema
import pytest

from navarch.errors import (
    AuthError,
    CapacityError,
    ConfigError,
    ProviderError,
    QuotaError,
    TransientError,
)
from navarch.inventory import CloudEvent, CloudStatus, InstanceHealth, InstanceState, launch_id
from navarch.providers import open_provider
from navarch.providers.base import ProvisionRequest
from navarch.providers.gcp import GcpProvider, instance_resource, request_id
from tests.support.providers import FLEET, gcp_provider, request_maker

ROOT = Path(__file__).resolve().parents[2]
GPU_OPTIONS = {"accelerators": {"n1-standard-8": {"type": "nvidia-tesla-t4", "count": 1}}}


def _provider(endpoint: str, **extra: object) -> GcpProvider:
    provider = gcp_provider(endpoint, FLEET, **extra)
    assert isinstance(provider, GcpProvider)
    return provider


_request = request_maker("us-central1-a", "n1-standard-8", GPU_OPTIONS)


def test_provision_then_list(fake_compute, compute_endpoint: str) -> None:
    p = _provider(compute_endpoint)
    inst = p.provision(_request())
    assert inst.instance_id == "prod-train-0001"
    assert inst.zone == "us-central1-a"
    assert inst.instance_type == "n1-standard-8"
    assert inst.state is InstanceState.RUNNING
    assert inst.fleet == FLEET and inst.pool == "train" and inst.node == "prod-train-0001"
    assert inst.launch_id == launch_id(FLEET, "prod-train-0001", 0)
    assert inst.launched_at.utcoffset().total_seconds() == 0
    assert inst.address and inst.address.startswith("34.")
    assert not inst.spot
    listed = p.list_instances(FLEET)
    assert listed == [inst]
    # The insert went through the zone operation wait with the same endpoint.
    assert fake_compute.count("POST", r"/operations/[^/]+/wait$") == 1
    q = [c for c in fake_compute.calls if c[0] == "POST" and c[1].endswith("/instances")][0][2]
    lid = launch_id(FLEET, "prod-train-0001", 0)
    assert q["requestId"] == [request_id(lid, "us-central1-a/n1-standard-8")]


def test_insert_body_gpu_spot_and_metadata(fake_compute, compute_endpoint: str) -> None:
    p = _provider(compute_endpoint)
    p.provision(_request(spot=True))
    body = fake_compute.instances[("us-central1-a", "prod-train-0001")]
    assert body["guestAccelerators"] == [
        {
            "acceleratorType": "zones/us-central1-a/acceleratorTypes/nvidia-tesla-t4",
            "acceleratorCount": 1,
        }
    ]
    assert body["scheduling"]["provisioningModel"] == "SPOT"
    assert body["scheduling"]["instanceTerminationAction"] == "DELETE"
    assert body["scheduling"]["onHostMaintenance"] == "TERMINATE"
    assert body["metadata"]["items"] == [{"key": "user-data", "value": "#cloud-config\n{}\n"}]
    assert body["labels"]["team"] == "ml"
    assert body["disks"][0]["initializeParams"]["diskSizeGb"] == "200"
    assert body["serviceAccounts"][0]["email"] == "default"
    assert p.list_instances(FLEET)[0].spot is True


def test_instance_resource_without_gpu_keeps_default_maintenance() -> None:
    inst = instance_resource(_request(instance_type="n2-standard-4", options={}))
    assert not inst.guest_accelerators
    assert "on_host_maintenance" not in inst.scheduling
    a3 = instance_resource(_request(instance_type="a3-highgpu-8g", options={}))
    assert a3.scheduling.on_host_maintenance == "TERMINATE"
    assert not a3.guest_accelerators


def test_slow_launch_is_returned_pending(fake_compute, compute_endpoint: str) -> None:
    fake_compute.ops_never_finish = True
    fake_compute.initial_status = "PROVISIONING"
    inst = _provider(compute_endpoint, operation_timeout_s=1).provision(_request())
    assert inst.state is InstanceState.PENDING
    assert inst.instance_id == "prod-train-0001"
    assert fake_compute.count("POST", r"/operations/[^/]+/wait$") == 1


def test_name_taken_by_foreign_instance_is_refused(fake_compute, compute_endpoint: str) -> None:
    fake_compute.add_instance("us-central1-a", "prod-train-0001", {"owner": "someone"})
    with pytest.raises(ProviderError, match="taken"):
        _provider(compute_endpoint).provision(_request())


def test_stockout_with_details_on_the_operation_is_capacity_error(
    fake_compute, compute_endpoint: str
) -> None:
    # The contract covers ZONE_RESOURCE_POOL_EXHAUSTED; the operation may end with this too.
    code = "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"
    fake_compute.stockout_zones.add("us-central1-a")
    fake_compute.stockout_code = code
    p = _provider(compute_endpoint)
    with pytest.raises(CapacityError) as info:
        p.provision(_request())
    assert info.value.code == code and info.value.scope == "zone"
    assert p.list_instances(FLEET) == []
    inst = p.provision(_request(zone="us-central1-b"))
    assert inst.zone == "us-central1-b"


def test_regional_and_global_quota(fake_compute, compute_endpoint: str) -> None:
    p = _provider(compute_endpoint)
    fake_compute.quota_error = "Quota 'NVIDIA_T4_GPUS' exceeded.  Limit: 0.0 in region us-central1."
    with pytest.raises(QuotaError) as info:
        p.provision(_request())
    assert info.value.scope == "region"
    fake_compute.quota_error = "Quota 'GPUS_ALL_REGIONS' exceeded.  Limit: 0.0 globally."
    with pytest.raises(QuotaError) as info:
        p.provision(_request(node="prod-train-0002"))
    assert info.value.scope == "provider"


def test_list_asks_compute_to_filter_by_the_fleet_label(
    fake_compute, compute_endpoint: str
) -> None:
    _provider(compute_endpoint).list_instances(FLEET)
    flt = [c[2] for c in fake_compute.calls if c[1].endswith("/aggregated/instances")][-1]
    assert flt["filter"] == ['labels.navarch-fleet = "prod"']


@pytest.mark.parametrize(
    ("status", "state"),
    [
        ("PROVISIONING", InstanceState.PENDING),
        ("STAGING", InstanceState.PENDING),
        ("RUNNING", InstanceState.RUNNING),
        ("STOPPING", InstanceState.STOPPING),
        ("SUSPENDING", InstanceState.STOPPING),
        ("TERMINATED", InstanceState.STOPPED),
        ("SUSPENDED", InstanceState.STOPPED),
    ],
)
def test_status_mapping(fake_compute, compute_endpoint: str, status: str, state) -> None:
    fake_compute.add_instance("us-central1-a", "n1", {"navarch-fleet": FLEET}, status=status)
    fake_compute.instances[("us-central1-a", "n1")]["status"] = status
    [inst] = _provider(compute_endpoint).list_instances(FLEET)
    assert inst.state is state


def test_transient_503_is_retried_by_api_core(fake_compute, compute_endpoint: str) -> None:
    fake_compute.fail("GET", r"/aggregated/instances$", 503, "backendError")
    assert _provider(compute_endpoint, retry_deadline_s=30).list_instances(FLEET) == []
    assert fake_compute.count("GET", r"/aggregated/instances$") == 2


def test_persistent_503_becomes_transient_error(fake_compute, compute_endpoint: str) -> None:
    fake_compute.fail("GET", r"/aggregated/instances$", 503, "backendError", times=-1)
    with pytest.raises(TransientError):
        _provider(compute_endpoint, retry_deadline_s=0.5).list_instances(FLEET)


def test_forbidden_is_auth_error(fake_compute, compute_endpoint: str) -> None:
    fake_compute.fail(
        "POST", r"/instances$", 403, "forbidden", "Required 'compute.instances.create'"
    )
    with pytest.raises(AuthError):
        _provider(compute_endpoint).provision(_request())


def test_unknown_project_is_config_error(fake_compute, compute_endpoint: str) -> None:
    p = _provider(compute_endpoint, project="no-such-project")
    with pytest.raises(ConfigError):
        p.list_instances(FLEET)


def test_invalid_label_value_is_config_error(fake_compute, compute_endpoint: str) -> None:
    req = _request()
    req = ProvisionRequest(**{**req.__dict__, "tags": {**req.tags, "team": "ML Team"}})
    with pytest.raises(ConfigError):
        _provider(compute_endpoint).provision(req)
    assert fake_compute.instances == {}


def test_anonymous_needs_an_endpoint(monkeypatch) -> None:
    with pytest.raises(ConfigError) as info:
        open_provider(
            "g",
            {"type": "gcp", "project": "navarch-test", "anonymous": True},
            base_dir=ROOT,
            fleet=FLEET,
        )
    assert info.value.key_path == "providers.g.anonymous"
    # The environment switch never strips credentials from calls to the real API.
    monkeypatch.setenv("NAVARCH_GCP_ANONYMOUS", "true")
    real = open_provider(
        "g", {"type": "gcp", "project": "navarch-test"}, base_dir=ROOT, fleet=FLEET
    )
    assert isinstance(real, GcpProvider) and not real.settings.anonymous
    fake = open_provider(
        "g",
        {"type": "gcp", "project": "navarch-test", "api_endpoint": "http://127.0.0.1:1"},
        base_dir=ROOT,
        fleet=FLEET,
    )
    assert isinstance(fake, GcpProvider) and fake.settings.anonymous


def test_schema_accepts_example_settings() -> None:
    schema = json.loads((ROOT / "schemas/providers/gcp.schema.json").read_text())
    defs = schema["$defs"]
    jsonschema.validate(
        {"type": "gcp", "project": "navarch-test", "api_endpoint": "http://127.0.0.1:1"},
        defs["provider"],
    )
    jsonschema.validate(
        {"image": "x", "accelerators": {"n1-standard-8": {"type": "nvidia-tesla-t4"}}},
        defs["pool"],
    )
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(
            {"type": "gcp", "project": "navarch-test", "zone": "x"}, defs["provider"]
        )
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"type": "gcp"}, defs["provider"])


def test_list_carries_compute_engines_own_status_in_one_call(
    fake_compute, compute_endpoint: str
) -> None:
    p = _provider(compute_endpoint)
    for n in range(1, 5):
        p.provision(_request(node=f"prod-train-{n:04d}"))
    zone = "us-central1-a"
    fake_compute.set_status(zone, "prod-train-0001", "REPAIRING", statusMessage="host error")
    fake_compute.set_status(
        zone, "prod-train-0002", "TERMINATED", lastStopTimestamp="2026-03-02T11:50:00.000-08:00"
    )
    fake_compute.set_status(
        zone,
        "prod-train-0003",
        "RUNNING",
        resourceStatus={
            "upcomingMaintenance": {"type": "SCHEDULED", "windowStartTime": "2026-03-05T00:00:00Z"}
        },
    )
    before = fake_compute.count("GET", r"/aggregated/instances$")
    status = {i.instance_id: i.cloud_status for i in p.list_instances(FLEET)}
    assert fake_compute.count("GET", r"/aggregated/instances$") == before + 1

    assert status["prod-train-0001"].health is InstanceHealth.IMPAIRED
    assert "REPAIRING" in status["prod-train-0001"].detail
    assert "host error" in status["prod-train-0001"].detail
    assert status["prod-train-0002"].health is InstanceHealth.IMPAIRED
    assert status["prod-train-0002"].since == datetime(2026, 3, 2, 19, 50, tzinfo=UTC)
    assert status["prod-train-0003"].health is InstanceHealth.OK
    assert (status["prod-train-0003"].event, status["prod-train-0003"].event_deadline) == (
        CloudEvent.SYSTEM_MAINTENANCE,
        datetime(2026, 3, 5, tzinfo=UTC),
    )
    assert status["prod-train-0004"] == CloudStatus(InstanceHealth.OK)

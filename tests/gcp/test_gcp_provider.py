"""GcpProvider through the real google-cloud-compute REST client against the fake Compute API."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import requests
from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exc
from google.cloud import compute_v1

from navarch.errors import (
    AuthError,
    CapacityError,
    ConfigError,
    PlacementError,
    ProviderError,
    QuotaError,
    TransientError,
)
from navarch.inventory import InstanceState, launch_id, ownership_tags
from navarch.providers import open_provider
from navarch.providers.base import ProvisionRequest
from navarch.providers.gcp import (
    GcpProvider,
    instance_resource,
    map_error,
    request_id,
)

ROOT = Path(__file__).resolve().parents[2]
FLEET = "prod"


def _provider(endpoint: str, **extra: object) -> GcpProvider:
    config = {
        "type": "gcp",
        "project": "navarch-test",
        "api_endpoint": endpoint,
        "anonymous": True,
        "retry_deadline_s": 2,
        **extra,
    }
    provider = open_provider("gcp", config, base_dir=ROOT, fleet=FLEET)
    assert isinstance(provider, GcpProvider)
    return provider


def _request(
    node: str = "prod-train-0001", zone: str = "us-central1-a", **kw: object
) -> ProvisionRequest:
    lid = launch_id(FLEET, node, 0)
    fields: dict[str, object] = dict(
        fleet=FLEET,
        pool="train",
        node=node,
        zone=zone,
        instance_type="n1-standard-8",
        spot=False,
        launch_id=lid,
        attempt=0,
        tags={**ownership_tags(FLEET, "train", node, lid), "team": "ml"},
        user_data="#cloud-config\n{}\n",
        options={"accelerators": {"n1-standard-8": {"type": "nvidia-tesla-t4", "count": 1}}},
    )
    fields.update(kw)
    return ProvisionRequest(**fields)  # type: ignore[arg-type]


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


def test_provision_is_idempotent(fake_compute, compute_endpoint: str) -> None:
    p = _provider(compute_endpoint)
    first = p.provision(_request())
    # A second run (e.g. after a killed apply) provisions the same node again.
    again = _provider(compute_endpoint).provision(_request())
    assert again == first
    assert len(fake_compute.instances) == 1


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


@pytest.mark.parametrize(
    "code", ["ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"]
)
def test_async_stockout_is_capacity_error_then_next_zone(
    fake_compute, compute_endpoint: str, code: str
) -> None:
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


def test_list_filters_by_fleet_and_skips_other_fleets(fake_compute, compute_endpoint: str) -> None:
    p = _provider(compute_endpoint)
    p.provision(_request())
    fake_compute.add_instance("us-central1-b", "other", {"navarch-fleet": "dev"})
    fake_compute.add_instance("us-central1-b", "foreign", {})
    names = [i.instance_id for i in p.list_instances(FLEET)]
    assert names == ["prod-train-0001"]
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


def test_terminate_and_gone_is_success(fake_compute, compute_endpoint: str) -> None:
    p = _provider(compute_endpoint)
    a = p.provision(_request())
    b = p.provision(_request(node="prod-train-0002", zone="us-central1-b"))
    p.terminate([a, b])
    assert fake_compute.instances == {}
    p.terminate([a])  # already gone
    assert fake_compute.count("DELETE", r"/instances/prod-train-0001$") == 2


def test_terminate_refuses_foreign(fake_compute, compute_endpoint: str) -> None:
    fake_compute.add_instance("us-central1-a", "foreign", {"navarch-fleet": "dev"})
    p = _provider(compute_endpoint)
    foreign = compute_v1.Instance.from_json(
        json.dumps(fake_compute.instances[("us-central1-a", "foreign")]),
        ignore_unknown_fields=True,
    )
    from navarch.providers.gcp import to_instance

    inst = to_instance("gcp", foreign)
    assert inst is not None
    with pytest.raises(ProviderError, match="refusing"):
        p.terminate([inst])
    assert ("us-central1-a", "foreign") in fake_compute.instances


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


# -- the one error boundary ------------------------------------------------------------------


def _op_error(code: str, status: int, message: str = "m") -> gexc.GoogleAPICallError:
    return gexc.from_http_status(
        status, "op", errors=[compute_v1.Errors(code=code, message=message)]
    )


def _api_error(cls: type, reason: str, message: str = "m") -> gexc.GoogleAPICallError:
    return cls(message, errors=[{"reason": reason, "message": message, "domain": "global"}])


# Every GCE error code / reason the provider relies on, and what it becomes.
ERROR_TABLE = [
    (_op_error("ZONE_RESOURCE_POOL_EXHAUSTED", 503), CapacityError, "zone"),
    (_op_error("ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", 503), CapacityError, "zone"),
    (_op_error("STOCKOUT", 503), CapacityError, "zone"),
    (_api_error(gexc.ServiceUnavailable, "insufficientCapacity"), CapacityError, "zone"),
    (_api_error(gexc.ServiceUnavailable, "resourcePoolExhausted"), CapacityError, "zone"),
    (
        _op_error(
            "QUOTA_EXCEEDED", 403, "Quota 'CPUS' exceeded. Limit: 24.0 in region us-central1."
        ),
        QuotaError,
        "region",
    ),
    (
        _op_error("QUOTA_EXCEEDED", 403, "Quota 'GPUS_ALL_REGIONS' exceeded. Limit: 0.0 globally."),
        QuotaError,
        "provider",
    ),
    (_api_error(gexc.Forbidden, "quotaExceeded"), QuotaError, "region"),
    (_api_error(gexc.Forbidden, "rateLimitExceeded"), TransientError, ""),
    (_api_error(gexc.Forbidden, "userRateLimitExceeded"), TransientError, ""),
    (_api_error(gexc.TooManyRequests, "rateLimitExceeded"), TransientError, ""),
    (_api_error(gexc.InternalServerError, "backendError"), TransientError, ""),
    (_api_error(gexc.ServiceUnavailable, "backendError"), TransientError, ""),
    (_api_error(gexc.GatewayTimeout, "timeout"), TransientError, ""),
    (
        gexc.RetryError("deadline", _api_error(gexc.ServiceUnavailable, "backendError")),
        TransientError,
        "",
    ),
    (requests.ConnectionError("refused"), TransientError, ""),
    (_api_error(gexc.Forbidden, "forbidden"), AuthError, "provider"),
    (_api_error(gexc.Unauthorized, "authError"), AuthError, "provider"),
    (auth_exc.DefaultCredentialsError("no ADC"), AuthError, "provider"),
    (auth_exc.RefreshError("expired"), AuthError, "provider"),
    (_api_error(gexc.NotFound, "notFound"), ConfigError, None),
    (_api_error(gexc.BadRequest, "invalid"), ConfigError, None),
    # A machine or accelerator type not offered in the zone, or the zone itself: the
    # place is wrong, not the pool (issue 16 item 2).
    (_api_error(gexc.BadRequest, "invalid", "Invalid value for field 'resource.machineType': "
                "'zones/us-central1-a/machineTypes/a3-highgpu-8g'. Machine type with name "
                "'a3-highgpu-8g' does not exist in zone 'us-central1-a'."), PlacementError, "zone"),
    (_api_error(gexc.NotFound, "notFound", "The resource 'projects/p/zones/us-central1-a/"
                "acceleratorTypes/nvidia-h100-80gb' was not found"), PlacementError, "zone"),
    (_api_error(gexc.NotFound, "notFound", "The resource 'projects/p/zones/us-central1-a' "
                "was not found"), PlacementError, "zone"),
    (_api_error(gexc.NotFound, "notFound", "The resource 'projects/p/global/images/x' was "
                "not found"), ConfigError, None),
    (_api_error(gexc.Conflict, "resourceNotReady"), ProviderError, ""),
]


@pytest.mark.parametrize(("exc", "expected", "scope"), ERROR_TABLE)
def test_map_error(exc: BaseException, expected: type, scope: str | None) -> None:
    mapped = map_error(exc, zone="us-central1-a", what="insert")
    assert type(mapped) is expected
    if scope is not None:
        assert mapped.scope == scope  # type: ignore[attr-defined]

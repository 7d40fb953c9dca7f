"""LambdaProvider over HTTP against the local fake Lambda Cloud API."""

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
    PlacementError,
    ProviderError,
    QuotaError,
    TransientError,
)
from navarch.inventory import InstanceHealth, InstanceState, launch_id
from navarch.providers import open_provider
from navarch.providers.base import ProvisionRequest
from navarch.providers.lambda_cloud import LambdaProvider, LambdaSettings
from tests.support.providers import FLEET, request_maker

ROOT = Path(__file__).resolve().parents[2]
IMAGE_OPTIONS = {"image": {"family": "lambda-stack-22-04"}}
NOW = datetime(2026, 11, 21, 21, 0, 0, tzinfo=UTC)


class FakeClock:
    """Monotonic clock that only moves when the provider sleeps (or a test advances it)."""

    def __init__(self) -> None:
        self.t = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds


def _provider(api_base: str, clock: FakeClock | None = None, **extra: object) -> LambdaProvider:
    config = {
        "type": "lambda",
        "api_key_env": "LAMBDA_API_KEY",
        "api_base": api_base,
        "ssh_key_name": "navarch",
        **extra,
    }
    if clock is None:
        p = open_provider("lam", config, base_dir=ROOT, fleet=FLEET)
        assert isinstance(p, LambdaProvider)
        return p
    return LambdaProvider(
        "lam",
        LambdaSettings.from_mapping(config),
        fleet=FLEET,
        clock=clock,
        sleep=clock.sleep,
        now=lambda: NOW,
    )


_request = request_maker("us-east-1", "gpu_1x_a10", IMAGE_OPTIONS)


def test_provision_then_list(fake_lambda, lambda_api_base: str) -> None:
    p = _provider(lambda_api_base, FakeClock())
    inst = p.provision(_request())
    assert inst.state is InstanceState.PENDING
    assert inst.zone == "us-east-1" and inst.instance_type == "gpu_1x_a10"
    assert inst.fleet == FLEET and inst.node == "prod-train-0001"
    assert inst.launch_id == launch_id(FLEET, "prod-train-0001", 0)
    assert inst.launched_at == NOW
    assert inst.address and not inst.spot
    [body] = [b for m, path, b in fake_lambda.calls if path.endswith("/launch")]
    assert body["name"] == "prod-train-0001"
    assert body["ssh_key_names"] == ["navarch"]
    assert body["user_data"] == "#cloud-config\n{}\n"
    assert body["image"] == {"family": "lambda-stack-22-04"}
    assert {"key": "navarch-fleet", "value": FLEET} in body["tags"]
    assert p.list_instances(FLEET) == [inst]
    fake_lambda.set_status("active")
    assert p.list_instances(FLEET)[0].state is InstanceState.RUNNING


def test_launches_are_spaced_by_the_rate_limit(fake_lambda, lambda_api_base: str) -> None:
    clock = FakeClock()
    p = _provider(lambda_api_base, clock)
    p.provision(_request("prod-train-0001"))
    clock.t += 5  # five seconds pass before the next launch is asked for
    p.provision(_request("prod-train-0002"))
    p.provision(_request("prod-train-0003"))
    assert clock.sleeps == [7.0, 12.0]
    assert fake_lambda.count("POST", r"/launch$") == 3


def test_no_capacity_listed_is_capacity_error_without_launch(
    fake_lambda, lambda_api_base: str
) -> None:
    fake_lambda.capacity["gpu_1x_a10"] = {"us-west-1"}
    p = _provider(lambda_api_base, FakeClock())
    with pytest.raises(CapacityError) as info:
        p.provision(_request(zone="us-east-1"))
    assert info.value.scope == "zone"
    assert fake_lambda.count("POST", r"/launch$") == 0
    assert p.provision(_request(zone="us-west-1")).zone == "us-west-1"


def test_launch_insufficient_capacity_is_not_retried(fake_lambda, lambda_api_base: str) -> None:
    fake_lambda.fail(
        "POST", r"/launch$", 400, "instance-operations/launch/insufficient-capacity", "no room"
    )
    with pytest.raises(CapacityError) as info:
        _provider(lambda_api_base, FakeClock()).provision(_request())
    assert info.value.code == "instance-operations/launch/insufficient-capacity"
    assert fake_lambda.count("POST", r"/launch$") == 1
    assert fake_lambda.live() == []


def test_launch_5xx_is_transient_and_never_retried(fake_lambda, lambda_api_base: str) -> None:
    fake_lambda.fail("POST", r"/launch$", 503, "provider/internal-unavailable", times=-1)
    with pytest.raises(TransientError):
        _provider(lambda_api_base, FakeClock()).provision(_request())
    assert fake_lambda.count("POST", r"/launch$") == 1


def test_get_5xx_is_retried_by_urllib3(fake_lambda, lambda_api_base: str) -> None:
    fake_lambda.fail("GET", r"/instances$", 503, "provider/internal-unavailable", times=1)
    assert _provider(lambda_api_base).list_instances(FLEET) == []
    assert fake_lambda.count("GET", r"/instances$") == 2


def test_quota_and_auth(fake_lambda, lambda_api_base: str, monkeypatch) -> None:
    fake_lambda.fail("POST", r"/launch$", 400, "global/quota-exceeded", "quota")
    with pytest.raises(QuotaError):
        _provider(lambda_api_base, FakeClock()).provision(_request())
    monkeypatch.setenv("LAMBDA_API_KEY", "wrong")
    with pytest.raises(AuthError) as info:
        _provider(lambda_api_base).list_instances(FLEET)
    assert info.value.code == "global/invalid-api-key"
    monkeypatch.delenv("LAMBDA_API_KEY")
    with pytest.raises(AuthError, match="LAMBDA_API_KEY"):
        _provider(lambda_api_base).list_instances(FLEET)


def test_spot_request_falls_over_as_capacity_error(fake_lambda, lambda_api_base: str) -> None:
    with pytest.raises(CapacityError):
        _provider(lambda_api_base, FakeClock()).provision(_request(spot=True))
    assert fake_lambda.count("POST", r"/launch$") == 0


def test_unknown_type_is_a_placement_error_and_bad_tag_a_config_error(
    fake_lambda, lambda_api_base: str
) -> None:
    p = _provider(lambda_api_base, FakeClock())
    with pytest.raises(PlacementError):  # the pool's next type may be offered
        p.provision(_request(instance_type="gpu_9x_nope"))
    req = _request()
    bad = ProvisionRequest(**{**req.__dict__, "tags": {**req.tags, "cost_center": "x"}})
    with pytest.raises(ConfigError):
        p.provision(bad)
    assert fake_lambda.count("POST", r"/launch$") == 0


def test_list_skips_gone_and_preempted_instances(fake_lambda, lambda_api_base: str) -> None:
    fake_lambda.add_instance("gone", "us-east-1", {"navarch-fleet": FLEET}, status="terminated")
    fake_lambda.add_instance("preempted", "us-east-1", {"navarch-fleet": FLEET}, status="preempted")
    keep = fake_lambda.add_instance(
        "sick", "us-east-1", {"navarch-fleet": FLEET}, status="unhealthy"
    )
    [inst] = _provider(lambda_api_base).list_instances(FLEET)
    assert inst.instance_id == keep and inst.state is InstanceState.RUNNING
    assert inst.launched_at == datetime.fromtimestamp(0, UTC)  # no navarch-launched-at tag


def test_name_taken_by_foreign_instance(fake_lambda, lambda_api_base: str) -> None:
    fake_lambda.add_instance("prod-train-0001", "us-east-1", {})
    with pytest.raises(ProviderError, match="taken"):
        _provider(lambda_api_base, FakeClock()).provision(_request())


def test_schema() -> None:
    defs = json.loads((ROOT / "schemas/providers/lambda.schema.json").read_text())["$defs"]
    jsonschema.validate(
        {"type": "lambda", "api_key_env": "LAMBDA_API_KEY", "ssh_key_name": "k"}, defs["provider"]
    )
    for bad in (
        {"type": "lambda", "ssh_key_name": "k"},
        {"type": "lambda", "api_key_env": "LAMBDA_API_KEY", "ssh_key_name": "k", "api_key": "x"},
        {"type": "lambda", "api_key_env": "not a name", "ssh_key_name": "k"},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, defs["provider"])
    jsonschema.validate({"image": {"family": "lambda-stack-22-04"}}, defs["pool"])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"image": {"family": "a", "id": "b"}}, defs["pool"])


def test_list_carries_lambdas_own_status(fake_lambda, lambda_api_base: str) -> None:
    p = _provider(lambda_api_base, FakeClock())
    sick = p.provision(_request())
    well = p.provision(_request(node="prod-train-0002"))
    booting = {i.instance_id: i.cloud_status.health for i in p.list_instances(FLEET)}
    assert booting == {
        sick.instance_id: InstanceHealth.UNKNOWN,
        well.instance_id: InstanceHealth.UNKNOWN,
    }
    fake_lambda.set_status("active")
    fake_lambda.set_status("unhealthy", sick.instance_id)
    status = {i.instance_id: i.cloud_status for i in p.list_instances(FLEET)}
    assert status[sick.instance_id].health is InstanceHealth.IMPAIRED
    assert "unhealthy" in status[sick.instance_id].detail
    assert status[well.instance_id].health is InstanceHealth.OK

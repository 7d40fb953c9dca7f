"""Lambda Cloud provider reboot: instance-operations/restart, never terminate."""

from __future__ import annotations

from pathlib import Path

import pytest

from navarch.errors import ConfigError, ProviderError
from navarch.inventory import Instance, ownership_tags
from navarch.providers import open_provider
from navarch.providers.lambda_cloud import LambdaProvider, to_instance

FLEET = "prod"


def _provider(api_base: str) -> LambdaProvider:
    config = {
        "type": "lambda",
        "api_key_env": "LAMBDA_API_KEY",
        "api_base": api_base,
        "ssh_key_name": "navarch",
    }
    p = open_provider("lam", config, base_dir=Path("."), fleet=FLEET)
    assert isinstance(p, LambdaProvider)
    return p


def _instance(fake_lambda, node: str, fleet: str = FLEET) -> Instance:
    fake_lambda.add_instance(
        node, "us-east-1", dict(ownership_tags(fleet, "train", node, f"{node}-l0"))
    )
    data = next(i for i in fake_lambda.instances.values() if i["name"] == node)
    inst = to_instance("lam", data)
    assert inst is not None
    return inst


def test_reboot_restarts_once_in_one_call_and_terminates_nothing(
    fake_lambda, lambda_api_base: str
) -> None:
    a, b = _instance(fake_lambda, "prod-train-0001"), _instance(fake_lambda, "prod-train-0002")
    _provider(lambda_api_base).reboot([a, b, a])
    restarts = [
        body
        for m, path, body in fake_lambda.calls
        if m == "POST" and path.endswith("/instance-operations/restart")
    ]
    assert restarts == [{"instance_ids": sorted([a.instance_id, b.instance_id])}]
    assert fake_lambda.count("POST", r"/terminate$") == 0
    assert {i["status"] for i in fake_lambda.instances.values()} == {"active"}


def test_reboot_of_a_gone_instance_is_an_error(fake_lambda, lambda_api_base: str) -> None:
    gone = _instance(fake_lambda, "prod-train-0001")
    fake_lambda.instances[gone.instance_id]["status"] = "terminated"
    with pytest.raises(ConfigError):
        _provider(lambda_api_base).reboot([gone])


def test_reboot_refuses_foreign(fake_lambda, lambda_api_base: str) -> None:
    foreign = _instance(fake_lambda, "dev-train-0001", fleet="dev")
    with pytest.raises(ProviderError, match="refusing"):
        _provider(lambda_api_base).reboot([foreign])
    assert fake_lambda.count("POST", r"/restart$") == 0

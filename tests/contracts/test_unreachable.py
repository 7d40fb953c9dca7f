"""An unreachable cloud is a navarch error on every public call, never an SDK exception.

Each provider and store is pointed at a closed port on 127.0.0.1 (connection refused at
once), with its retries cut to one attempt so the test does not wait out back-offs. Every
public call must then raise TransientError (providers) or StoreUnavailable (stores): the
executor retries the one on the next run, and the reconcile run stops before acting on the
other. A raw botocore/google/azure/requests exception here would mean a call site outside
its module's error boundary.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import requests
from google.api_core.retry import Retry

from navarch.capabilities import Capability
from navarch.errors import StoreUnavailable, TransientError
from navarch.inventory import Instance, InstanceState, ownership_tags
from navarch.providers import aws as awsmod
from navarch.providers import open_provider
from navarch.providers.base import Provider
from navarch.providers.lambda_cloud import LambdaProvider, LambdaSettings
from navarch.stores import azure as azurestore
from navarch.stores import gcs as gcsstore
from navarch.stores import open_store
from navarch.stores import s3 as s3store
from navarch.stores.base import ObjectStore
from tests.support.providers import FLEET, provision_request

NODE = "prod-train-0001"


@pytest.fixture
def closed_port() -> int:
    """A 127.0.0.1 port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _owned(instance_id: str, zone: str) -> Instance:
    tags = ownership_tags(FLEET, "train", NODE, "launch-1")
    return Instance(
        provider="p",
        instance_id=instance_id,
        zone=zone,
        instance_type="t",
        state=InstanceState.RUNNING,
        launched_at=datetime(2026, 1, 1, tzinfo=UTC),
        tags=tuple(sorted(tags.items())),
    )


def _aws(port: int, monkeypatch: pytest.MonkeyPatch) -> tuple[Provider, str, str]:
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setattr(awsmod, "DEFAULT_MAX_ATTEMPTS", 1)
    monkeypatch.setattr(awsmod, "RUN_INSTANCES_MAX_ATTEMPTS", 1)
    provider = open_provider(
        "aws", {"type": "aws", "region": "us-east-1"}, base_dir=Path("."), fleet=FLEET
    )
    return provider, "us-east-1a", "i-0123456789abcdef0"


def _gcp(port: int, monkeypatch: pytest.MonkeyPatch) -> tuple[Provider, str, str]:
    del monkeypatch
    config = {
        "type": "gcp",
        "project": "p",
        "api_endpoint": f"http://127.0.0.1:{port}",
        "anonymous": True,
        "retry_deadline_s": 0.2,
    }
    provider = open_provider("gcp", config, base_dir=Path("."), fleet=FLEET)
    return provider, "us-central1-a", NODE


def _lambda(port: int, monkeypatch: pytest.MonkeyPatch) -> tuple[Provider, str, str]:
    monkeypatch.setenv("LAMBDA_API_KEY", "secret")
    settings = LambdaSettings(
        api_key_env="LAMBDA_API_KEY",
        ssh_key_name="navarch",
        api_base=f"http://127.0.0.1:{port}/api/v1",
        launch_interval_s=0,
    )
    # A plain session: no urllib3 retries, so a refused connection fails at once.
    provider = LambdaProvider("lambda", settings, fleet=FLEET, session=requests.Session())
    return provider, "us-east-1", "0123456789abcdef"


def _azure(port: int, monkeypatch: pytest.MonkeyPatch) -> tuple[Provider, str, str]:
    monkeypatch.setenv("NAVARCH_AZURE_TOKEN", "token")
    config = {
        "type": "azure",
        "subscription_id": "sub",
        "resource_group": "rg",
        "base_url": f"http://127.0.0.1:{port}",
        "retry_total": 0,
    }
    provider = open_provider("azure", config, base_dir=Path("."), fleet=FLEET)
    vm_id = (
        f"/subscriptions/sub/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/{NODE}"
    )
    return provider, "eastus-1", vm_id


PROVIDERS: dict[str, Callable[[int, pytest.MonkeyPatch], tuple[Provider, str, str]]] = {
    "aws": _aws,
    "gcp": _gcp,
    "lambda": _lambda,
    "azure": _azure,
}

CALLS: dict[str, Callable[[Provider, str, str], object]] = {
    "list_instances": lambda p, zone, iid: p.list_instances(FLEET),
    "provision": lambda p, zone, iid: p.provision(
        provision_request(
            NODE, zone, "gpu_1x_a10", options={"ami": "ami-12c6146b", "subnet_id": "/subnets/s"}
        )
    ),
    "terminate": lambda p, zone, iid: p.terminate([_owned(iid, zone)]),
    "reboot": lambda p, zone, iid: p.reboot([_owned(iid, zone)]),
    "update_tags": lambda p, zone, iid: p.update_tags(_owned(iid, zone), {"team": "ml"}),
}


@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize("cloud", sorted(PROVIDERS))
def test_a_provider_that_cannot_connect_raises_transient_error_on_every_call(
    cloud: str, call: str, closed_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider, zone, instance_id = PROVIDERS[cloud](closed_port, monkeypatch)
    if not hasattr(provider, call):
        pytest.skip(f"the {cloud} provider has no {call}")
    if call == "update_tags" and Capability.UPDATE_TAGS not in provider.capabilities:
        pytest.skip(f"the {cloud} provider refuses update_tags before any call")
    with pytest.raises(TransientError):
        CALLS[call](provider, zone, instance_id)


# -- stores ------------------------------------------------------------------------------


def _s3(port: int, monkeypatch: pytest.MonkeyPatch) -> ObjectStore:
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setattr(s3store, "_RETRIES", {"mode": "standard", "max_attempts": 1})
    return open_store("s3://bucket/prefix")


def _gcs(port: int, monkeypatch: pytest.MonkeyPatch) -> ObjectStore:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
    # One attempt: the library's default retries a refused connection for two minutes.
    monkeypatch.setattr(gcsstore, "DEFAULT_RETRY", Retry(predicate=lambda exc: False))
    return open_store("gs://bucket/prefix")


def _azure_blob(port: int, monkeypatch: pytest.MonkeyPatch) -> ObjectStore:
    account = "devstoreaccount1"
    monkeypatch.setenv(
        azurestore.CONNECTION_STRING_ENV,
        (
            f"DefaultEndpointsProtocol=http;AccountName={account};AccountKey=a2V5;"
            f"BlobEndpoint=http://127.0.0.1:{port}/{account};"
        ),
    )
    monkeypatch.setattr(azurestore, "RETRY_TOTAL", 0)
    return open_store(f"az://{account}/container/prefix")


STORES: dict[str, Callable[[int, pytest.MonkeyPatch], ObjectStore]] = {
    "s3": _s3,
    "gcs": _gcs,
    "azure": _azure_blob,
}

STORE_CALLS: dict[str, Callable[[ObjectStore], object]] = {
    "get": lambda s: s.get("health/prod/train/n.json"),
    "put": lambda s: s.put("state/prod.json", b"{}"),
    "put_if_absent": lambda s: s.put("state/prod.lock", b"{}", if_absent=True),
    "put_if_version": lambda s: s.put("state/prod.json", b"{}", if_version="1"),
    "delete": lambda s: s.delete("state/prod.lock"),
    "delete_if_version": lambda s: s.delete("state/prod.lock", if_version="1"),
    "list": lambda s: s.list("health/prod/"),
    "get_many": lambda s: s.get_many(["health/prod/train/n.json"]),
}


@pytest.mark.parametrize("call", sorted(STORE_CALLS))
@pytest.mark.parametrize("backend", sorted(STORES))
def test_a_store_that_cannot_connect_raises_store_unavailable_on_every_call(
    backend: str, call: str, closed_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = STORES[backend](closed_port, monkeypatch)
    with pytest.raises(StoreUnavailable):
        STORE_CALLS[call](store)


@pytest.fixture(autouse=True)
def _no_sleep(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Client back-offs sleep between attempts; an unreachable port needs no waiting."""
    import time as time_module

    real_sleep: Any = time_module.sleep
    monkeypatch.setattr(time_module, "sleep", lambda s: real_sleep(min(s, 0.01)))
    yield

"""Azure's local stand-ins on 127.0.0.1: the ARM fake (tests/support/fake_arm.py) for
Compute and Network, and Azurite (the Azure Storage emulator, npm package `azurite`) for
Blob Storage. tests/conftest.py makes the fixtures available to every package (tests/azure,
tests/contracts). .ci/run installs azurite (npm install -g azurite); without it the tests
skip naming the package, and NAVARCH_REQUIRE_SYSTEM_PACKAGES=1 makes that a failure.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from navarch.providers.azure import TOKEN_ENV
from tests.support.fake_arm import TOKEN, FakeARM
from tests.support.fakehttp import serve
from tests.support.system import REQUIRE_ENV

#: Azurite's well-known development account (documented, not a secret).
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _azurite_binary() -> str:
    found = shutil.which("azurite-blob")
    if found:
        return found
    message = (
        "azurite-blob missing: npm install -g azurite (npm package azurite; .ci/run installs it)"
    )
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{message}; {REQUIRE_ENV}=1 makes this a failure")
    pytest.skip(message)


@contextmanager
def run_azurite(service: str, binary: str, location: Path) -> Iterator[str]:
    """Azurite's `service` ("blob" or "queue", the binary azurite-<service>) on a free
    127.0.0.1 port, its data under `location` -> its connection string; stopped on exit."""
    port = _free_port()
    proc = subprocess.Popen(
        [
            binary,
            f"--{service}Host",
            "127.0.0.1",
            f"--{service}Port",
            str(port),
            "--location",
            str(location),
            "--silent",
            "--skipApiVersionCheck",
            "--loose",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"{service.capitalize()}Endpoint"
    conn = (
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
        f"{endpoint}=http://127.0.0.1:{port}/{ACCOUNT};"
    )
    try:
        for _ in range(200):
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                assert proc.poll() is None, f"azurite-{service} exited at start"
                time.sleep(0.05)
        else:
            pytest.fail(f"azurite-{service} did not open its port")
        yield conn
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Start azurite-blob on a free 127.0.0.1 port -> its connection string."""
    with run_azurite("blob", _azurite_binary(), tmp_path_factory.mktemp("azurite")) as conn:
        yield conn


@pytest.fixture
def az_container(azurite: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh container on Azurite; AZURE_STORAGE_CONNECTION_STRING points at it.
    Returns the container name."""
    # Imported here: the root conftest imports this module in every test process.
    from azure.storage.blob import BlobServiceClient

    name = "t" + uuid.uuid4().hex[:20]
    BlobServiceClient.from_connection_string(azurite).create_container(name)
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite)
    return name


@pytest.fixture(scope="session")
def arm_server() -> Iterator[tuple[FakeARM, str]]:
    fake = FakeARM()
    with serve(fake) as url:
        yield fake, url


@pytest.fixture
def fake_arm(arm_server: tuple[FakeARM, str], monkeypatch: pytest.MonkeyPatch) -> FakeARM:
    """The ARM fake, reset, with NAVARCH_AZURE_TOKEN set to the token it accepts."""
    fake = arm_server[0]
    fake.reset()
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    return fake


@pytest.fixture
def arm_endpoint(arm_server: tuple[FakeARM, str]) -> str:
    return arm_server[1]

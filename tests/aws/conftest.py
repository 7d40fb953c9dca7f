"""Fixtures for the AWS tests: one moto server on 127.0.0.1 for the whole session.

Each test gets a clean moto (POST /moto-api/reset) and an environment where boto3 reaches
it through AWS_ENDPOINT_URL with dummy credentials; no other network is used.
"""

from __future__ import annotations

import logging
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from moto.server import ThreadedMotoServer

REGION = "us-east-1"


@dataclass(frozen=True)
class Moto:
    """The running moto server: endpoint URL and the env a child process needs."""

    endpoint: str

    def reset(self) -> None:
        req = urllib.request.Request(self.endpoint + "/moto-api/reset", method="POST")
        with urllib.request.urlopen(req, timeout=30) as resp:
            resp.read()

    def env(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": REGION,
            "AWS_REGION": REGION,
            "AWS_CONFIG_FILE": "/nonexistent/navarch-test-aws-config",
            "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/navarch-test-aws-credentials",
            "AWS_EC2_METADATA_DISABLED": "true",
        }


@pytest.fixture(scope="session")
def moto_server() -> Iterator[Moto]:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield Moto(endpoint=f"http://{host}:{port}")
    finally:
        server.stop()


@pytest.fixture
def moto(moto_server: Moto, monkeypatch: pytest.MonkeyPatch) -> Moto:
    """A freshly reset moto, with this process's AWS environment pointed at it."""
    moto_server.reset()
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    for name, value in moto_server.env().items():
        monkeypatch.setenv(name, value)
    return moto_server

"""The pytest fixtures of the fake Cloud Logging sinks API (tests/support/fake_logging.py).

Apart from the fake so that every pytest process can offer them without importing
google-cloud-logging and grpc (about half a second); the fake is imported when a test
asks for a fixture."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tests.support.fake_logging import FakeLogging


@pytest.fixture(scope="session")
def logging_server() -> Iterator[tuple[FakeLogging, str]]:
    """The fake ConfigServiceV2 on 127.0.0.1 for the session: (fake, "127.0.0.1:PORT")."""
    from tests.support.fake_logging import FakeLogging, serve

    fake = FakeLogging()
    server, address = serve(fake)
    try:
        yield fake, address
    finally:
        server.stop(grace=None)


@pytest.fixture
def fake_logging(logging_server: tuple[FakeLogging, str]) -> FakeLogging:
    """The fake ConfigServiceV2, reset for this test."""
    fake, _ = logging_server
    fake.reset()
    return fake


@pytest.fixture
def sinks_client(logging_server: tuple[FakeLogging, str]) -> Iterator[Any]:
    """A real ConfigServiceV2Client talking to the fake (closed after the test)."""
    from tests.support.fake_logging import logging_client

    client = logging_client(logging_server[1])
    yield client
    client.transport.close()

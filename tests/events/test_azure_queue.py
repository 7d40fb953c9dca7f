"""`--on-events azure-queue://...` drains a real storage queue: Azurite's queue service on
127.0.0.1 (azurite-queue, npm package azurite). Azurite emits no Event Grid events (its
maintainers, Azure/Azurite#1174), so the test puts the documented BlobCreated event on the
queue as Event Grid does: base64 of the event's JSON."""

from __future__ import annotations

import base64
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.storage.queue import QueueClient

from navarch.events.messages import Ignored, Watch
from navarch.events.queues import open_queue
from navarch.events.runner import drain, run_batch
from tests.support.azure_servers import run_azurite
from tests.support.system import require_system_package

SAMPLE = Path(__file__).parent / "samples" / "azure_blob_created.json"
QUEUE = "navarch-research-events"


@pytest.fixture
def azurite_queue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """azurite-queue on a free port -> its connection string (also in the environment)."""
    require_system_package("azurite", "azurite-queue")
    with run_azurite("queue", str(shutil.which("azurite-queue")), tmp_path) as conn:
        monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", conn)
        yield conn


def event(blob: str) -> str:
    doc = json.loads(SAMPLE.read_text())["body"][0]
    doc["subject"] = f"/blobServices/default/containers/navarch/blobs/{blob}"
    return base64.b64encode(json.dumps(doc).encode()).decode()


@pytest.mark.system
def test_an_azure_storage_queue_is_drained_and_deleted_after_the_run(azurite_queue) -> None:
    client = QueueClient.from_connection_string(azurite_queue, QUEUE)
    client.create_queue()
    for blob in (
        "research/health/research/train/research-train-0001.json",
        "research/health/research/train/research-train-0002.json",
        "research/health/research/train/research-train-0001.json",  # written twice
        "research/state/research.json",
    ):
        client.send_message(event(blob))
    watch = Watch.of_store("az://devstoreaccount1/navarch/research", "research")
    queue = open_queue(f"azure-queue://devstoreaccount1/{QUEUE}", watch)
    batch = drain(queue, wait_s=2, settle_s=0.5)
    assert len(batch.messages) == 4
    assert batch.keys == (
        "health/research/train/research-train-0001.json",
        "health/research/train/research-train-0002.json",
    )
    assert batch.parsed.ignored == {Ignored.OTHER_PREFIX: 1}
    runs: list[tuple[str, ...] | None] = []
    run_batch(queue, batch, lambda named: runs.append(named) or 0, full=False)
    assert runs == [batch.keys]
    assert client.get_queue_properties().approximate_message_count == 0

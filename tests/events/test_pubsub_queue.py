"""`--on-events pubsub://projects/P/subscriptions/S`: a synchronous pull and an acknowledge,
checked against the Pub/Sub client's own types (no emulator runs here: the pull answer is
built from google-cloud-pubsub's PullResponse, the message from the documented GCS
notification sample)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from google.api_core import exceptions as gexc
from google.cloud.pubsub_v1 import types

from navarch.errors import StoreUnavailable
from navarch.events.messages import Watch
from navarch.events.queues import PubSubQueue, open_queue

SAMPLE = json.loads((Path(__file__).parent / "samples" / "gcs_object_finalize.json").read_text())
SUB = "projects/my-proj/subscriptions/navarch-research-events"
REPORT = "health/research/train/research-train-0001.json"


class Subscriber:
    """Answers pull() with `answer` (a PullResponse or an exception); records requests."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.requests: list[tuple[str, dict[str, Any]]] = []

    def pull(self, request: dict[str, Any], timeout: float) -> Any:
        self.requests.append(("pull", request))
        types.PullRequest(**request)  # the request has the API's shape
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    def acknowledge(self, request: dict[str, Any]) -> None:
        types.AcknowledgeRequest(**request)
        self.requests.append(("acknowledge", request))


def queue(answer: Any) -> tuple[PubSubQueue, Subscriber]:
    client = Subscriber(answer)
    watch = Watch.of_store("gs://my-bucket/fleets", "research")
    return PubSubQueue(f"pubsub://{SUB}", SUB, watch, client=client), client


def test_a_pulled_gcs_notification_names_its_report_and_is_acknowledged_on_delete() -> None:
    attrs = {**SAMPLE["attributes"], "objectId": f"fleets/{REPORT}"}
    pulled = types.PullResponse(
        received_messages=[
            types.ReceivedMessage(
                ack_id="ack-1",
                message=types.PubsubMessage(
                    data=json.dumps(SAMPLE["data"]).encode(), attributes=attrs, message_id="7"
                ),
            )
        ]
    )
    q, client = queue(pulled)
    (message,) = q.receive(5, 10)
    assert message.parsed.keys == (REPORT,) and message.receipt == "ack-1"
    q.delete([message])
    assert client.requests == [
        ("pull", {"subscription": SUB, "max_messages": 10}),
        ("acknowledge", {"subscription": SUB, "ack_ids": ["ack-1"]}),
    ]


def test_an_empty_pull_and_an_unavailable_service() -> None:
    q, _ = queue(gexc.DeadlineExceeded("no messages"))
    assert q.receive(1, 10) == []
    q, _ = queue(gexc.ServiceUnavailable("try later"))
    with pytest.raises(StoreUnavailable, match="pubsub://"):
        q.receive(1, 10)


def test_queue_urls_of_no_known_form_are_refused_with_the_forms() -> None:
    from navarch.errors import ConfigError

    watch = Watch.of_store("gs://b", "research")
    for url in ("pubsub://topics/x", "sqs://q", "azure-queue://Bad_Account/q"):
        with pytest.raises(ConfigError, match="azure-queue://ACCOUNT/QUEUE"):
            open_queue(url, watch)


def test_event_flags_without_a_queue_or_with_a_saved_plan_are_refused(tmp_path: Path) -> None:
    from tests.support.cli import run_navarch

    fleet = Path(__file__).resolve().parents[2] / "fleet.example.yaml"
    run = run_navarch(["apply", str(fleet), "--auto-approve", "--listen"], cwd=tmp_path)
    assert run.returncode == 1 and "add --on-events QUEUE_URL" in run.stderr, run.stderr
    run = run_navarch(
        ["apply", str(fleet), "--auto-approve", "--on-events", f"pubsub://{SUB}"], cwd=tmp_path
    )
    assert run.returncode == 1 and "sends no notifications" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr

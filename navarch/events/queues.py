"""The queues a store's notifications land in, behind one small interface.

``--on-events QUEUE_URL`` names the queue; its form picks the cloud:

    https://sqs.<region>.amazonaws.com/<account>/<queue>   Amazon SQS (S3 notifications,
                                                            direct or through EventBridge)
    pubsub://projects/<project>/subscriptions/<sub>         a Pub/Sub pull subscription on
                                                            the topic GCS notifies
    azure-queue://<account>/<queue>                         an Azure Storage queue an Event
                                                            Grid subscription writes to

Any other http(s) URL is taken as an SQS queue URL (an SQS endpoint of another partition,
or moto's in tests, reached through AWS_ENDPOINT_URL). Receiving a message hides it from
other readers for `VISIBILITY_S`; only `delete` removes it, so a run that dies before
deleting gets the same messages again (every queue here is at-least-once). SDK errors are
translated at one boundary per queue into StoreUnavailable (try again: throttling, 5xx,
connection) or StoreError.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from navarch.errors import ConfigError, NavarchError, StoreError, StoreUnavailable, map_exceptions
from navarch.events.messages import (
    Parsed,
    Watch,
    parse_event_grid_message,
    parse_pubsub_message,
    parse_s3_message,
)
from navarch.extras import import_extra

__all__ = ["EventQueue", "QueueMessage", "open_queue", "VISIBILITY_S"]

log = logging.getLogger(__name__)

#: Seconds a received message stays hidden from other readers: longer than a run takes
#: with its lease (a message that reappears mid-run only costs a no-op run).
VISIBILITY_S = 600

_SQS_HOST = re.compile(r"sqs\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?")
_PUBSUB = re.compile(r"pubsub://(projects/[a-z][a-z0-9-]{4,61}[a-z0-9]/subscriptions/[^/\s]+)")
_AZURE = re.compile(r"azure-queue://([a-z0-9]{3,24})/([a-z0-9][a-z0-9-]{1,62})")

#: SQS: the SDK retries throttling and 5xx itself (standard mode), as the S3 store does.
_SQS_RETRIES = {"mode": "standard", "max_attempts": 5}


@dataclass(frozen=True)
class QueueMessage:
    """One received message: its id, what it names (Parsed) and the token the queue
    needs to delete it (SQS receipt handle, Pub/Sub ack id, storage-queue pop receipt)."""

    id: str
    parsed: Parsed
    receipt: str


class EventQueue(Protocol):
    """A queue of store notifications (see the module docstring for the forms)."""

    url: str
    visibility_s: int

    def receive(self, wait_s: float, max_messages: int) -> list[QueueMessage]:
        """Up to max_messages messages, waiting at most wait_s seconds for the first (a
        long poll where the queue has one). Raises StoreError."""
        ...

    def delete(self, messages: Sequence[QueueMessage]) -> None:
        """Remove the messages for good (after the run they started saved its state).
        Raises StoreError; a message whose delete failed is delivered again."""
        ...


def open_queue(url: str, watch: Watch) -> EventQueue:
    """The queue named by url (module docstring), parsing messages for watch.

    Raises ConfigError for a URL of no known form (naming the forms), or naming the pip
    extra when the cloud's SDK is not installed.
    """
    if url.startswith(("https://", "http://")):
        return SqsQueue(url, watch)
    match = _PUBSUB.fullmatch(url)
    if match:
        return PubSubQueue(url, match.group(1), watch)
    match = _AZURE.fullmatch(url)
    if match:
        return AzureStorageQueue(url, match.group(1), match.group(2), watch)
    raise ConfigError(
        f"--on-events {url!r}: not a queue URL navarch reads",
        key_path="--on-events",
        hint="write https://sqs.REGION.amazonaws.com/ACCOUNT/QUEUE, "
        "pubsub://projects/PROJECT/subscriptions/SUB or azure-queue://ACCOUNT/QUEUE "
        "(docs/events.md)",
    )


@contextmanager
def _queue_errors(
    url: str, sdk: tuple[type[Exception], ...], transient: Callable[[Exception], bool]
) -> Iterator[None]:
    """The one boundary a queue's SDK calls go through: an exception of the SDK's (sdk)
    that transient(exc) calls passing -> StoreUnavailable, any other of the SDK's ->
    StoreError, both naming the queue. Other exceptions (bugs) propagate unchanged."""

    def translate(exc: Exception) -> NavarchError | None:
        if not isinstance(exc, sdk):
            return None
        kind = StoreUnavailable if transient(exc) else StoreError
        return kind(f"event queue {url}: {type(exc).__name__}: {exc}")

    with map_exceptions(translate):
        yield


class SqsQueue:
    """An SQS queue (boto3), long-polled up to 20 s a call (SQS's WaitTimeSeconds cap)."""

    visibility_s: int = VISIBILITY_S

    def __init__(self, url: str, watch: Watch, *, client: Any = None) -> None:
        self.url = url
        self.watch = watch
        if client is None:
            boto3 = import_extra("boto3", "aws", "an SQS event queue")
            from botocore.config import Config

            host = _SQS_HOST.search(url)
            region = host.group(1) if host else None
            client = boto3.client("sqs", region_name=region, config=Config(retries=_SQS_RETRIES))
        self.client = client

    def _errors(self) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError, ConnectionError, HTTPClientError

        def transient(exc: Exception) -> bool:
            if isinstance(exc, ConnectionError | HTTPClientError):
                return True
            if isinstance(exc, ClientError):
                status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
                return status >= 500 or status == 429
            return False

        return _queue_errors(self.url, (BotoCoreError, ClientError), transient)

    def receive(self, wait_s: float, max_messages: int) -> list[QueueMessage]:
        with self._errors():
            answer = self.client.receive_message(
                QueueUrl=self.url,
                MaxNumberOfMessages=max(1, min(10, max_messages)),
                WaitTimeSeconds=max(0, min(20, int(wait_s))),
                VisibilityTimeout=self.visibility_s,
            )
        return [
            QueueMessage(
                str(m.get("MessageId", "")),
                parse_s3_message(str(m.get("Body", "")), self.watch),
                str(m["ReceiptHandle"]),
            )
            for m in answer.get("Messages", ())
        ]

    def delete(self, messages: Sequence[QueueMessage]) -> None:
        for start in range(0, len(messages), 10):  # DeleteMessageBatch takes 10 at most
            batch = messages[start : start + 10]
            with self._errors():
                answer = self.client.delete_message_batch(
                    QueueUrl=self.url,
                    Entries=[
                        {"Id": str(i), "ReceiptHandle": m.receipt} for i, m in enumerate(batch)
                    ],
                )
            for failed in answer.get("Failed", ()):
                log.warning(
                    "event queue %s: message not deleted (%s): it will be delivered again",
                    self.url,
                    failed.get("Code"),
                )


class PubSubQueue:
    """A Pub/Sub pull subscription (google-cloud-pubsub): a synchronous pull that waits
    up to wait_s for messages; acknowledging is the delete."""

    visibility_s: int = VISIBILITY_S

    def __init__(self, url: str, subscription: str, watch: Watch, *, client: Any = None) -> None:
        self.url = url
        self.subscription = subscription
        self.watch = watch
        if client is None:
            pubsub = import_extra("google.cloud.pubsub_v1", "gcp", "a Pub/Sub event queue")
            client = pubsub.SubscriberClient()
        self.client = client

    def _errors(self) -> Any:
        from google.api_core import exceptions as gexc

        def transient(exc: Exception) -> bool:
            return isinstance(
                exc, gexc.ServiceUnavailable | gexc.TooManyRequests | gexc.InternalServerError
            )

        return _queue_errors(self.url, (gexc.GoogleAPIError,), transient)

    def receive(self, wait_s: float, max_messages: int) -> list[QueueMessage]:
        from google.api_core import exceptions as gexc

        try:
            with self._errors():
                answer = self.client.pull(
                    request={"subscription": self.subscription, "max_messages": max_messages},
                    timeout=max(1.0, wait_s),
                )
        except StoreError as exc:
            if isinstance(exc.__cause__, gexc.DeadlineExceeded):
                return []  # nothing arrived within the wait: an empty long poll
            raise
        return [
            QueueMessage(
                str(r.message.message_id),
                parse_pubsub_message(dict(r.message.attributes), bytes(r.message.data), self.watch),
                str(r.ack_id),
            )
            for r in answer.received_messages
        ]

    def delete(self, messages: Sequence[QueueMessage]) -> None:
        if messages:
            with self._errors():
                self.client.acknowledge(
                    request={
                        "subscription": self.subscription,
                        "ack_ids": [m.receipt for m in messages],
                    }
                )


class AzureStorageQueue:
    """An Azure Storage queue (azure-storage-queue). It has no long poll: an empty queue
    is asked again every POLL_S until wait_s has passed.

    Credentials as the az:// store: AZURE_STORAGE_CONNECTION_STRING when set (Azurite in
    tests), else https://<account>.queue.core.windows.net with DefaultAzureCredential."""

    POLL_S = 1.0

    visibility_s: int = VISIBILITY_S

    def __init__(
        self, url: str, account: str, queue: str, watch: Watch, *, client: Any = None
    ) -> None:
        self.url = url
        self.watch = watch
        if client is None:
            qmod = import_extra("azure.storage.queue", "azure", "an Azure Storage event queue")
            conn = os.environ.get("AZURE_STORAGE_CONNECTION_STRING")
            if conn:
                client = qmod.QueueClient.from_connection_string(conn, queue)
            else:
                from azure.identity import DefaultAzureCredential

                client = qmod.QueueClient(
                    f"https://{account}.queue.core.windows.net", queue, DefaultAzureCredential()
                )
        self.client = client

    def _errors(self) -> Any:
        from azure.core.exceptions import (
            AzureError,
            HttpResponseError,
            ServiceRequestError,
            ServiceResponseError,
        )

        def transient(exc: Exception) -> bool:
            if isinstance(exc, ServiceRequestError | ServiceResponseError):
                return True
            status = getattr(exc, "status_code", 0) if isinstance(exc, HttpResponseError) else 0
            return isinstance(status, int) and (status >= 500 or status == 429)

        return _queue_errors(self.url, (AzureError,), transient)

    def receive(self, wait_s: float, max_messages: int) -> list[QueueMessage]:
        deadline = time.monotonic() + wait_s
        while True:
            with self._errors():
                got = list(
                    self.client.receive_messages(
                        messages_per_page=max(1, min(32, max_messages)),
                        visibility_timeout=self.visibility_s,
                        max_messages=max_messages,
                    )
                )
            if got or time.monotonic() >= deadline:
                break
            time.sleep(min(self.POLL_S, max(0.0, deadline - time.monotonic())))
        return [
            QueueMessage(
                str(m.id),
                parse_event_grid_message(str(m.content or ""), self.watch),
                f"{m.id}\n{m.pop_receipt}",
            )
            for m in got
        ]

    def delete(self, messages: Sequence[QueueMessage]) -> None:
        for m in messages:
            message_id, _, pop_receipt = m.receipt.partition("\n")
            with self._errors():
                self.client.delete_message(message_id, pop_receipt)

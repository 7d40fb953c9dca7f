"""The object stores' notifications, parsed into the health reports they name.

Each store announces a written object in its own shape; this module reads the three that
navarch sets up (``navarch events setup``) and keeps only what can start a run: a health
report created or overwritten under ``health/<fleet>/``. Everything else is counted by
reason (`Ignored`) and dropped; nothing here raises, so a stray or hostile message never
stops a run. Shapes, with their sources (samples in tests/events/samples/):

- S3 event notification, the SQS message body ``{"Records": [{"eventSource": "aws:s3",
  "eventName": "ObjectCreated:Put", "s3": {"bucket": {"name"}, "object": {"key"}}}]}``;
  the key is URL-encoded ("red flower.jpg" -> "red+flower.jpg": unquote_plus) and the test
  message ``{"Event": "s3:TestEvent"}`` has no Records (AWS S3 user guide,
  "Event message structure", notification-content-structure.md).
- S3 through EventBridge, the rule target's SQS body ``{"source": "aws.s3", "detail-type":
  "Object Created", "detail": {"bucket": {"name"}, "object": {"key"}}}`` (AWS S3 user
  guide, "EventBridge event message structure", ev-events.md).
- GCS Pub/Sub notification: attributes ``eventType`` (OBJECT_FINALIZE), ``bucketId``,
  ``objectId`` (the plain object name), data the JSON_API_V1 object resource (Cloud
  Storage, "Pub/Sub notifications for Cloud Storage").
- Azure Blob Storage event through Event Grid to a storage queue: the queue message is one
  event (Event Grid schema or CloudEvents 1.0) as JSON, base64-encoded by Event Grid (plain
  JSON is accepted too); ``eventType``/``type`` Microsoft.Storage.BlobCreated, the blob in
  ``subject`` ``/blobServices/default/containers/<c>/blobs/<name>`` (Azure Event Grid,
  "Azure Blob Storage as an Event Grid source", event-schema-blob-storage.md).

The clouds' own instance events start a run too, through the same queue: a dead host
writes no report, so only its cloud can announce it. What is read (samples in
tests/events/samples/; navarch.events.setup creates the routes):

- EventBridge to SQS, ``{"source": "aws.ec2", "detail-type": "EC2 Instance State-change
  Notification", "detail": {"instance-id", "state"}}`` and "EC2 Spot Instance Interruption
  Warning" (Amazon EC2 User Guide, "State change events for Amazon EC2 instances" and
  "Spot Instance interruption notices"), and ``{"source": "aws.health", "detail-type": "AWS
  Health Event", "detail": {"service": "EC2"}, "resources": [instance ids]}`` (AWS Health
  User Guide, "Monitoring AWS Health events with Amazon EventBridge").
- A Cloud Logging sink to Pub/Sub: the LogEntry of a Compute Engine system event,
  ``protoPayload.methodName`` one of GCE_SYSTEM_EVENT_METHODS,
  ``resource.labels.instance_id`` (Compute Engine, "Viewing audit logs": system event
  audit logs).
- Azure Resource Health through the Event Grid system topic Microsoft.ResourceNotifications
  .HealthResources: ``AvailabilityStatusChanged`` and ``ResourceAnnotated``, the VM's
  resource id in ``data.resourceInfo.id`` (Azure Event Grid, event-schema-health-resources.md).

An instance event names the instance, never a report: it starts a full run (the cloud
listed again), and what the run does is decided by what it lists, not by the message.

Object keys come from nodes (an agent chooses what it writes) and are hostile: a key is
accepted only when it has the exact shape ``health/<fleet>/<pool>/<node>.json`` with pool
and node names of the characters fleet.yaml allows, so no other text reaches a run.
"""

from __future__ import annotations

import base64
import binascii
import enum
import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote_plus

__all__ = [
    "AZURE_HEALTH_EVENT_TYPES",
    "GCE_SYSTEM_EVENT_METHODS",
    "Ignored",
    "Parsed",
    "Watch",
    "parse_event_grid_message",
    "parse_pubsub_message",
    "parse_s3_message",
]

#: Longest message body read, in bytes: an S3 notification for one object is about 1 KB;
#: SQS caps a message at 256 KiB, a storage queue at 64 KiB.
MAX_MESSAGE_BYTES = 256 * 1024

#: A pool or node name as it may appear in a report key (fleet.yaml's names and the node
#: names navarch builds from them: letters, digits, dashes, underscores, dots).
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")

#: S3 event names (no "s3:" prefix in the message) and EventBridge detail types that
#: write an object.
_S3_CREATED = "ObjectCreated:"
_EB_CREATED = "Object Created"
_GCS_FINALIZE = "OBJECT_FINALIZE"
_BLOB_CREATED = "Microsoft.Storage.BlobCreated"
_BLOB_SUBJECT = re.compile(r"/blobServices/default/containers/([^/]+)/blobs/(.+)")


#: The clouds' instance events that start a run (module docstring).
_EC2_DETAIL_TYPES = frozenset(
    {"EC2 Instance State-change Notification", "EC2 Spot Instance Interruption Warning"}
)
#: The Compute Engine system events of an instance its host lost or stopped: host error,
#: preemption, automatic restart, guest termination, termination for host maintenance
#: (Compute Engine, "Viewing audit logs" and "Troubleshooting VM shutdowns and reboots").
#: navarch.events.setup's log sink filters on the same tuple.
GCE_SYSTEM_EVENT_METHODS = (
    "compute.instances.hostError",
    "compute.instances.preempted",
    "compute.instances.automaticRestart",
    "compute.instances.guestTerminate",
    "compute.instances.terminateOnHostMaintenance",
)
_GCE_METHODS = frozenset(GCE_SYSTEM_EVENT_METHODS)
_HEALTH_RESOURCES = "Microsoft.ResourceNotifications.HealthResources."
#: The Resource Health event types of the HealthResources system topic (Azure Event Grid,
#: event-schema-health-resources.md); navarch.events.setup subscribes to these.
AZURE_HEALTH_EVENT_TYPES = (
    f"{_HEALTH_RESOURCES}AvailabilityStatusChanged",
    f"{_HEALTH_RESOURCES}ResourceAnnotated",
)
#: A VM's resource id (its health status's id continues after it), without the first "/".
_AZURE_VM = re.compile(
    r"/(subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.Compute/"
    r"virtualMachines/[^/]+)",
    re.IGNORECASE,
)
#: An instance id or VM resource id as a message may name it (kept only for the log).
_INSTANCE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:-]{0,299}")


class Instance(str):
    """An instance a cloud event names (an EC2 instance id, a GCE instance id, an Azure
    VM's resource id): a full run follows, whichever instance it is."""


class Ignored(enum.Enum):
    """Why a notification (or one record of it) started nothing, in this order."""

    MALFORMED = "malformed"  # not JSON, not a known shape, oversized
    TEST_EVENT = "test_event"  # S3's s3:TestEvent, sent when a notification is set up
    NOT_A_WRITE = "not_a_write"  # a delete, a metadata update, an archive
    OTHER_BUCKET = "other_bucket"  # a bucket or container this fleet's store is not in
    OTHER_PREFIX = "other_prefix"  # an object outside health/<fleet>/
    NOT_A_REPORT_KEY = "not_a_report_key"  # under the prefix, not <pool>/<node>.json
    OTHER_CLOUD_EVENT = "other_cloud_event"  # a cloud event that says nothing of a machine


@dataclass(frozen=True)
class Watch:
    """Where a fleet's reports land: the bucket (S3, GCS) or container (Azure) and the
    store's key prefix ("" or "some/prefix/"), and the fleet name."""

    bucket: str
    store_prefix: str
    fleet: str

    @classmethod
    def of_store(cls, store_url: str, fleet: str) -> Watch:
        """From the fleet's store URL: s3://bucket[/prefix], gs://bucket[/prefix] or
        az://account/container[/prefix]. Raises ValueError for any other scheme (the
        file:// store announces nothing)."""
        for scheme in ("s3://", "gs://"):
            if store_url.startswith(scheme):
                bucket, _, prefix = store_url[len(scheme) :].partition("/")
                return cls(bucket, _slash(prefix), fleet)
        if store_url.startswith("az://"):
            _, _, rest = store_url[len("az://") :].partition("/")
            container, _, prefix = rest.partition("/")
            return cls(container, _slash(prefix), fleet)
        raise ValueError(f"store {store_url!r} sends no notifications: use s3://, gs:// or az://")

    @property
    def object_prefix(self) -> str:
        """The object name prefix of the fleet's reports in the bucket, as the
        notification filter takes it: "<store prefix>health/<fleet>/"."""
        return f"{self.store_prefix}health/{self.fleet}/"

    def report_key(self, bucket: str, object_name: str) -> str | Ignored:
        """The store-relative key "health/<fleet>/<pool>/<node>.json" of a written object,
        or why it is not one of this fleet's reports."""
        if bucket != self.bucket:
            return Ignored.OTHER_BUCKET
        if not object_name.startswith(self.object_prefix):
            return Ignored.OTHER_PREFIX
        parts = object_name[len(self.object_prefix) :].split("/")
        if (
            len(parts) != 2
            or not parts[1].endswith(".json")
            or not _NAME.fullmatch(parts[0])
            or not _NAME.fullmatch(parts[1][: -len(".json")])
        ):
            return Ignored.NOT_A_REPORT_KEY
        return object_name[len(self.store_prefix) :]


def _slash(prefix: str) -> str:
    prefix = prefix.strip("/")
    return prefix + "/" if prefix else ""


@dataclass(frozen=True)
class Parsed:
    """What messages named: the report keys (store-relative, sorted, distinct), the
    instances the clouds' own events named (sorted, distinct: each means a full run), and
    the count of what was ignored, by reason."""

    keys: tuple[str, ...] = ()
    ignored: Mapping[Ignored, int] = field(default_factory=dict)
    instances: tuple[str, ...] = ()

    @classmethod
    def of(cls, outcomes: Iterable[str | Ignored]) -> Parsed:
        """From one outcome per record: a key, an Instance, or why it was ignored."""
        keys: set[str] = set()
        instances: set[str] = set()
        ignored: Counter[Ignored] = Counter()
        for o in outcomes:
            if isinstance(o, Ignored):
                ignored[o] += 1
            elif isinstance(o, Instance):
                instances.add(str(o))
            else:
                keys.add(o)
        return cls(tuple(sorted(keys)), dict(ignored), tuple(sorted(instances)))

    @property
    def named(self) -> tuple[str, ...] | None:
        """The report keys a run started by these messages may be narrowed to, or None
        for a full run: a cloud's instance event (a dead host writes no report) needs the
        cloud listed again."""
        return None if self.instances else self.keys

    def __add__(self, other: Parsed) -> Parsed:
        counts = Counter(self.ignored)
        counts.update(other.ignored)
        return Parsed(
            tuple(sorted({*self.keys, *other.keys})),
            dict(counts),
            tuple(sorted({*self.instances, *other.instances})),
        )

    def ignored_text(self) -> str:
        """ "3 test_event, 1 malformed" (the Ignored order), or "" when nothing was."""
        return ", ".join(f"{self.ignored[r]} {r.value}" for r in Ignored if self.ignored.get(r))


def _json(body: str | bytes) -> Any:
    """The parsed JSON document, or None when body is oversized or not JSON."""
    if len(body) > MAX_MESSAGE_BYTES:
        return None
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None


def _str(doc: Any, *path: str) -> str | None:
    """doc[path[0]][path[1]]... when every step is a mapping and the end a string."""
    for name in path:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(name)
    return doc if isinstance(doc, str) else None


def parse_s3_message(body: str | bytes, watch: Watch) -> Parsed:
    """One SQS message body from S3 (direct notification or EventBridge) -> Parsed.

    A body with several Records yields one outcome per record. Never raises. Source: AWS
    S3 user guide, notification-content-structure.md and ev-events.md (module docstring).
    """
    doc = _json(body)
    if not isinstance(doc, dict):
        return Parsed.of([Ignored.MALFORMED])
    if doc.get("Event") == "s3:TestEvent":
        return Parsed.of([Ignored.TEST_EVENT])
    if doc.get("source") == "aws.s3" and "detail" in doc:
        return Parsed.of([_eventbridge(doc, watch)])
    if doc.get("source") in ("aws.ec2", "aws.health") and "detail" in doc:
        return Parsed.of(_aws_instance_event(doc))
    records = doc.get("Records")
    if not isinstance(records, list) or not records:
        return Parsed.of([Ignored.MALFORMED])
    return Parsed.of(_s3_record(r, watch) for r in records)


def _s3_record(record: Any, watch: Watch) -> str | Ignored:
    name = _str(record, "eventName")
    bucket = _str(record, "s3", "bucket", "name")
    key = _str(record, "s3", "object", "key")
    if _str(record, "eventSource") != "aws:s3" or name is None or bucket is None or key is None:
        return Ignored.MALFORMED
    if not name.startswith(_S3_CREATED):
        return Ignored.NOT_A_WRITE
    return watch.report_key(bucket, unquote_plus(key))


def _eventbridge(doc: dict[str, Any], watch: Watch) -> str | Ignored:
    bucket = _str(doc, "detail", "bucket", "name")
    key = _str(doc, "detail", "object", "key")
    if bucket is None or key is None or not isinstance(doc.get("detail-type"), str):
        return Ignored.MALFORMED
    if doc["detail-type"] != _EB_CREATED:
        return Ignored.NOT_A_WRITE
    # EventBridge's example keys carry no special characters; a "+" or "%" is not one a
    # report key can hold, so decoding as S3's notifications do loses nothing.
    return watch.report_key(bucket, unquote_plus(key))


def parse_pubsub_message(attributes: Mapping[str, str], data: bytes, watch: Watch) -> Parsed:
    """One Pub/Sub message of a GCS notification (its attributes, and its data already
    base64-decoded as the client libraries hand it over) -> Parsed.

    The attributes alone name the object (eventType, bucketId, objectId); the JSON_API_V1
    data is read only when they lack it. Never raises. Source: Cloud Storage, "Pub/Sub
    notifications for Cloud Storage" (attributes and payload).
    """
    event = attributes.get("eventType")
    bucket = attributes.get("bucketId")
    name = attributes.get("objectId")
    if event is None and bucket is None and data:
        entry = _json(data)
        if isinstance(entry, dict) and "protoPayload" in entry:
            return Parsed.of([_gce_system_event(entry)])
    if bucket is None or name is None:
        doc = _json(data) if data else None
        bucket = _str(doc, "bucket")
        name = _str(doc, "name")
    if not isinstance(event, str) or bucket is None or name is None:
        return Parsed.of([Ignored.MALFORMED])
    if event != _GCS_FINALIZE:
        return Parsed.of([Ignored.NOT_A_WRITE])
    return Parsed.of([watch.report_key(bucket, name)])


def parse_event_grid_message(text: str | bytes, watch: Watch) -> Parsed:
    """One storage-queue message from an Event Grid subscription -> Parsed.

    The text is base64 of the event's JSON (what Event Grid writes) or the JSON itself; a
    JSON array yields one outcome per event. Both the Event Grid schema (eventType,
    subject) and CloudEvents 1.0 (type, subject) are read. Never raises. Source: Azure
    Event Grid, event-schema-blob-storage.md and handler-storage-queues.md.
    """
    raw = text.encode() if isinstance(text, str) else text
    doc = _json(raw)
    if doc is None:
        try:
            doc = _json(base64.b64decode(raw, validate=True))
        except (binascii.Error, ValueError):
            doc = None
    events = doc if isinstance(doc, list) else [doc]
    if not events or not all(isinstance(e, dict) for e in events):
        return Parsed.of([Ignored.MALFORMED])
    return Parsed.of(_blob_event(e, watch) for e in events)


def _blob_event(event: dict[str, Any], watch: Watch) -> str | Ignored:
    kind = _str(event, "eventType") or _str(event, "type")
    subject = _str(event, "subject")
    if kind is not None and kind.startswith(_HEALTH_RESOURCES):
        return _azure_health_event(event)
    if kind is None or subject is None:
        return Ignored.MALFORMED
    if kind != _BLOB_CREATED:
        return Ignored.NOT_A_WRITE
    match = _BLOB_SUBJECT.fullmatch(subject)
    if match is None:
        return Ignored.MALFORMED
    return watch.report_key(match.group(1), match.group(2))


def _instance(value: Any) -> Instance | Ignored:
    """A named instance, or MALFORMED for anything that is not an id's characters."""
    if isinstance(value, str) and _INSTANCE.fullmatch(value):
        return Instance(value)
    return Ignored.MALFORMED


def _aws_instance_event(doc: dict[str, Any]) -> list[Instance | Ignored]:
    """An EventBridge envelope from aws.ec2 or aws.health (module docstring) -> the
    instances it names, or why it starts nothing."""
    kind = doc.get("detail-type")
    if doc.get("source") == "aws.health":
        if kind != "AWS Health Event" or _str(doc, "detail", "service") != "EC2":
            return [Ignored.OTHER_CLOUD_EVENT]
        resources = doc.get("resources")
        named = (
            [r.rsplit("/", 1)[-1] for r in resources if isinstance(r, str)]
            if isinstance(resources, list)
            else []
        )
        return [_instance(r) for r in named if r.startswith("i-")] or [Ignored.OTHER_CLOUD_EVENT]
    if kind not in _EC2_DETAIL_TYPES:
        return [Ignored.OTHER_CLOUD_EVENT]
    return [_instance(_str(doc, "detail", "instance-id"))]


def _gce_system_event(entry: dict[str, Any]) -> Instance | Ignored:
    """A Cloud Logging LogEntry sent through a sink to Pub/Sub -> the GCE instance of a
    host error, preemption, automatic restart, guest termination or termination for host
    maintenance."""
    if _str(entry, "protoPayload", "methodName") not in _GCE_METHODS:
        return Ignored.OTHER_CLOUD_EVENT
    return _instance(_str(entry, "resource", "labels", "instance_id"))


def _azure_health_event(event: dict[str, Any]) -> Instance | Ignored:
    """A Resource Health event of a VM (Event Grid or CloudEvents schema) -> the VM."""
    rid = _str(event, "data", "resourceInfo", "id") or _str(event, "subject") or ""
    vm = _AZURE_VM.match(rid)
    if vm is None:
        return Ignored.OTHER_CLOUD_EVENT
    return _instance(vm.group(1))

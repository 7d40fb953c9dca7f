"""`navarch events setup FLEET`: the queue and the bucket notification, for the fleet's store.

Per store (the request bodies are built by the pure functions below, which tests check
against each SDK's own request models):

s3://  (AWS S3 user guide, "Walkthrough: Configuring a bucket for notifications (SNS topic
       or SQS queue)"; the SQS API reference)
    sqs.create_queue            navarch-<fleet>-events, 20 s long polls, 10 min visibility
    sqs.get_queue_attributes    its ARN
    events.put_rule             navarch-<fleet>-instances: EC2 state changes, Spot interruption
                                warnings and AWS Health events of EC2 (a dead host writes no
                                report: its cloud announces it; Amazon EventBridge user guide)
    events.put_targets          the rule's target: the queue
    sqs.set_queue_attributes    a queue policy: s3.amazonaws.com may SendMessage, only for
                                this bucket (aws:SourceArn) and account (aws:SourceAccount);
                                events.amazonaws.com only for that rule
    s3.get_bucket_notification_configuration   what the bucket already notifies
    s3.put_bucket_notification_configuration   the same plus ours (s3:ObjectCreated:*, prefix
                                <store prefix>health/<fleet>/); the call replaces the whole
                                configuration, so the others are kept as they were
gs://  (Cloud Storage, "Configure Pub/Sub notifications"; the Pub/Sub API reference)
    pubsub.create_topic         projects/<p>/topics/navarch-<fleet>-events
    storage.get_service_account_email   the project's Cloud Storage service agent
    pubsub.get_iam_policy       the topic's policy, then
    pubsub.set_iam_policy       the same plus roles/pubsub.publisher for that agent (etag kept)
    pubsub.create_subscription  projects/<p>/subscriptions/navarch-<fleet>-events (ack 600 s)
    storage.notification.create OBJECT_FINALIZE, JSON_API_V1, object_name_prefix
az://  (Azure Event Grid, "Storage queue as an event handler"; Event Subscriptions REST API)
    queue.create_queue          navarch-<fleet>-events in the store's storage account
    eventgrid.event_subscriptions.begin_create_or_update   on the storage account: BlobCreated
                                whose subject begins with the fleet's health prefix, to the
                                queue, Event Grid schema

Every step is idempotent where the cloud allows (a queue or topic that exists is kept), so
setup can run again. `--dry-run` prints the calls and makes none. SDK errors are translated
at one boundary (`_setup_errors`) into StoreError naming the step.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from navarch.errors import ConfigError, NavarchError, StoreError, map_exceptions
from navarch.events.messages import Watch
from navarch.extras import import_extra

__all__ = [
    "INSTANCE_EVENT_PATTERN",
    "ApiCall",
    "SetupTarget",
    "azure_event_subscription",
    "gcs_notification",
    "instance_rule_name",
    "queue_name",
    "s3_notification_configuration",
    "s3_queue_policy",
    "setup_events",
]

#: Seconds: how long a received message stays hidden (navarch.events.queues.VISIBILITY_S),
#: the longest SQS long poll, and how long an undelivered message is kept (one day: after
#: that the periodic run has long covered it).
_VISIBILITY_S = 600
_LONG_POLL_S = 20
_RETENTION_S = 86_400
BLOB_CREATED = "Microsoft.Storage.BlobCreated"
#: Top-level packages whose exceptions _setup_errors translates.
_SDK_PACKAGES = frozenset({"botocore", "boto3", "google", "grpc", "azure"})


def queue_name(fleet: str) -> str:
    """The queue, topic and subscription name: "navarch-<fleet>-events"."""
    return f"navarch-{fleet}-events"


@dataclass(frozen=True)
class ApiCall:
    """One cloud call setup makes: SDK client, operation, keyword arguments."""

    client: str
    operation: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def text(self) -> str:
        """ "sqs.create_queue(QueueName='navarch-research-events', ...)": the call as code."""
        args = ", ".join(f"{k}={_literal(v)}" for k, v in self.params.items())
        return f"{self.client}.{self.operation}({args})"


def _literal(value: Any) -> str:
    return json.dumps(value, sort_keys=True) if isinstance(value, dict | list) else repr(value)


@dataclass(frozen=True)
class SetupTarget:
    """Where the notification goes: the store (Watch), the queue URL it yields, and the
    cloud's scope (AWS region; GCP project; Azure subscription, resource group, account)."""

    watch: Watch
    store_url: str
    region: str = ""
    project: str = ""
    subscription_id: str = ""
    resource_group: str = ""

    @classmethod
    def of_fleet(
        cls, store_url: str, fleet: str, providers: Mapping[str, Mapping[str, Any]], **given: str
    ) -> SetupTarget:
        """From the fleet's store URL and providers (the first provider of the store's
        cloud gives region, project, or subscription and resource group; `given` flags
        override them). Raises ConfigError for a store that sends no notifications, or a
        scope neither the fleet nor a flag gives."""
        try:
            watch = Watch.of_store(store_url, fleet)
        except ValueError as exc:
            raise ConfigError(str(exc), key_path="store") from exc
        cloud = {"s3": "aws", "gs": "gcp", "az": "azure"}[store_url.split("://")[0]]
        found = next((dict(p) for p in providers.values() if p.get("type") == cloud), {})
        scope = {
            "region": given.get("region") or found.get("region", ""),
            "project": given.get("project") or found.get("project", ""),
            "subscription_id": given.get("subscription_id") or found.get("subscription_id", ""),
            "resource_group": given.get("resource_group") or found.get("resource_group", ""),
        }
        need = {"gcp": ["project"], "azure": ["subscription_id", "resource_group"]}.get(cloud, [])
        for name in need:
            if not scope[name]:
                raise ConfigError(
                    f"events setup for {store_url}: no {name} in a {cloud} provider of the fleet",
                    key_path="providers",
                    hint=f"pass --{name.replace('_', '-')}",
                )
        return cls(watch, store_url, **scope)

    @property
    def account(self) -> str:
        """The Azure storage account of an az:// store."""
        return self.store_url[len("az://") :].partition("/")[0]


# -- request bodies (pure) ---------------------------------------------------------------


def instance_rule_name(fleet: str) -> str:
    """The EventBridge rule of the fleet's instance events: "navarch-<fleet>-instances"."""
    return f"navarch-{fleet}-instances"


#: The EventBridge pattern of the instance events a run starts on (navarch.events.messages:
#: EC2 state changes and Spot interruption warnings, AWS Health events of EC2). EC2's events
#: carry no tags, so every instance of the account and region matches; the run that follows
#: lists only navarch's.
INSTANCE_EVENT_PATTERN: dict[str, Any] = {
    "source": ["aws.ec2", "aws.health"],
    "detail-type": [
        "EC2 Instance State-change Notification",
        "EC2 Spot Instance Interruption Warning",
        "AWS Health Event",
    ],
}


def s3_queue_policy(
    queue_arn: str, bucket: str, account: str, rule_arn: str = ""
) -> dict[str, Any]:
    """The SQS queue policy letting S3 send this bucket's notifications and, with
    rule_arn, that EventBridge rule its events, and nothing else (AWS S3 user guide,
    "Granting permissions to publish event notification messages to a destination":
    Principal s3.amazonaws.com, aws:SourceArn and aws:SourceAccount; Amazon EventBridge user
    guide, "Permissions for Amazon SQS": Principal events.amazonaws.com, aws:SourceArn)."""
    rule = [
        {
            "Sid": "EventBridgeSendsInstanceEvents",
            "Effect": "Allow",
            "Principal": {"Service": "events.amazonaws.com"},
            "Action": "sqs:SendMessage",
            "Resource": queue_arn,
            "Condition": {"ArnEquals": {"aws:SourceArn": rule_arn}},
        }
    ]
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "S3SendsHealthReportEvents",
                "Effect": "Allow",
                "Principal": {"Service": "s3.amazonaws.com"},
                "Action": "sqs:SendMessage",
                "Resource": queue_arn,
                "Condition": {
                    "ArnLike": {"aws:SourceArn": f"arn:aws:s3:::{bucket}"},
                    "StringEquals": {"aws:SourceAccount": account},
                },
            }
        ]
        + (rule if rule_arn else []),
    }


def s3_notification_configuration(
    existing: Mapping[str, Any], queue_arn: str, watch: Watch
) -> dict[str, Any]:
    """The bucket's notification configuration with the fleet's queue entry added (or
    replaced, by Id "navarch-<fleet>-health"); every other entry kept. Shape: the
    NotificationConfiguration of PutBucketNotificationConfiguration (S3 API reference)."""
    ours = f"navarch-{watch.fleet}-health"
    config = {
        k: list(v)
        for k, v in existing.items()
        if k
        in (
            "TopicConfigurations",
            "QueueConfigurations",
            "LambdaFunctionConfigurations",
        )
    }
    if "EventBridgeConfiguration" in existing:
        config["EventBridgeConfiguration"] = existing["EventBridgeConfiguration"]
    queues = [q for q in config.get("QueueConfigurations", []) if q.get("Id") != ours]
    queues.append(
        {
            "Id": ours,
            "QueueArn": queue_arn,
            "Events": ["s3:ObjectCreated:*"],
            "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": watch.object_prefix}]}},
        }
    )
    config["QueueConfigurations"] = queues
    return config


def gcs_notification(target: SetupTarget) -> dict[str, Any]:
    """Keyword arguments of google-cloud-storage's Bucket.notification() for the fleet:
    its topic, OBJECT_FINALIZE only, the JSON_API_V1 payload, the health prefix (Cloud
    Storage JSON API, notifications resource)."""
    return {
        "topic_name": queue_name(target.watch.fleet),
        "topic_project": target.project,
        "event_types": ["OBJECT_FINALIZE"],
        "blob_name_prefix": target.watch.object_prefix,
        "payload_format": "JSON_API_V1",
    }


def azure_event_subscription(target: SetupTarget) -> dict[str, Any]:
    """The Event Grid event subscription (REST body, Event Subscriptions - Create Or
    Update, api-version 2022-06-15) on the storage account: BlobCreated events whose
    subject begins with the fleet's health prefix, to the storage queue, Event Grid
    schema (Azure Event Grid, "Storage queue as an event handler")."""
    w = target.watch
    return {
        "properties": {
            "destination": {
                "endpointType": "StorageQueue",
                "properties": {
                    "resourceId": _azure_account_id(target),
                    "queueName": queue_name(w.fleet),
                    "queueMessageTimeToLiveInSeconds": _RETENTION_S,
                },
            },
            "filter": {
                "includedEventTypes": [BLOB_CREATED],
                "subjectBeginsWith": (
                    f"/blobServices/default/containers/{w.bucket}/blobs/{w.object_prefix}"
                ),
            },
            "eventDeliverySchema": "EventGridSchema",
        }
    }


def _azure_account_id(target: SetupTarget) -> str:
    return (
        f"/subscriptions/{target.subscription_id}/resourceGroups/{target.resource_group}"
        f"/providers/Microsoft.Storage/storageAccounts/{target.account}"
    )


def queue_url(target: SetupTarget, sqs_url: str = "") -> str:
    """The --on-events URL setup's queue answers to."""
    if target.store_url.startswith("gs://"):
        return f"pubsub://projects/{target.project}/subscriptions/{queue_name(target.watch.fleet)}"
    if target.store_url.startswith("az://"):
        return f"azure-queue://{target.account}/{queue_name(target.watch.fleet)}"
    return sqs_url


# -- doing it ----------------------------------------------------------------------------


@contextmanager
def _setup_errors(step: str) -> Iterator[None]:
    """The one boundary of setup's SDK calls: an exception of a cloud SDK (botocore,
    google.api_core, azure.core) -> StoreError naming the step (setup is run by a person,
    who reads the cloud's own message); any other exception propagates unchanged."""

    def translate(exc: Exception) -> NavarchError | None:
        if type(exc).__module__.split(".")[0] not in _SDK_PACKAGES:
            return None
        return StoreError(f"events setup, {step}: {type(exc).__name__}: {exc}")

    with map_exceptions(translate):
        yield


class _Calls:
    """Records each call; runs it unless dry_run, else answers with dry_answer."""

    def __init__(self, dry_run: bool, say: Callable[[str], None]) -> None:
        self.dry_run = dry_run
        self.say = say
        self.made: list[ApiCall] = []

    def __call__(
        self, client: Any, label: str, operation: str, dry_answer: Any = None, /, **params: Any
    ) -> Any:
        call = ApiCall(label, operation, params)
        self.made.append(call)
        self.say(call.text())
        if self.dry_run:
            return dry_answer
        with _setup_errors(call.text()[:200]):
            method = client
            for part in operation.split("."):
                method = getattr(method, part)
            return method(**params)


def setup_events(
    target: SetupTarget,
    *,
    dry_run: bool = False,
    say: Callable[[str], None] = print,
    clients: Mapping[str, Any] | None = None,
) -> tuple[str, list[ApiCall]]:
    """Create the fleet's queue and bucket notification -> (the --on-events URL, the
    calls made, in order). say(line) is told each call as it is made. clients: SDK clients
    by name ("sqs", "s3", "publisher", "subscriber", "storage", "queue", "eventgrid"),
    made from the default credentials when absent. Raises StoreError (a failed call: the
    cloud's message), ConfigError (the cloud's extra is not installed)."""
    calls = _Calls(dry_run, say)
    given = dict(clients or {})
    if target.store_url.startswith("s3://"):
        url = _setup_s3(target, calls, given)
    elif target.store_url.startswith("gs://"):
        _setup_gcs(target, calls, given)
        url = queue_url(target)
    else:
        _setup_azure(target, calls, given)
        url = queue_url(target)
    return url, calls.made


def _client(given: dict[str, Any], name: str, dry_run: bool, make: Callable[[], Any]) -> Any:
    if name not in given:
        given[name] = None if dry_run else make()
    return given[name]


def _setup_s3(target: SetupTarget, calls: _Calls, given: dict[str, Any]) -> str:
    w = target.watch
    name = queue_name(w.fleet)
    region = target.region or None

    def make(service: str) -> Callable[[], Any]:
        boto3 = import_extra("boto3", "aws", "events setup for an s3:// store")
        return lambda: boto3.client(service, region_name=region)

    sqs = _client(given, "sqs", calls.dry_run, make("sqs"))
    s3 = _client(given, "s3", calls.dry_run, make("s3"))
    placeholder_url = f"https://sqs.{region or 'REGION'}.amazonaws.com/ACCOUNT/{name}"
    created = calls(
        sqs,
        "sqs",
        "create_queue",
        {"QueueUrl": placeholder_url},
        QueueName=name,
        Attributes={
            "ReceiveMessageWaitTimeSeconds": str(_LONG_POLL_S),
            "VisibilityTimeout": str(_VISIBILITY_S),
            "MessageRetentionPeriod": str(_RETENTION_S),
        },
    )
    url = str(created["QueueUrl"])
    attrs = calls(
        sqs,
        "sqs",
        "get_queue_attributes",
        {"Attributes": {"QueueArn": f"arn:aws:sqs:{region or 'REGION'}:ACCOUNT:{name}"}},
        QueueUrl=url,
        AttributeNames=["QueueArn"],
    )
    arn = str(attrs["Attributes"]["QueueArn"])
    account = arn.split(":")[4]
    rule_arn = _setup_instance_rule(target, calls, given, arn, make("events"))
    policy = s3_queue_policy(arn, w.bucket, account, rule_arn)
    calls(
        sqs,
        "sqs",
        "set_queue_attributes",
        QueueUrl=url,
        Attributes={"Policy": json.dumps(policy, sort_keys=True)},
    )
    existing = calls(s3, "s3", "get_bucket_notification_configuration", {}, Bucket=w.bucket)
    calls(
        s3,
        "s3",
        "put_bucket_notification_configuration",
        Bucket=w.bucket,
        NotificationConfiguration=s3_notification_configuration(existing or {}, arn, w),
    )
    return url


def _setup_instance_rule(
    target: SetupTarget,
    calls: _Calls,
    given: dict[str, Any],
    queue_arn: str,
    make: Callable[[], Any],
) -> str:
    """The EventBridge rule sending the account's EC2 instance events to the fleet's
    queue (put_rule, then put_targets; both replace what is there, so setup can run
    again) -> the rule's ARN."""
    events = _client(given, "events", calls.dry_run, make)
    name = instance_rule_name(target.watch.fleet)
    rule = calls(
        events,
        "events",
        "put_rule",
        {"RuleArn": f"arn:aws:events:{target.region or 'REGION'}:ACCOUNT:rule/{name}"},
        Name=name,
        EventPattern=json.dumps(INSTANCE_EVENT_PATTERN, sort_keys=True),
        State="ENABLED",
        Description="EC2 instance events start a navarch run (a dead host writes no report)",
    )
    calls(
        events,
        "events",
        "put_targets",
        Rule=name,
        Targets=[{"Id": "navarch-queue", "Arn": queue_arn}],
    )
    return str(rule["RuleArn"])


def _setup_gcs(target: SetupTarget, calls: _Calls, given: dict[str, Any]) -> None:
    w = target.watch
    topic = f"projects/{target.project}/topics/{queue_name(w.fleet)}"
    subscription = f"projects/{target.project}/subscriptions/{queue_name(w.fleet)}"

    def pubsub() -> Any:
        return import_extra("google.cloud.pubsub_v1", "gcp", "events setup for a gs:// store")

    def storage() -> Any:
        return import_extra("google.cloud.storage", "gcp", "events setup for a gs:// store")

    publisher = _client(given, "publisher", calls.dry_run, lambda: pubsub().PublisherClient())
    subscriber = _client(given, "subscriber", calls.dry_run, lambda: pubsub().SubscriberClient())
    gcs = _client(given, "storage", calls.dry_run, lambda: storage().Client(project=target.project))
    _exists_ok(lambda: calls(publisher, "publisher", "create_topic", request={"name": topic}))
    agent = calls(
        gcs,
        "storage",
        "get_service_account_email",
        "service-PROJECT_NUMBER@gs-project-accounts.iam.gserviceaccount.com",
        project=target.project,
    )
    current = calls(publisher, "publisher", "get_iam_policy", None, request={"resource": topic})
    calls(
        publisher,
        "publisher",
        "set_iam_policy",
        request={"resource": topic, "policy": _with_publisher(current, f"serviceAccount:{agent}")},
    )
    _exists_ok(
        lambda: calls(
            subscriber,
            "subscriber",
            "create_subscription",
            request={"name": subscription, "topic": topic, "ack_deadline_seconds": _VISIBILITY_S},
        )
    )
    if calls.dry_run:
        calls(None, "storage", "bucket(...).notification(...).create", **gcs_notification(target))
        return
    notification = gcs.bucket(w.bucket).notification(**gcs_notification(target))
    calls(notification, "storage", "create")


def _with_publisher(policy: Any, member: str) -> dict[str, Any]:
    """The topic's IAM policy (a google.iam.v1 Policy, or None) as a dict with member
    added to roles/pubsub.publisher; its other bindings and its etag (the policy's
    compare-and-swap) kept."""
    doc: dict[str, Any] = {}
    if policy is not None:
        from google.protobuf import json_format

        doc = json_format.MessageToDict(policy, preserving_proto_field_name=True)
    bindings = list(doc.get("bindings", []))
    role = "roles/pubsub.publisher"
    ours = next((b for b in bindings if b.get("role") == role and "condition" not in b), None)
    if ours is None:
        bindings.append({"role": role, "members": [member]})
    elif member not in ours.get("members", []):
        ours["members"] = [*ours.get("members", []), member]
    return {**doc, "bindings": bindings}


def _setup_azure(target: SetupTarget, calls: _Calls, given: dict[str, Any]) -> None:
    w = target.watch

    def queues() -> Any:
        import os

        qmod = import_extra("azure.storage.queue", "azure", "events setup for an az:// store")
        conn = os.environ.get("AZURE_STORAGE_CONNECTION_STRING")
        if conn:
            return qmod.QueueServiceClient.from_connection_string(conn)
        from azure.identity import DefaultAzureCredential

        return qmod.QueueServiceClient(
            f"https://{target.account}.queue.core.windows.net", DefaultAzureCredential()
        )

    def eventgrid() -> Any:
        egmod = import_extra("azure.mgmt.eventgrid", "azure", "events setup for an az:// store")
        from azure.identity import DefaultAzureCredential

        return egmod.EventGridManagementClient(DefaultAzureCredential(), target.subscription_id)

    queue = _client(given, "queue", calls.dry_run, queues)
    grid = _client(given, "eventgrid", calls.dry_run, eventgrid)
    _exists_ok(lambda: calls(queue, "queue", "create_queue", name=queue_name(w.fleet)))
    poller = calls(
        grid,
        "eventgrid",
        "event_subscriptions.begin_create_or_update",
        scope=_azure_account_id(target),
        event_subscription_name=queue_name(w.fleet),
        event_subscription_info=azure_event_subscription(target),
    )
    if poller is not None:
        with _setup_errors("eventgrid.event_subscriptions.begin_create_or_update"):
            poller.result()


def _exists_ok(step: Callable[[], Any]) -> None:
    """Run a create step; one that exists already (AlreadyExists, 409) is kept."""
    try:
        step()
    except StoreError as exc:
        cause = exc.__cause__
        status = getattr(cause, "status_code", None) or getattr(cause, "code", None)
        if type(cause).__name__ in ("AlreadyExists", "Conflict", "ResourceExistsError") or (
            status == 409
        ):
            return
        raise

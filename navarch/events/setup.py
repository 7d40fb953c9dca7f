"""`navarch events setup FLEET`: the queue, the bucket notification and the cloud's instance
events, for the fleet's store.

Per store (the request bodies are built by the pure functions of navarch.events.routes,
which tests check against each SDK's own request models):

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
    logging.get_sink            projects/<p>/sinks/navarch-<fleet>-instances, then
    logging.create_sink         (or update_sink where its filter or destination differ) the
                                project's Compute Engine system events to the topic
                                (google-cloud-logging's ConfigServiceV2Client, over gRPC,
                                its only transport; NotFound on get_sink -> create_sink)
    pubsub.get_iam_policy       the topic's policy, then, unless it holds it already,
    pubsub.set_iam_policy       roles/pubsub.publisher for the sink's writer identity
az://  (Azure Event Grid, "Storage queue as an event handler"; Event Subscriptions REST API)
    queue.create_queue          navarch-<fleet>-events in the store's storage account
    eventgrid.event_subscriptions.begin_create_or_update   on the storage account: BlobCreated
                                whose subject begins with the fleet's health prefix, to the
                                queue, Event Grid schema
    eventgrid.system_topics.list_by_subscription   the subscription's HealthResources
                                system topic if one exists (Event Grid allows one), else
    eventgrid.system_topics.begin_create_or_update  navarch-health-resources, location global
    eventgrid.system_topic_event_subscriptions.begin_create_or_update
                                navarch-<fleet>-instances: Resource Health events of VMs to
                                the queue (Azure Event Grid, "Subscribe to Azure Resource
                                Notifications - Health Resources events")

Every step is idempotent where the cloud allows (a queue or topic that exists is kept, a
sink or an IAM binding that is already as wanted is not written again), so setup can run
again. `--dry-run` prints the calls and makes none. SDK errors are translated at one
boundary (`_setup_errors`) into StoreError naming the step. The instance routes (the EC2
rule, the log sink, the Resource Health subscription) are optional: one that fails (most
often a permission the person lacks) is reported through `warn` with what to grant, and
setup goes on; a dead host then waits for the periodic run, as before.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from navarch.errors import NavarchError, StoreError, map_exceptions
from navarch.events.routes import (
    AZURE_HEALTH_TOPIC_NAME,
    AZURE_HEALTH_TOPIC_TYPE,
    INSTANCE_EVENT_PATTERN,
    LONG_POLL_S,
    RETENTION_S,
    VISIBILITY_S,
    SetupTarget,
    azure_account_id,
    azure_event_subscription,
    azure_health_subscription,
    azure_health_system_topic,
    gce_instance_sink,
    gcs_notification,
    instance_route_name,
    instance_rule_name,
    queue_name,
    queue_url,
    s3_notification_configuration,
    s3_queue_policy,
)
from navarch.extras import import_extra

__all__ = ["ApiCall", "setup_events"]

log = logging.getLogger(__name__)
_T = TypeVar("_T")

#: Top-level packages whose exceptions _setup_errors translates.
_SDK_PACKAGES = frozenset({"botocore", "boto3", "google", "grpc", "azure"})


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
    """Records each call; runs it unless dry_run, else answers with dry_answer. warn: where
    an optional route that failed is told (_optional)."""

    def __init__(
        self, dry_run: bool, say: Callable[[str], None], warn: Callable[[str], None]
    ) -> None:
        self.dry_run = dry_run
        self.say = say
        self.warn = warn
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
    warn: Callable[[str], None] = log.warning,
) -> tuple[str, list[ApiCall]]:
    """Create the fleet's queue, bucket notification and instance route -> (the
    --on-events URL, the calls made, in order). say(line) is told each call as it is made;
    warn(message) each optional instance route that failed, with what to grant (setup
    goes on without it). clients: SDK clients by name ("sqs", "s3", "events", "publisher",
    "subscriber", "storage", "logging", "queue", "eventgrid"), made from the default
    credentials when absent. Raises StoreError (a failed call of the report route: the
    cloud's message), ConfigError (the cloud's extra is not installed)."""
    calls = _Calls(dry_run, say, warn)
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
            "ReceiveMessageWaitTimeSeconds": str(LONG_POLL_S),
            "VisibilityTimeout": str(VISIBILITY_S),
            "MessageRetentionPeriod": str(RETENTION_S),
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
    rule_arn = _optional(
        calls,
        "the EC2 instance events' EventBridge rule",
        "events:PutRule and events:PutTargets (docs/policies/aws-events-setup.json)",
        lambda: _setup_instance_rule(target, calls, given, arn, make("events")),
        "",
    )
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
    _grant_publisher(calls, publisher, topic, f"serviceAccount:{agent}")
    _exists_ok(
        lambda: calls(
            subscriber,
            "subscriber",
            "create_subscription",
            request={"name": subscription, "topic": topic, "ack_deadline_seconds": VISIBILITY_S},
        )
    )
    if calls.dry_run:
        calls(None, "storage", "bucket(...).notification(...).create", **gcs_notification(target))
    else:
        notification = gcs.bucket(w.bucket).notification(**gcs_notification(target))
        calls(notification, "storage", "create")
    _optional(
        calls,
        "the Compute Engine host events' log sink",
        "logging.sinks.get/create/update and pubsub.topics.getIamPolicy/setIamPolicy "
        "(docs/policies/gcp-events-setup-role.yaml)",
        lambda: _setup_gce_instances(target, calls, given, publisher),
        None,
    )


def _grant_publisher(calls: _Calls, publisher: Any, topic: str, member: str) -> None:
    """roles/pubsub.publisher on the topic for member ("serviceAccount:..."): the policy
    read, then written with the binding added, unless it holds it already."""
    current = calls(publisher, "publisher", "get_iam_policy", None, request={"resource": topic})
    policy = _with_publisher(current, member)
    if current is None or policy != _policy_doc(current):
        calls(
            publisher, "publisher", "set_iam_policy", request={"resource": topic, "policy": policy}
        )


def _policy_doc(policy: Any) -> dict[str, Any]:
    """A google.iam.v1 Policy (or None) as its JSON dict."""
    if policy is None:
        return {}
    from google.protobuf import json_format

    doc: dict[str, Any] = json_format.MessageToDict(policy, preserving_proto_field_name=True)
    return doc


def _with_publisher(policy: Any, member: str) -> dict[str, Any]:
    """The topic's IAM policy (a google.iam.v1 Policy, or None) as a dict with member
    added to roles/pubsub.publisher; its other bindings and its etag (the policy's
    compare-and-swap) kept."""
    doc = _policy_doc(policy)
    bindings = [dict(b) for b in doc.get("bindings", [])]
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
        scope=azure_account_id(target),
        event_subscription_name=queue_name(w.fleet),
        event_subscription_info=azure_event_subscription(target),
    )
    _wait(poller, "eventgrid.event_subscriptions.begin_create_or_update")
    _optional(
        calls,
        "the Resource Health events' Event Grid subscription",
        "Microsoft.EventGrid/systemTopics/* and Microsoft.ResourceNotifications/systemTopics/"
        "subscribeToHealthResources/action on the subscription "
        "(docs/policies/azure-events-setup-role.json)",
        lambda: _setup_azure_instances(target, calls, grid),
        None,
    )


def _wait(poller: Any, step: str) -> None:
    """Wait for an Azure long-running operation (None in a dry run)."""
    if poller is not None:
        with _setup_errors(step):
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


def _optional(calls: _Calls, route: str, grant: str, step: Callable[[], _T], fallback: _T) -> _T:
    """Run an optional route's step -> its value; a cloud error (most often a permission
    the person lacks) -> calls.warn(what failed, what to grant) and fallback. An optional
    cloud feature that fails never stops the report route (docs/events.md)."""
    try:
        with _setup_errors(route):
            return step()
    except StoreError as exc:
        calls.warn(
            f"{route} is not set up, so a dead host waits for the periodic run ({exc}). "
            f"To add it, grant {grant} and run setup again."
        )
        return fallback


def _setup_gce_instances(
    target: SetupTarget, calls: _Calls, given: dict[str, Any], publisher: Any
) -> None:
    """The log sink of the project's Compute Engine system events to the fleet's topic
    (created, or updated where its destination or filter differ), then
    roles/pubsub.publisher on the topic for the sink's writer identity unless the topic's
    policy grants it already (Cloud Logging, "Route logs to supported destinations":
    a sink writes as its writer identity, which the destination must allow)."""

    def config() -> Any:
        logging_v2 = import_extra(
            "google.cloud.logging_v2.services.config_service_v2",
            "gcp",
            "events setup for a gs:// store",
        )
        return logging_v2.ConfigServiceV2Client()

    sinks = _client(given, "logging", calls.dry_run, config)
    wanted = gce_instance_sink(target)
    sink_name = f"projects/{target.project}/sinks/{wanted['name']}"
    placeholder = {"writer_identity": "serviceAccount:SINK_WRITER_IDENTITY"}
    found = _absent_ok(lambda: calls(sinks, "logging", "get_sink", None, sink_name=sink_name))
    if found is None:
        found = calls(
            sinks,
            "logging",
            "create_sink",
            placeholder,
            request={
                "parent": f"projects/{target.project}",
                "sink": wanted,
                "unique_writer_identity": True,
            },
        )
    elif any(_sink_doc(found).get(key) != wanted[key] for key in ("destination", "filter")):
        found = calls(
            sinks,
            "logging",
            "update_sink",
            placeholder,
            request={
                "sink_name": sink_name,
                "sink": wanted,
                "update_mask": {"paths": ["destination", "filter", "description"]},
                "unique_writer_identity": True,
            },
        )
    topic = f"projects/{target.project}/topics/{queue_name(target.watch.fleet)}"
    _grant_publisher(calls, publisher, topic, str(_sink_doc(found)["writer_identity"]))


def _sink_doc(sink: Any) -> dict[str, Any]:
    """A LogSink (google-cloud-logging's proto-plus message, or setup's dry-run dict) as a
    dict of its proto field names (destination, filter, writer_identity)."""
    if isinstance(sink, dict):
        return sink
    doc: dict[str, Any] = type(sink).to_dict(sink)
    return doc


def _absent_ok(step: Callable[[], _T]) -> _T | None:
    """Run a get step -> its value; one whose object does not exist (google.api_core's
    NotFound, 404) -> None."""
    try:
        return step()
    except StoreError as exc:
        cause = exc.__cause__
        status = getattr(cause, "code", None)
        if type(cause).__name__ == "NotFound" or status == 404:
            return None
        raise


def _setup_azure_instances(target: SetupTarget, calls: _Calls, grid: Any) -> None:
    """The subscription's HealthResources system topic (the one that exists, else
    navarch-health-resources made in the store's resource group) and the fleet's event
    subscription on it to the storage queue, a PUT of the same body each time, so a second
    setup changes nothing."""
    listed = calls(grid, "eventgrid", "system_topics.list_by_subscription", [])
    source = f"/subscriptions/{target.subscription_id}".lower()
    found = next(
        (
            t
            for t in listed
            if (t.topic_type or "").lower() == AZURE_HEALTH_TOPIC_TYPE.lower()
            and (t.source or "").lower() == source
        ),
        None,
    )
    group, name = target.resource_group, AZURE_HEALTH_TOPIC_NAME
    if found is None:
        poller = calls(
            grid,
            "eventgrid",
            "system_topics.begin_create_or_update",
            None,
            resource_group_name=group,
            system_topic_name=name,
            system_topic_info=azure_health_system_topic(target),
        )
        _wait(poller, "eventgrid.system_topics.begin_create_or_update")
    else:
        group, name = _resource_group(str(found.id)) or group, str(found.name)
    poller = calls(
        grid,
        "eventgrid",
        "system_topic_event_subscriptions.begin_create_or_update",
        None,
        resource_group_name=group,
        system_topic_name=name,
        event_subscription_name=instance_route_name(target.watch.fleet),
        event_subscription_info=azure_health_subscription(target),
    )
    _wait(poller, "eventgrid.system_topic_event_subscriptions.begin_create_or_update")


def _resource_group(resource_id: str) -> str:
    """The resource group an ARM resource id names ("" where it names none)."""
    parts = resource_id.split("/")
    at = next((i for i, p in enumerate(parts) if p.lower() == "resourcegroups"), -1)
    return parts[at + 1] if 0 <= at < len(parts) - 1 else ""

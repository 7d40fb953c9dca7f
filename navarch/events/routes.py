"""What `navarch events setup` asks each cloud for: the scope (SetupTarget) and the request
bodies, built by pure functions that tests check against each SDK's or API's own request
shapes. navarch.events.setup makes the calls.

Per cloud, the report route (the store's notification of a written report) and the
instance route (the cloud's own events of an instance its host lost: a dead host writes no
report):

    AWS    S3 -> SQS;                       EventBridge rule (EC2, AWS Health) -> SQS
    GCP    GCS -> Pub/Sub;                  Cloud Logging sink (system event audit logs) -> Pub/Sub
    Azure  Event Grid (BlobCreated) -> queue;  HealthResources system topic -> queue
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from navarch.errors import ConfigError
from navarch.events.messages import (
    AZURE_HEALTH_EVENT_TYPES,
    GCE_SYSTEM_EVENT_METHODS,
    Watch,
)

__all__ = [
    "AZURE_HEALTH_TOPIC_NAME",
    "AZURE_HEALTH_TOPIC_TYPE",
    "INSTANCE_EVENT_PATTERN",
    "LONG_POLL_S",
    "RETENTION_S",
    "VISIBILITY_S",
    "SetupTarget",
    "azure_account_id",
    "azure_event_subscription",
    "azure_health_subscription",
    "azure_health_system_topic",
    "gce_instance_sink",
    "gcs_notification",
    "instance_route_name",
    "instance_rule_name",
    "queue_name",
    "queue_url",
    "s3_notification_configuration",
    "s3_queue_policy",
]

#: Seconds: how long a received message stays hidden (navarch.events.queues.VISIBILITY_S),
#: the longest SQS long poll, and how long an undelivered message is kept (one day: after
#: that the periodic run has long covered it).
VISIBILITY_S = 600
LONG_POLL_S = 20
RETENTION_S = 86_400
BLOB_CREATED = "Microsoft.Storage.BlobCreated"


def queue_name(fleet: str) -> str:
    """The queue, topic and subscription name: "navarch-<fleet>-events"."""
    return f"navarch-{fleet}-events"


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
                    "resourceId": azure_account_id(target),
                    "queueName": queue_name(w.fleet),
                    "queueMessageTimeToLiveInSeconds": RETENTION_S,
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


def azure_account_id(target: SetupTarget) -> str:
    """The ARM resource id of the fleet's storage account ("/subscriptions/S/resourceGroups/
    G/providers/Microsoft.Storage/storageAccounts/A"): an Event Grid subscription's scope
    and a queue destination's resourceId (Azure Event Grid, "Storage queue as a handler")."""
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


# -- the instance routes of GCP and Azure (pure) ------------------------------------------

#: The Event Grid system topic type of Azure Resource Health events (Azure Event Grid,
#: event-schema-health-resources.md).
AZURE_HEALTH_TOPIC_TYPE = "Microsoft.ResourceNotifications.HealthResources"
#: The resource type of navarch's Azure instances (single VMs, navarch.providers.azure).
_AZURE_VM_TYPE = "Microsoft.Compute/virtualMachines"
#: One HealthResources system topic per subscription serves every fleet: Event Grid allows
#: one system topic per source, and this one's source is the whole subscription.
AZURE_HEALTH_TOPIC_NAME = "navarch-health-resources"


def gce_instance_sink(target: SetupTarget) -> dict[str, Any]:
    """The Cloud Logging sink of the fleet's instance events (a LogSink, REST v2: name,
    destination, filter, description): the project's Compute Engine system event audit
    logs of a gce_instance whose methodName is one of GCE_SYSTEM_EVENT_METHODS, to the
    fleet's Pub/Sub topic. System event logs carry no instance labels, so the filter takes
    every instance of the project; the run that follows lists only navarch's. Sources:
    Cloud Logging "Route logs to supported destinations" (destination
    pubsub.googleapis.com/projects/P/topics/T) and "Logging query language"; Compute Engine
    "Troubleshooting VM shutdowns and reboots" (the system_event log and its methods)."""
    fleet = target.watch.fleet
    methods = " OR ".join(f'"{m}"' for m in GCE_SYSTEM_EVENT_METHODS)
    return {
        "name": instance_route_name(fleet),
        "destination": (
            f"pubsub.googleapis.com/projects/{target.project}/topics/{queue_name(fleet)}"
        ),
        "filter": (
            f'logName="projects/{target.project}/logs/cloudaudit.googleapis.com%2Fsystem_event"'
            f' AND resource.type="gce_instance" AND protoPayload.methodName=({methods})'
        ),
        "description": "Compute Engine host events start a navarch run (a dead host writes no report)",
    }


def azure_health_system_topic(target: SetupTarget) -> dict[str, Any]:
    """The Event Grid system topic of Resource Health on the fleet's subscription (REST
    body, System Topics - Create Or Update, api-version 2022-06-15): source the
    subscription, type Microsoft.ResourceNotifications.HealthResources, location global
    (Azure Event Grid, "Subscribe to Azure Resource Notifications - Health Resources
    events")."""
    return {
        "location": "global",
        "properties": {
            "source": f"/subscriptions/{target.subscription_id}",
            "topicType": AZURE_HEALTH_TOPIC_TYPE,
        },
    }


def azure_health_subscription(target: SetupTarget) -> dict[str, Any]:
    """The event subscription on that system topic (REST body, System Topic Event
    Subscriptions - Create Or Update): AvailabilityStatusChanged and ResourceAnnotated of
    a single VM (advanced filter StringIn on data.resourceInfo.properties.targetResourceType;
    the documented example's StringContains would take scale sets too, Event Grid's string
    filters being case-insensitive) to the fleet's storage queue, Event Grid schema."""
    body = azure_event_subscription(target)
    body["properties"]["filter"] = {
        "includedEventTypes": list(AZURE_HEALTH_EVENT_TYPES),
        "advancedFilters": [
            {
                "operatorType": "StringIn",
                "key": "data.resourceInfo.properties.targetResourceType",
                "values": [_AZURE_VM_TYPE],
            }
        ],
    }
    return body


def instance_route_name(fleet: str) -> str:
    """The GCE log sink and the Azure event subscription of the fleet's instance events:
    "navarch-<fleet>-instances" (the EventBridge rule's name too)."""
    return instance_rule_name(fleet)

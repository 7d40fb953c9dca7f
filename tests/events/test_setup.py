"""`navarch events setup`: the queue and the bucket notification, per store. AWS runs against
the moto server (moto then delivers S3's events: the setup works); GCS and Azure are
checked against the SDKs' own request shapes (Pub/Sub's proto types, google-cloud-storage's
notification request, azure-mgmt-eventgrid's EventSubscription model)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from azure.mgmt.eventgrid.models import EventSubscription
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage
from google.cloud.pubsub_v1 import types as pubsub_types
from google.iam.v1 import iam_policy_pb2
from google.protobuf import json_format

from navarch.events.routes import SetupTarget
from navarch.events.setup import setup_events
from tests.support.cli import run_navarch

SUBSCRIPTION = "00000000-0000-0000-0000-000000000001"


def test_s3_setup_makes_a_queue_only_this_bucket_may_send_to_and_keeps_other_notifications(
    moto,
) -> None:
    s3, sqs = boto3.client("s3"), boto3.client("sqs")
    s3.create_bucket(Bucket="my-navarch-state")
    other = sqs.create_queue(QueueName="someone-elses")["QueueUrl"]
    other_arn = sqs.get_queue_attributes(QueueUrl=other, AttributeNames=["QueueArn"])
    theirs = {
        "Id": "theirs",
        "QueueArn": other_arn["Attributes"]["QueueArn"],
        "Events": ["s3:ObjectRemoved:*"],
    }
    s3.put_bucket_notification_configuration(
        Bucket="my-navarch-state", NotificationConfiguration={"QueueConfigurations": [theirs]}
    )
    target = SetupTarget.of_fleet(
        "s3://my-navarch-state/research", "research", {"aws": {"type": "aws"}}
    )
    lines: list[str] = []
    url, calls = setup_events(target, say=lines.append)
    assert [c.operation for c in calls] == [
        "create_queue",
        "get_queue_attributes",
        "put_rule",
        "put_targets",
        "set_queue_attributes",
        "get_bucket_notification_configuration",
        "put_bucket_notification_configuration",
    ]
    assert len(lines) == 7 and url.endswith("/navarch-research-events")
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    statement = json.loads(attrs["Policy"])["Statement"][0]
    assert statement["Principal"] == {"Service": "s3.amazonaws.com"}
    assert statement["Action"] == "sqs:SendMessage"
    assert statement["Resource"] == attrs["QueueArn"]
    assert statement["Condition"]["ArnLike"] == {"aws:SourceArn": "arn:aws:s3:::my-navarch-state"}
    assert attrs["ReceiveMessageWaitTimeSeconds"] == "20"
    rule = json.loads(attrs["Policy"])["Statement"][1]
    assert rule["Principal"] == {"Service": "events.amazonaws.com"}
    assert rule["Condition"]["ArnEquals"]["aws:SourceArn"].endswith(
        ":rule/navarch-research-instances"
    )
    events = boto3.client("events")
    pattern = json.loads(events.describe_rule(Name="navarch-research-instances")["EventPattern"])
    assert "EC2 Instance State-change Notification" in pattern["detail-type"]
    targets = events.list_targets_by_rule(Rule="navarch-research-instances")["Targets"]
    assert [t["Arn"] for t in targets] == [attrs["QueueArn"]]
    config = s3.get_bucket_notification_configuration(Bucket="my-navarch-state")
    by_id = {q["Id"]: q for q in config["QueueConfigurations"]}
    assert by_id["theirs"]["Events"] == ["s3:ObjectRemoved:*"]
    ours = by_id["navarch-research-health"]
    assert ours["Events"] == ["s3:ObjectCreated:*"]
    assert ours["Filter"]["Key"]["FilterRules"] == [
        {"Name": "prefix", "Value": "research/health/research/"}
    ]
    # Again: the same queue and still one entry of ours.
    setup_events(target, say=lambda _: None)
    config = s3.get_bucket_notification_configuration(Bucket="my-navarch-state")
    assert sorted(q["Id"] for q in config["QueueConfigurations"]) == [
        "navarch-research-health",
        "theirs",
    ]


def test_dry_run_prints_the_calls_and_makes_none(moto, tmp_path: Path) -> None:
    boto3.client("s3").create_bucket(Bucket="my-navarch-state")
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "fleet: research\nstore: s3://my-navarch-state/research\n"
        "secret: {env: NAVARCH_FLEET_SECRET}\n"
        "providers:\n  ec2: {type: aws, region: us-east-1}\npools: {}\n"
    )
    run = run_navarch(["events", "setup", str(fleet), "--dry-run"], cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "sqs.create_queue(QueueName='navarch-research-events'" in run.stdout
    assert "s3.put_bucket_notification_configuration(Bucket='my-navarch-state'" in run.stdout
    assert '"Value": "research/health/research/"' in run.stdout
    assert boto3.client("sqs").list_queues().get("QueueUrls", []) == []
    assert "QueueConfigurations" not in boto3.client("s3").get_bucket_notification_configuration(
        Bucket="my-navarch-state"
    )


class Recorder:
    """A stand-in SDK client: each call's keyword arguments, checked by `check`."""

    def __init__(self, answers: dict[str, Any] | None = None) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.answers = answers or {}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)

        def call(**kwargs: Any) -> Any:
            self.calls.append((name, kwargs))
            return self.answers.get(name)

        return call


def test_gcs_setup_requests_have_the_sdks_shapes() -> None:
    target = SetupTarget.of_fleet(
        "gs://my-navarch-state/research", "research", {"gce": {"type": "gcp", "project": "my-proj"}}
    )
    from google.iam.v1 import policy_pb2

    theirs = policy_pb2.Policy(
        etag=b"v7",
        bindings=[policy_pb2.Binding(role="roles/pubsub.viewer", members=["user:a@b.c"])],
    )
    publisher, subscriber = Recorder({"get_iam_policy": theirs}), Recorder()
    from google.cloud.logging_v2.types import LogSink

    sinks = Recorder({"create_sink": LogSink(writer_identity="serviceAccount:w@example.com")})
    agent = "service-123@gs-project-accounts.iam.gserviceaccount.com"
    client = storage.Client(project="my-proj", credentials=AnonymousCredentials())
    posted: list[tuple[str, dict[str, Any]]] = []

    def post(path: str, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        posted.append((path, data))
        return {"id": "1", **data}

    client._post_resource = post  # the JSON API request the SDK would send
    client.get_service_account_email = lambda project: agent
    url, calls = setup_events(
        target,
        say=lambda _: None,
        clients={
            "publisher": publisher,
            "subscriber": subscriber,
            "storage": client,
            "logging": sinks,
        },
    )
    assert url == "pubsub://projects/my-proj/subscriptions/navarch-research-events"
    topic = "projects/my-proj/topics/navarch-research-events"
    (name, kw), (_, get_kw), (iam, iam_kw) = publisher.calls[:3]  # then the log sink's writer
    assert iam_policy_pb2.GetIamPolicyRequest(**get_kw["request"]).resource == topic
    assert name == "create_topic" and pubsub_types.Topic(**kw["request"]).name == topic
    request = json_format.ParseDict(iam_kw["request"], iam_policy_pb2.SetIamPolicyRequest())
    assert iam == "set_iam_policy" and request.resource == topic
    assert [(b.role, list(b.members)) for b in request.policy.bindings] == [
        ("roles/pubsub.viewer", ["user:a@b.c"]),  # kept
        ("roles/pubsub.publisher", [f"serviceAccount:{agent}"]),
    ]
    assert request.policy.etag == b"v7"  # the read's version: a concurrent change fails
    ((sub, sub_kw),) = subscriber.calls
    made = pubsub_types.Subscription(**sub_kw["request"])
    assert sub == "create_subscription" and made.topic == topic
    assert made.ack_deadline_seconds == 600
    assert posted == [
        (
            "/b/my-navarch-state/notificationConfigs",
            {
                "topic": f"//pubsub.googleapis.com/{topic}",
                "event_types": ["OBJECT_FINALIZE"],
                "object_name_prefix": "research/health/research/",
                "payload_format": "JSON_API_V1",
            },
        )
    ]
    assert "create" in [c.operation for c in calls]


def test_azure_setup_requests_have_the_sdks_shapes() -> None:
    target = SetupTarget.of_fleet(
        "az://mystore/navarch/research",
        "research",
        {"az": {"type": "azure", "subscription_id": SUBSCRIPTION, "resource_group": "rg-gpu"}},
    )
    queue, grid, subscriptions = Recorder(), Recorder(), Recorder()
    grid.event_subscriptions = subscriptions
    grid.system_topics = Recorder({"list_by_subscription": []})  # then Resource Health's
    grid.system_topic_event_subscriptions = Recorder()
    url, _ = setup_events(target, say=lambda _: None, clients={"queue": queue, "eventgrid": grid})
    assert url == "azure-queue://mystore/navarch-research-events"
    assert queue.calls == [("create_queue", {"name": "navarch-research-events"})]
    ((op, kw),) = subscriptions.calls
    assert op == "begin_create_or_update"
    account = (
        f"/subscriptions/{SUBSCRIPTION}/resourceGroups/rg-gpu/providers/"
        "Microsoft.Storage/storageAccounts/mystore"
    )
    assert kw["scope"] == account
    body = kw["event_subscription_info"]
    model = EventSubscription.deserialize(body)
    assert model.serialize() == body  # every key is one the SDK's model knows
    assert model.destination.resource_id == account
    assert model.destination.queue_name == "navarch-research-events"
    assert model.filter.included_event_types == ["Microsoft.Storage.BlobCreated"]
    assert model.filter.subject_begins_with == (
        "/blobServices/default/containers/navarch/blobs/research/health/research/"
    )


def test_setup_without_the_clouds_scope_names_the_flag() -> None:
    from navarch.errors import ConfigError

    with pytest.raises(ConfigError, match="--project"):
        SetupTarget.of_fleet("gs://b/p", "research", {})
    with pytest.raises(ConfigError, match="file://"):
        SetupTarget.of_fleet("file://.navarch/store", "research", {})

"""`navarch events setup` makes the clouds' instance routes: a dead host writes no report, so
its cloud's own event must reach the fleet's queue. GCE: a Cloud Logging sink of the system
event audit logs to the fleet's Pub/Sub topic, its writer identity allowed to publish;
Azure: the subscription's Resource Health system topic and an event subscription to the
fleet's storage queue. Checked against stand-ins that keep state (so a second setup can be
seen to change nothing) and against the SDKs' own models (Pub/Sub's IAM protos,
azure-mgmt-eventgrid's SystemTopic and EventSubscription); the log sink through
google-cloud-logging's real ConfigServiceV2Client against a local gRPC fake of the sinks
(tests/support/fake_logging.py: the library has no REST transport to point at an HTTP fake)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest
from azure.core.exceptions import HttpResponseError
from azure.mgmt.eventgrid.models import EventSubscription, SystemTopic
from google.iam.v1 import iam_policy_pb2, policy_pb2
from google.protobuf import json_format

from navarch.events.messages import Watch, parse_event_grid_message, parse_pubsub_message
from navarch.events.routes import SetupTarget
from navarch.events.setup import setup_events
from tests.support.fake_logging import WRITER, FakeLogging

SUBSCRIPTION = "00000000-0000-0000-0000-000000000001"
SAMPLES = Path(__file__).parent / "samples"
TOPIC = "projects/my-project/topics/navarch-research-events"
SINK = "projects/my-project/sinks/navarch-research-instances"


def sample(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((SAMPLES / name).read_text())
    return doc


# -- GCP stand-ins -------------------------------------------------------------------------


class Publisher:
    """Pub/Sub's PublisherClient for topics and their IAM policies: each call recorded,
    each request parsed into its proto (so a wrong key fails), the policy's etag moved on
    every write."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.policies: dict[str, policy_pb2.Policy] = {}

    def create_topic(self, request: dict[str, Any]) -> None:
        self.calls.append("create_topic")

    def get_iam_policy(self, request: dict[str, Any]) -> policy_pb2.Policy:
        self.calls.append("get_iam_policy")
        resource = iam_policy_pb2.GetIamPolicyRequest(**request).resource
        return self.policies.get(resource, policy_pb2.Policy(etag=b"v0"))

    def set_iam_policy(self, request: dict[str, Any]) -> None:
        self.calls.append("set_iam_policy")
        parsed = json_format.ParseDict(request, iam_policy_pb2.SetIamPolicyRequest())
        policy = parsed.policy
        policy.etag = str(len(self.calls)).encode()
        self.policies[parsed.resource] = policy

    def publishers(self, topic: str) -> list[str]:
        role = "roles/pubsub.publisher"
        bindings = self.policies.get(topic, policy_pb2.Policy()).bindings
        return [m for b in bindings if b.role == role for m in b.members]


class Anything:
    """A client whose every call answers None (the subscriber, the bucket)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kwargs: self


def gcp_clients(sinks: Any, publisher: Publisher) -> dict[str, Any]:
    storage = Anything()
    storage.get_service_account_email = lambda project: "service-9@gs-project-accounts.iam"  # type: ignore[attr-defined]
    return {
        "publisher": publisher,
        "subscriber": Anything(),
        "storage": storage,
        "logging": sinks,
    }


def gcp_target() -> SetupTarget:
    return SetupTarget.of_fleet(
        "gs://my-navarch-state/research",
        "research",
        {"gce": {"type": "gcp", "project": "my-project"}},
    )


def test_gcs_setup_routes_the_projects_host_events_to_the_fleets_topic_through_a_log_sink(
    fake_logging: FakeLogging, sinks_client: Any
) -> None:
    publisher = Publisher()
    warnings: list[str] = []
    setup_events(
        gcp_target(),
        say=lambda _: None,
        clients=gcp_clients(sinks_client, publisher),
        warn=warnings.append,
    )
    assert warnings == []
    (get, post) = fake_logging.requests
    assert get == ("GetSink", {"sink_name": SINK})
    rpc, request = post
    assert (rpc, request["parent"], request["unique_writer_identity"]) == (
        "CreateSink",
        "projects/my-project",
        True,
    )
    sink = request["sink"]
    assert sink["name"] == "navarch-research-instances"
    assert sink["destination"] == f"pubsub.googleapis.com/{TOPIC}"
    entry = sample("gce_host_error.json")["data"]
    # The sink's filter takes the documented log entry of a host error ...
    assert f'logName="{entry["logName"]}"' in sink["filter"]
    assert f'resource.type="{entry["resource"]["type"]}"' in sink["filter"]
    for method_name in (
        "compute.instances.hostError",
        "compute.instances.preempted",
        "compute.instances.automaticRestart",
        "compute.instances.terminateOnHostMaintenance",
    ):
        assert f'"{method_name}"' in sink["filter"]
    # ... which the fleet's queue then reads as an instance event.
    watch = Watch.of_store("gs://my-navarch-state/research", "research")
    assert parse_pubsub_message({}, json.dumps(entry).encode(), watch).instances
    # The sink writes as its writer identity, which the topic now lets publish, beside the
    # Cloud Storage agent of the report route.
    assert publisher.publishers(TOPIC) == [
        "serviceAccount:service-9@gs-project-accounts.iam",
        WRITER,
    ]


def test_gcs_setup_a_second_time_changes_neither_the_sink_nor_the_topics_policy(
    fake_logging: FakeLogging, sinks_client: Any
) -> None:
    publisher = Publisher()
    clients = gcp_clients(sinks_client, publisher)
    setup_events(gcp_target(), say=lambda _: None, clients=clients)
    made = {name: type(s).to_dict(s) for name, s in fake_logging.sinks.items()}
    policy = publisher.policies[TOPIC].SerializeToString()
    fake_logging.requests.clear()
    publisher.calls.clear()
    setup_events(gcp_target(), say=lambda _: None, clients=clients)
    assert [rpc for rpc, _ in fake_logging.requests] == ["GetSink"]
    assert "set_iam_policy" not in publisher.calls
    assert {name: type(s).to_dict(s) for name, s in fake_logging.sinks.items()} == made
    assert publisher.policies[TOPIC].SerializeToString() == policy


def test_gcs_setup_mends_a_sink_whose_filter_was_changed(
    fake_logging: FakeLogging, sinks_client: Any
) -> None:
    publisher = Publisher()
    clients = gcp_clients(sinks_client, publisher)
    setup_events(gcp_target(), say=lambda _: None, clients=clients)
    wanted = fake_logging.sinks[SINK].filter
    fake_logging.sinks[SINK].filter = 'resource.type="gce_instance"'
    fake_logging.requests.clear()
    setup_events(gcp_target(), say=lambda _: None, clients=clients)
    rpc, request = fake_logging.requests[-1]
    assert (rpc, request["sink_name"], request["unique_writer_identity"]) == (
        "UpdateSink",
        SINK,
        True,
    )
    assert request["update_mask"].split(",")[:2] == ["destination", "filter"]  # a FieldMask
    assert fake_logging.sinks[SINK].filter == wanted == request["sink"]["filter"]


def test_gcs_setup_without_logging_permission_warns_and_keeps_the_report_route(
    fake_logging: FakeLogging, sinks_client: Any
) -> None:
    fake_logging.denied = True
    publisher = Publisher()
    warnings: list[str] = []
    url, calls = setup_events(
        gcp_target(),
        say=lambda _: None,
        clients=gcp_clients(sinks_client, publisher),
        warn=warnings.append,
    )
    assert url == "pubsub://projects/my-project/subscriptions/navarch-research-events"
    assert "create_subscription" in [c.operation for c in calls]
    (warning,) = warnings
    assert "log sink" in warning and "PermissionDenied: 403" in warning
    assert "logging.sinks.get/create/update" in warning and "gcp-events-setup-role" in warning
    assert publisher.publishers(TOPIC) == ["serviceAccount:service-9@gs-project-accounts.iam"]


# -- Azure stand-ins -----------------------------------------------------------------------


class Poller:
    def result(self) -> None:
        return None


class Operations:
    """One operations group of EventGridManagementClient: begin_create_or_update recorded
    with its keyword arguments; raises `error` when set."""

    def __init__(self, listed: list[SystemTopic] | None = None) -> None:
        self.listed = listed or []
        self.made: list[dict[str, Any]] = []
        self.error: Exception | None = None

    def list_by_subscription(self) -> list[SystemTopic]:
        if self.error is not None:
            raise self.error
        return list(self.listed)

    def begin_create_or_update(self, **kwargs: Any) -> Poller:
        if self.error is not None:
            raise self.error
        self.made.append(kwargs)
        return Poller()


class Grid:
    def __init__(self, listed: list[SystemTopic] | None = None) -> None:
        self.event_subscriptions = Operations()
        self.system_topics = Operations(listed)
        self.system_topic_event_subscriptions = Operations()


class Queues:
    def create_queue(self, name: str) -> None:
        return None


def azure_target() -> SetupTarget:
    return SetupTarget.of_fleet(
        "az://mystore/navarch/research",
        "research",
        {"az": {"type": "azure", "subscription_id": SUBSCRIPTION, "resource_group": "rg-gpu"}},
    )


def test_azure_setup_subscribes_the_fleets_queue_to_the_resource_health_of_vms() -> None:
    grid = Grid()
    setup_events(azure_target(), say=lambda _: None, clients={"queue": Queues(), "eventgrid": grid})
    (topic,) = grid.system_topics.made
    assert topic["resource_group_name"] == "rg-gpu"
    body = topic["system_topic_info"]
    model = SystemTopic.deserialize(body)
    assert model.serialize() == body  # every key is one the SDK's model knows
    assert model.topic_type == "Microsoft.ResourceNotifications.HealthResources"
    assert model.source == f"/subscriptions/{SUBSCRIPTION}"
    assert model.location == "global"
    (sub,) = grid.system_topic_event_subscriptions.made
    assert sub["system_topic_name"] == topic["system_topic_name"]
    assert sub["event_subscription_name"] == "navarch-research-instances"
    body = sub["event_subscription_info"]
    subscription = EventSubscription.deserialize(body)
    assert subscription.serialize() == body
    assert subscription.destination.queue_name == "navarch-research-events"
    assert subscription.destination.resource_id.endswith("/storageAccounts/mystore")
    assert subscription.filter.included_event_types == [
        "Microsoft.ResourceNotifications.HealthResources.AvailabilityStatusChanged",
        "Microsoft.ResourceNotifications.HealthResources.ResourceAnnotated",
    ]
    (only_vms,) = subscription.filter.advanced_filters
    assert only_vms.operator_type == "StringIn"
    event = sample("azure_health_availability.json")["body"]
    props = event["data"]["resourceInfo"]["properties"]
    assert only_vms.key == "data.resourceInfo.properties.targetResourceType"
    assert only_vms.values == [props["targetResourceType"]]  # the documented event passes
    watch = Watch.of_store("az://mystore/navarch/research", "research")
    assert parse_event_grid_message(json.dumps(event), watch).instances


def test_azure_setup_uses_the_subscriptions_health_topic_and_a_second_run_changes_nothing() -> None:
    theirs = SystemTopic.deserialize(
        {
            "id": f"/subscriptions/{SUBSCRIPTION}/resourceGroups/ops/providers/"
            "Microsoft.EventGrid/systemTopics/health",
            "name": "health",
            "location": "global",
            "properties": {
                "source": f"/subscriptions/{SUBSCRIPTION.upper()}",
                "topicType": "microsoft.resourcenotifications.healthresources",
            },
        }
    )
    grid = Grid([theirs])
    clients = {"queue": Queues(), "eventgrid": grid}
    setup_events(azure_target(), say=lambda _: None, clients=clients)
    setup_events(azure_target(), say=lambda _: None, clients=clients)
    assert grid.system_topics.made == []  # Event Grid allows one per source: theirs is used
    first, second = grid.system_topic_event_subscriptions.made
    assert (first["resource_group_name"], first["system_topic_name"]) == ("ops", "health")
    assert first == second  # the same PUT: nothing changes


def test_azure_setup_without_health_permission_warns_and_keeps_the_blob_route() -> None:
    grid = Grid()
    grid.system_topics.error = HttpResponseError(
        message="(AuthorizationFailed) The client does not have authorization to perform "
        "action 'Microsoft.EventGrid/systemTopics/read'"
    )
    warnings: list[str] = []
    url, _ = setup_events(
        azure_target(),
        say=lambda _: None,
        clients={"queue": Queues(), "eventgrid": grid},
        warn=warnings.append,
    )
    assert url == "azure-queue://mystore/navarch-research-events"
    assert len(grid.event_subscriptions.made) == 1  # the blob route
    (warning,) = warnings
    assert "Resource Health" in warning and "AuthorizationFailed" in warning
    assert "subscribeToHealthResources/action" in warning
    assert grid.system_topic_event_subscriptions.made == []


def test_dry_run_prints_the_instance_routes_calls_and_makes_none() -> None:
    lines: list[str] = []
    setup_events(gcp_target(), dry_run=True, say=lines.append)
    setup_events(azure_target(), dry_run=True, say=lines.append)
    text = "\n".join(lines)
    assert f"logging.get_sink(sink_name='{SINK}')" in text
    assert 'logging.create_sink(request={"parent": "projects/my-project"' in text
    assert "cloudaudit.googleapis.com%2Fsystem_event" in text
    assert "SINK_WRITER_IDENTITY" in text  # granted publisher once the sink names it
    assert "eventgrid.system_topics.begin_create_or_update(" in text
    assert "Microsoft.ResourceNotifications.HealthResources" in text
    assert "system_topic_event_subscriptions.begin_create_or_update(" in text


def test_s3_setup_without_eventbridge_permission_warns_and_keeps_the_report_route() -> None:
    class Sqs:
        def create_queue(self, **_: Any) -> dict[str, Any]:
            return {"QueueUrl": "https://sqs.us-east-1.amazonaws.com/1/navarch-research-events"}

        def get_queue_attributes(self, **_: Any) -> dict[str, Any]:
            arn = "arn:aws:sqs:us-east-1:111122223333:navarch-research-events"
            return {"Attributes": {"QueueArn": arn}}

        def set_queue_attributes(self, **kwargs: Any) -> None:
            self.policy = json.loads(kwargs["Attributes"]["Policy"])

    class Events:
        def put_rule(self, **_: Any) -> None:
            error = {"Error": {"Code": "AccessDeniedException", "Message": "not authorized"}}
            raise botocore.exceptions.ClientError(error, "PutRule")

    class S3:
        def get_bucket_notification_configuration(self, **_: Any) -> dict[str, Any]:
            return {}

        def put_bucket_notification_configuration(self, **kwargs: Any) -> None:
            self.config = kwargs["NotificationConfiguration"]

    sqs, s3 = Sqs(), S3()
    warnings: list[str] = []
    target = SetupTarget.of_fleet(
        "s3://my-navarch-state/research", "research", {"aws": {"type": "aws"}}
    )
    setup_events(
        target,
        say=lambda _: None,
        clients={"sqs": sqs, "s3": s3, "events": Events()},
        warn=warnings.append,
    )
    (warning,) = warnings
    assert "EventBridge rule" in warning and "AccessDeniedException" in warning
    assert "events:PutRule" in warning
    principals = [s["Principal"]["Service"] for s in sqs.policy["Statement"]]
    assert principals == ["s3.amazonaws.com"]  # no grant for a rule that was not made
    assert s3.config["QueueConfigurations"][0]["Id"] == "navarch-research-health"


def test_gcs_setup_stops_on_a_logging_error_other_than_not_found_on_the_sink(
    fake_logging: FakeLogging, sinks_client: Any
) -> None:
    """Only NOT_FOUND on get_sink means "create it": any other error (here
    INVALID_ARGUMENT) is not taken for a missing sink, and the route warns instead of creating."""
    import grpc

    fake_logging.failure = (grpc.StatusCode.INVALID_ARGUMENT, "boom")
    warnings: list[str] = []
    setup_events(
        gcp_target(),
        say=lambda _: None,
        clients=gcp_clients(sinks_client, Publisher()),
        warn=warnings.append,
    )
    (warning,) = warnings
    assert "InvalidArgument: 400 boom" in warning
    assert [rpc for rpc, _ in fake_logging.requests] == ["GetSink"]  # no CreateSink after it


#: The permission each setup call needs, from the services' IAM permission references
#: (Pub/Sub, Cloud Storage, Cloud Logging "Access control with IAM"; Azure resource provider
#: operations of Microsoft.Storage, Microsoft.EventGrid, and Microsoft.ResourceNotifications
#: from event-schema-health-resources.md). A call missing here fails the test below.
PERMISSIONS = {
    ("publisher", "create_topic"): ["pubsub.topics.create"],
    ("publisher", "get_iam_policy"): ["pubsub.topics.getIamPolicy"],
    ("publisher", "set_iam_policy"): ["pubsub.topics.setIamPolicy"],
    ("subscriber", "create_subscription"): [
        "pubsub.subscriptions.create",
        "pubsub.topics.attachSubscription",
    ],
    ("storage", "get_service_account_email"): ["resourcemanager.projects.get"],
    ("storage", "create"): ["storage.buckets.update"],
    ("logging", "get_sink"): ["logging.sinks.get"],
    ("logging", "create_sink"): ["logging.sinks.create"],
    ("logging", "update_sink"): ["logging.sinks.update"],
    ("queue", "create_queue"): ["Microsoft.Storage/storageAccounts/queueServices/queues/write"],
    ("eventgrid", "event_subscriptions.begin_create_or_update"): [
        "Microsoft.EventGrid/eventSubscriptions/write"
    ],
    ("eventgrid", "system_topics.list_by_subscription"): ["Microsoft.EventGrid/systemTopics/read"],
    ("eventgrid", "system_topics.begin_create_or_update"): [
        "Microsoft.EventGrid/systemTopics/write"
    ],
    ("eventgrid", "system_topic_event_subscriptions.begin_create_or_update"): [
        "Microsoft.EventGrid/systemTopics/eventSubscriptions/write",
        "Microsoft.ResourceNotifications/systemTopics/subscribeToHealthResources/action",
    ],
}


def test_the_gcp_and_azure_setup_roles_allow_every_call_setup_makes(
    fake_logging: FakeLogging, sinks_client: Any
) -> None:
    import yaml

    policies = Path(__file__).parents[2] / "docs" / "policies"
    gcp_role = yaml.safe_load((policies / "gcp-events-setup-role.yaml").read_text())
    azure_role = json.loads((policies / "azure-events-setup-role.json").read_text())
    allowed = set(gcp_role["includedPermissions"]) | set(azure_role["Actions"])
    clients = gcp_clients(sinks_client, Publisher())
    _, made = setup_events(gcp_target(), say=lambda _: None, clients=clients)
    fake_logging.sinks[SINK].filter = ""  # so the second run mends the sink
    _, again = setup_events(gcp_target(), say=lambda _: None, clients=clients)
    grid = Grid()
    _, azure = setup_events(
        azure_target(), say=lambda _: None, clients={"queue": Queues(), "eventgrid": grid}
    )
    operations = {(c.client, c.operation) for c in [*made, *again, *azure]}
    assert ("logging", "update_sink") in operations
    assert ("eventgrid", "system_topics.begin_create_or_update") in operations
    assert operations <= PERMISSIONS.keys()
    needed = {p for op in operations for p in PERMISSIONS[op]}
    assert needed - allowed == set()


def test_setup_command_prints_the_routes_warning_and_still_succeeds(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fake_logging: FakeLogging, sinks_client: Any
) -> None:
    from navarch.events import setup as module
    from tests.support.cli import run_navarch

    real = module.setup_events
    fake_logging.denied = True
    denied = gcp_clients(sinks_client, Publisher())
    monkeypatch.setattr(
        module, "setup_events", lambda target, **kw: real(target, clients=denied, **kw)
    )
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "fleet: research\nstore: gs://my-navarch-state/research\n"
        "secret: {env: NAVARCH_FLEET_SECRET}\n"
        "providers:\n  gce: {type: gcp, project: my-project}\npools: {}\n"
    )
    run = run_navarch(["events", "setup", str(fleet)], cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "  warning: the Compute Engine host events' log sink is not set up" in run.stdout
    assert "1 optional route(s) not set up" in run.stdout
    assert "--on-events pubsub://projects/my-project/subscriptions/navarch-research-events" in (
        run.stdout
    )

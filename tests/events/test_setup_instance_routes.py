"""`navarch events setup` makes the clouds' instance routes: a dead host writes no report, so
its cloud's own event must reach the fleet's queue. GCE: a Cloud Logging sink of the system
event audit logs to the fleet's Pub/Sub topic, its writer identity allowed to publish;
Azure: the subscription's Resource Health system topic and an event subscription to the
fleet's storage queue. Checked against stand-ins that keep state (so a second setup can be
seen to change nothing) and against the SDKs' own models (Pub/Sub's IAM protos,
azure-mgmt-eventgrid's SystemTopic and EventSubscription); the Logging API, whose client
library navarch does not use, against its REST requests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest
import requests
from azure.core.exceptions import HttpResponseError
from azure.mgmt.eventgrid.models import EventSubscription, SystemTopic
from google.iam.v1 import iam_policy_pb2, policy_pb2
from google.protobuf import json_format

from navarch.events.gcp_logging import LOGGING_API, LogSinks
from navarch.events.messages import Watch, parse_event_grid_message, parse_pubsub_message
from navarch.events.setup import SetupTarget, setup_events

SUBSCRIPTION = "00000000-0000-0000-0000-000000000001"
SAMPLES = Path(__file__).parent / "samples"
WRITER = "serviceAccount:service-123@gcp-sa-logging.iam.gserviceaccount.com"
TOPIC = "projects/my-project/topics/navarch-research-events"
SINK = "projects/my-project/sinks/navarch-research-instances"


def sample(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((SAMPLES / name).read_text())
    return doc


# -- GCP stand-ins -------------------------------------------------------------------------


def _answer(method: str, url: str, status: int, body: dict[str, Any]) -> requests.Response:
    answer = requests.Response()
    answer.status_code = status
    answer._content = json.dumps(body).encode()
    answer.headers["Content-Type"] = "application/json"
    answer.request = requests.Request(method, url).prepare()
    return answer


class LoggingApi:
    """The Logging API's sinks of one project behind a requests.Session's request(): each
    request recorded; 403 PERMISSION_DENIED for all when `denied` (the shape of Google's
    JSON error answer, Cloud APIs "Errors")."""

    def __init__(self, denied: bool = False) -> None:
        self.sinks: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str, dict[str, Any], Any]] = []
        self.denied = denied

    def request(
        self, method: str, url: str, params: dict[str, Any] | None = None, json: Any = None
    ) -> requests.Response:
        self.requests.append((method, url, dict(params or {}), json))
        path = url.removeprefix(f"{LOGGING_API}/")
        if self.denied:
            error = {"code": 403, "message": "Permission 'logging.sinks.get' denied"}
            return _answer(method, url, 403, {"error": {**error, "status": "PERMISSION_DENIED"}})
        if method == "POST":
            name = f"{path.removesuffix('/sinks')}/sinks/{json['name']}"
            self.sinks[name] = {**json, "writerIdentity": WRITER}
            return _answer(method, url, 200, self.sinks[name])
        if path not in self.sinks:
            return _answer(method, url, 404, {"error": {"code": 404, "status": "NOT_FOUND"}})
        if method == "PATCH":
            for key in str((params or {})["updateMask"]).split(","):
                self.sinks[path][key] = json[key]
        return _answer(method, url, 200, self.sinks[path])


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


def gcp_clients(api: LoggingApi, publisher: Publisher) -> dict[str, Any]:
    storage = Anything()
    storage.get_service_account_email = lambda project: "service-9@gs-project-accounts.iam"  # type: ignore[attr-defined]
    return {
        "publisher": publisher,
        "subscriber": Anything(),
        "storage": storage,
        "logging": LogSinks(api),
    }


def gcp_target() -> SetupTarget:
    return SetupTarget.of_fleet(
        "gs://my-navarch-state/research",
        "research",
        {"gce": {"type": "gcp", "project": "my-project"}},
    )


def test_gcs_setup_routes_the_projects_host_events_to_the_fleets_topic_through_a_log_sink() -> None:
    api, publisher = LoggingApi(), Publisher()
    warnings: list[str] = []
    setup_events(
        gcp_target(),
        say=lambda _: None,
        clients=gcp_clients(api, publisher),
        warn=warnings.append,
    )
    assert warnings == []
    (get, post) = api.requests
    assert get[:2] == ("GET", f"{LOGGING_API}/{SINK}")
    method, url, params, sink = post
    assert (method, url, params) == (
        "POST",
        f"{LOGGING_API}/projects/my-project/sinks",
        {"uniqueWriterIdentity": "true"},
    )
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


def test_gcs_setup_a_second_time_changes_neither_the_sink_nor_the_topics_policy() -> None:
    api, publisher = LoggingApi(), Publisher()
    clients = gcp_clients(api, publisher)
    setup_events(gcp_target(), say=lambda _: None, clients=clients)
    made, policy = dict(api.sinks), publisher.policies[TOPIC].SerializeToString()
    api.requests.clear()
    publisher.calls.clear()
    setup_events(gcp_target(), say=lambda _: None, clients=clients)
    assert [m for m, *_ in api.requests] == ["GET"]
    assert "set_iam_policy" not in publisher.calls
    assert api.sinks == made
    assert publisher.policies[TOPIC].SerializeToString() == policy


def test_gcs_setup_mends_a_sink_whose_filter_was_changed() -> None:
    api, publisher = LoggingApi(), Publisher()
    clients = gcp_clients(api, publisher)
    setup_events(gcp_target(), say=lambda _: None, clients=clients)
    wanted = api.sinks[SINK]["filter"]
    api.sinks[SINK]["filter"] = 'resource.type="gce_instance"'
    api.requests.clear()
    setup_events(gcp_target(), say=lambda _: None, clients=clients)
    method, url, params, body = api.requests[-1]
    assert (method, url) == ("PATCH", f"{LOGGING_API}/{SINK}")
    assert params["updateMask"].split(",")[:2] == ["destination", "filter"]
    assert api.sinks[SINK]["filter"] == wanted == body["filter"]


def test_gcs_setup_without_logging_permission_warns_and_keeps_the_report_route() -> None:
    api, publisher = LoggingApi(denied=True), Publisher()
    warnings: list[str] = []
    url, calls = setup_events(
        gcp_target(),
        say=lambda _: None,
        clients=gcp_clients(api, publisher),
        warn=warnings.append,
    )
    assert url == "pubsub://projects/my-project/subscriptions/navarch-research-events"
    assert "create_subscription" in [c.operation for c in calls]
    (warning,) = warnings
    assert "log sink" in warning and "Forbidden: 403" in warning
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
    assert "logging.create_sink(parent='projects/my-project'" in text
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


def test_a_logging_api_error_is_raised_as_google_api_cores_exception() -> None:
    from google.api_core import exceptions

    class Failing:
        def request(self, method: str, url: str, **_: Any) -> requests.Response:
            return _answer(method, url, 500, {"error": {"code": 500, "message": "boom"}})

    with pytest.raises(exceptions.InternalServerError, match="boom"):
        LogSinks(Failing()).get_sink(sink_name=SINK)


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


def test_the_gcp_and_azure_setup_roles_allow_every_call_setup_makes() -> None:
    import yaml

    policies = Path(__file__).parents[2] / "docs" / "policies"
    gcp_role = yaml.safe_load((policies / "gcp-events-setup-role.yaml").read_text())
    azure_role = json.loads((policies / "azure-events-setup-role.json").read_text())
    allowed = set(gcp_role["includedPermissions"]) | set(azure_role["Actions"])
    api, publisher = LoggingApi(), Publisher()
    clients = gcp_clients(api, publisher)
    _, made = setup_events(gcp_target(), say=lambda _: None, clients=clients)
    api.sinks[SINK]["filter"] = ""  # so the second run mends the sink
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
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from navarch.events import setup as module
    from tests.support.cli import run_navarch

    real = module.setup_events
    denied = gcp_clients(LoggingApi(denied=True), Publisher())
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

"""The stores' notifications, parsed from samples in the exact format their documentation
shows (tests/events/samples/, each with its source): only reports under health/<fleet>/
count; everything else is ignored with a count, never an error."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import pytest

from navarch.events.messages import (
    Ignored,
    Parsed,
    Watch,
    parse_event_grid_message,
    parse_pubsub_message,
    parse_s3_message,
)

SAMPLES = Path(__file__).parent / "samples"
REPORT = "health/research/train/research-train-0001.json"


def sample(name: str) -> dict[str, Any]:
    doc = json.loads((SAMPLES / name).read_text())
    assert doc["source"]  # every sample names where its format comes from
    return doc


def s3_body(key: str, *, bucket: str = "mybucket", event: str = "ObjectCreated:Put") -> str:
    body = copy.deepcopy(sample("s3_object_created.json")["body"])
    body["Records"][0]["s3"]["bucket"]["name"] = bucket
    body["Records"][0]["s3"]["object"]["key"] = key
    body["Records"][0]["eventName"] = event
    return json.dumps(body)


def test_the_documented_s3_notification_names_a_report_under_the_fleet_prefix() -> None:
    watch = Watch.of_store("s3://mybucket/navarch", "research")
    # S3 URL-encodes the key ("red flower.jpg" -> "red+flower.jpg"); moto also encodes "/".
    for key in (f"navarch/{REPORT}", f"navarch%2F{REPORT.replace('/', '%2F')}"):
        assert parse_s3_message(s3_body(key), watch) == Parsed((REPORT,), {})
    as_documented = json.dumps(sample("s3_object_created.json")["body"])
    assert parse_s3_message(as_documented, watch).ignored == {Ignored.OTHER_PREFIX: 1}


def test_the_s3_test_event_and_other_objects_are_ignored_with_a_count() -> None:
    watch = Watch.of_store("s3://mybucket", "research")
    test_event = json.dumps(sample("s3_test_event.json")["body"])
    assert parse_s3_message(test_event, watch) == Parsed((), {Ignored.TEST_EVENT: 1})
    cases = {
        s3_body("health/other-fleet/train/n.json"): Ignored.OTHER_PREFIX,
        s3_body(REPORT, bucket="someone-elses"): Ignored.OTHER_BUCKET,
        s3_body(REPORT, event="ObjectRemoved:Delete"): Ignored.NOT_A_WRITE,
        s3_body("health/research/train/sub/dir/n.json"): Ignored.NOT_A_REPORT_KEY,
        s3_body("health/research/train/n.txt"): Ignored.NOT_A_REPORT_KEY,
        "not json": Ignored.MALFORMED,
        "[]": Ignored.MALFORMED,
        '{"Records": [{"eventSource": "aws:s3"}]}': Ignored.MALFORMED,
        "x" * (300 * 1024): Ignored.MALFORMED,
    }
    for body, reason in cases.items():
        assert parse_s3_message(body, watch) == Parsed((), {reason: 1}), body[:80]


@pytest.mark.parametrize(
    "hostile",
    [
        "health/research/train/..%2F..%2Fstate%2Fresearch.json",
        "health/research/../state/research.json",
        "health/research/train/n\x1b[31m.json",
        "health/research/train/\u202enosj.json",
        "health/research/train/" + "n" * 300 + ".json",
        "health/research/%00/n.json",
    ],
)
def test_a_hostile_key_never_becomes_a_report_key(hostile: str) -> None:
    watch = Watch.of_store("s3://mybucket", "research")
    parsed = parse_s3_message(s3_body(hostile), watch)
    assert parsed.keys == ()
    assert sum(parsed.ignored.values()) == 1


def test_a_burst_of_records_in_one_body_names_each_report_once() -> None:
    watch = Watch.of_store("s3://mybucket", "research")
    doc = json.loads(s3_body(REPORT))
    doc["Records"] = (
        doc["Records"] * 3 + json.loads(s3_body(REPORT.replace("0001", "0002")))["Records"]
    )
    parsed = parse_s3_message(json.dumps(doc), watch)
    assert parsed.keys == (REPORT, REPORT.replace("0001", "0002"))


def test_the_documented_eventbridge_object_created_names_a_report() -> None:
    body = copy.deepcopy(sample("eventbridge_object_created.json")["body"])
    watch = Watch.of_store("s3://DOC-EXAMPLE-BUCKET1/p", "research")
    assert parse_s3_message(json.dumps(body), watch).ignored == {Ignored.OTHER_PREFIX: 1}
    body["detail"]["object"]["key"] = f"p/{REPORT}"
    assert parse_s3_message(json.dumps(body), watch) == Parsed((REPORT,), {})
    body["detail-type"] = "Object Deleted"
    assert parse_s3_message(json.dumps(body), watch).ignored == {Ignored.NOT_A_WRITE: 1}


def test_the_documented_gcs_pubsub_notification_names_a_report() -> None:
    doc = sample("gcs_object_finalize.json")
    watch = Watch.of_store("gs://my-bucket/fleets", "research")
    attrs, data = dict(doc["attributes"]), json.dumps(doc["data"]).encode()
    assert parse_pubsub_message(attrs, data, watch).ignored == {Ignored.OTHER_PREFIX: 1}
    attrs["objectId"] = f"fleets/{REPORT}"
    assert parse_pubsub_message(attrs, data, watch) == Parsed((REPORT,), {})
    # Attributes lost on the way (a push endpoint that drops them): the payload names it.
    payload = {**doc["data"], "name": f"fleets/{REPORT}"}
    got = parse_pubsub_message(
        {"eventType": "OBJECT_FINALIZE"}, json.dumps(payload).encode(), watch
    )
    assert got.keys == (REPORT,)
    for event in ("OBJECT_DELETE", "OBJECT_METADATA_UPDATE", "OBJECT_ARCHIVE"):
        got = parse_pubsub_message({**attrs, "eventType": event}, data, watch)
        assert got.ignored == {Ignored.NOT_A_WRITE: 1}
    assert parse_pubsub_message({}, b"\xff", watch).ignored == {Ignored.MALFORMED: 1}


def test_the_documented_azure_blob_created_event_names_a_report_base64_or_plain() -> None:
    watch = Watch.of_store("az://myaccount/test-container/fleets", "research")
    for name in ("azure_blob_created.json", "azure_blob_created_cloudevents.json"):
        event = copy.deepcopy(sample(name)["body"][0])
        plain = json.dumps(event)
        assert parse_event_grid_message(plain, watch).ignored == {Ignored.OTHER_PREFIX: 1}
        event["subject"] = f"/blobServices/default/containers/test-container/blobs/fleets/{REPORT}"
        for text in (json.dumps(event), base64.b64encode(json.dumps(event).encode()).decode()):
            assert parse_event_grid_message(text, watch) == Parsed((REPORT,), {}), name
        other = {**event, "subject": event["subject"].replace("test-container", "elsewhere")}
        assert parse_event_grid_message(json.dumps(other), watch).ignored == {
            Ignored.OTHER_BUCKET: 1
        }
    deleted = {
        **sample("azure_blob_created.json")["body"][0],
        "eventType": "Microsoft.Storage.BlobDeleted",
    }
    assert parse_event_grid_message(json.dumps(deleted), watch).ignored == {Ignored.NOT_A_WRITE: 1}
    assert parse_event_grid_message("%%%", watch).ignored == {Ignored.MALFORMED: 1}


def test_a_store_without_notifications_is_refused() -> None:
    with pytest.raises(ValueError, match="file://"):
        Watch.of_store("file://.navarch/store", "research")


def test_the_clouds_instance_events_name_the_instance_and_no_report() -> None:
    watch = Watch.of_store("s3://mybucket", "research")
    state = json.dumps(sample("ec2_state_change.json")["body"])
    assert parse_s3_message(state, watch) == Parsed((), {}, ("i-1234567890abcdef0",))
    health = json.dumps(sample("aws_health_ec2.json")["body"])
    assert parse_s3_message(health, watch).instances == ("i-0abcdef1234567890",)
    gce = sample("gce_host_error.json")
    parsed = parse_pubsub_message(gce["attributes"], json.dumps(gce["data"]).encode(), watch)
    assert parsed == Parsed((), {}, ("1234567890123456789",))
    azure = json.dumps(sample("azure_health_availability.json")["body"])
    (vm,) = parse_event_grid_message(azure, watch).instances
    assert "/virtualMachines/research-train-0001" in vm


def test_a_gce_termination_for_host_maintenance_names_the_instance() -> None:
    watch = Watch.of_store("gs://mybucket", "research")
    gce = copy.deepcopy(sample("gce_host_error.json")["data"])
    gce["protoPayload"]["methodName"] = "compute.instances.terminateOnHostMaintenance"
    parsed = parse_pubsub_message({}, json.dumps(gce).encode(), watch)
    assert parsed.instances == ("1234567890123456789",)


def test_cloud_events_that_say_nothing_of_a_machine_start_nothing() -> None:
    watch = Watch.of_store("s3://mybucket", "research")
    other = copy.deepcopy(sample("ec2_state_change.json")["body"])
    other["detail-type"] = "EC2 AMI State Change"
    assert parse_s3_message(json.dumps(other), watch) == Parsed((), {Ignored.OTHER_CLOUD_EVENT: 1})
    rds = copy.deepcopy(sample("aws_health_ec2.json")["body"])
    rds["detail"]["service"] = "RDS"
    assert parse_s3_message(json.dumps(rds), watch).instances == ()
    hostile = copy.deepcopy(sample("ec2_state_change.json")["body"])
    hostile["detail"]["instance-id"] = "i-1; rm -rf /"
    assert parse_s3_message(json.dumps(hostile), watch) == Parsed((), {Ignored.MALFORMED: 1})
    gce = copy.deepcopy(sample("gce_host_error.json")["data"])
    gce["protoPayload"]["methodName"] = "v1.compute.instances.insert"
    assert parse_pubsub_message({}, json.dumps(gce).encode(), watch).instances == ()

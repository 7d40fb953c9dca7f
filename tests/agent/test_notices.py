"""Spot / maintenance notices against a local http.server speaking each cloud's metadata paths."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from navarch.agent import AgentConfig, run_once
from navarch.agent.notices import detect_cloud, fetch_notice

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
AWS_TOKEN = "tok-123"


def aws_token(srv: Any) -> None:
    srv.route(
        "PUT", "/latest/api/token", 200, AWS_TOKEN, {"X-aws-ec2-metadata-token-ttl-seconds": "300"}
    )


def test_aws_spot_interruption(metadata_server: Any) -> None:
    aws_token(metadata_server)
    metadata_server.route(
        "GET",
        "/latest/meta-data/spot/instance-action",
        200,
        json.dumps({"action": "terminate", "time": "2026-03-01T12:02:00Z"}),
        {"X-aws-ec2-metadata-token": AWS_TOKEN},
    )
    notice, errors = fetch_notice("aws", endpoint=metadata_server.url, now=NOW)
    assert errors == []
    assert notice is not None
    assert notice.to_json() == {
        "kind": "preemption",
        "source": "aws",
        "deadline": "2026-03-01T12:02:00Z",
        "detail": "spot instance-action terminate",
    }
    assert metadata_server.requests[0][0] == "PUT"


def test_aws_scheduled_maintenance(metadata_server: Any) -> None:
    aws_token(metadata_server)
    events = [
        {
            "Code": "system-reboot",
            "Description": "scheduled reboot",
            "EventId": "instance-event-1",
            "NotBefore": "21 Mar 2026 09:00:43 GMT",
            "State": "active",
        },
        {
            "Code": "instance-stop",
            "EventId": "instance-event-0",
            "NotBefore": "1 Mar 2026 09:00:00 GMT",
            "State": "completed",
        },
    ]
    metadata_server.route(
        "GET",
        "/latest/meta-data/events/maintenance/scheduled",
        200,
        json.dumps(events),
        {"X-aws-ec2-metadata-token": AWS_TOKEN},
    )
    notice, _ = fetch_notice("aws", endpoint=metadata_server.url, now=NOW)
    assert notice is not None
    assert (notice.kind, notice.source) == ("maintenance", "aws")
    assert notice.deadline == datetime(2026, 3, 21, 9, 0, 43, tzinfo=UTC)
    assert notice.detail.startswith("system-reboot")


def test_aws_nothing_pending(metadata_server: Any) -> None:
    aws_token(metadata_server)
    metadata_server.route(
        "GET",
        "/latest/meta-data/events/maintenance/scheduled",
        200,
        "[]",
        {"X-aws-ec2-metadata-token": AWS_TOKEN},
    )
    assert fetch_notice("aws", endpoint=metadata_server.url, now=NOW) == (None, [])


def test_gcp_preempted(metadata_server: Any) -> None:
    g = {"Metadata-Flavor": "Google"}
    metadata_server.route("GET", "/computeMetadata/v1/instance/preempted", 200, "TRUE", g)
    notice, _ = fetch_notice("gcp", endpoint=metadata_server.url, now=NOW)
    assert notice is not None
    assert notice.to_json()["deadline"] == "2026-03-01T12:00:30Z"
    assert (notice.kind, notice.source) == ("preemption", "gcp")


def test_gcp_maintenance_event(metadata_server: Any) -> None:
    g = {"Metadata-Flavor": "Google"}
    metadata_server.route("GET", "/computeMetadata/v1/instance/preempted", 200, "FALSE", g)
    metadata_server.route(
        "GET",
        "/computeMetadata/v1/instance/maintenance-event",
        200,
        "TERMINATE_ON_HOST_MAINTENANCE",
        g,
    )
    notice, _ = fetch_notice("gcp", endpoint=metadata_server.url, now=NOW)
    assert notice is not None and (notice.kind, notice.detail) == (
        "maintenance",
        "TERMINATE_ON_HOST_MAINTENANCE",
    )
    metadata_server.route("GET", "/computeMetadata/v1/instance/maintenance-event", 200, "NONE", g)
    assert fetch_notice("gcp", endpoint=metadata_server.url, now=NOW) == (None, [])


def test_gcp_without_flavor_header_is_an_error(metadata_server: Any) -> None:
    metadata_server.route("GET", "/computeMetadata/v1/instance/preempted", 403, "", {})
    notice, errors = fetch_notice("gcp", endpoint=metadata_server.url, now=NOW)
    assert notice is None and errors and errors[0].startswith("gcp:")


def test_azure_scheduled_events(metadata_server: Any) -> None:
    doc = {
        "DocumentIncarnation": 3,
        "Events": [
            {
                "EventId": "e1",
                "EventType": "Reboot",
                "ResourceType": "VirtualMachine",
                "Resources": ["other-vm"],
                "EventStatus": "Scheduled",
                "NotBefore": "Mon, 02 Mar 2026 18:29:47 GMT",
            },
            {
                "EventId": "e2",
                "EventType": "Preempt",
                "ResourceType": "VirtualMachine",
                "Resources": ["train-0001"],
                "EventStatus": "Scheduled",
                "NotBefore": "Sun, 01 Mar 2026 12:00:30 GMT",
            },
        ],
    }
    metadata_server.route(
        "GET",
        "/metadata/scheduledevents?api-version=2020-07-01",
        200,
        json.dumps(doc),
        {"Metadata": "true"},
    )
    notice, _ = fetch_notice("azure", endpoint=metadata_server.url, now=NOW, names=("train-0001",))
    assert notice is not None
    assert notice.to_json()["kind"] == "preemption" and notice.deadline == datetime(
        2026, 3, 1, 12, 0, 30, tzinfo=UTC
    )
    notice, _ = fetch_notice(
        "azure", endpoint=metadata_server.url, now=NOW, names=("someone-else",)
    )
    assert notice is None


def test_unreachable_endpoint_fails_fast_and_is_skipped() -> None:
    notice, errors = fetch_notice("aws", endpoint="http://127.0.0.1:9", timeout_s=0.2, now=NOW)
    assert notice is None and len(errors) == 1


def test_auto_off_cloud_does_nothing(tmp_path: Any) -> None:
    (tmp_path / "sys_vendor").write_text("QEMU\n")
    assert detect_cloud(str(tmp_path)) is None
    assert fetch_notice("auto", now=NOW, dmi_dir=str(tmp_path)) == (None, [])


@pytest.mark.parametrize(
    ("vendor", "cloud"),
    [("Amazon EC2", "aws"), ("Google", "gcp"), ("Microsoft Corporation", "azure")],
)
def test_detect_cloud(tmp_path: Any, vendor: str, cloud: str) -> None:
    (tmp_path / "sys_vendor").write_text(vendor + "\n")
    assert detect_cloud(str(tmp_path)) == cloud


def test_notice_lands_in_the_report(
    make_config: Callable[..., AgentConfig], metadata_server: Any, validate_report: Any
) -> None:
    aws_token(metadata_server)
    metadata_server.route(
        "GET",
        "/latest/meta-data/spot/instance-action",
        200,
        json.dumps({"action": "stop", "time": "2026-03-01T12:02:00Z"}),
        {"X-aws-ec2-metadata-token": AWS_TOKEN},
    )
    report = run_once(make_config(metadata="aws", metadata_endpoint=metadata_server.url), now=NOW)
    validate_report(report)
    assert report["notice"] == {
        "kind": "preemption",
        "source": "aws",
        "deadline": "2026-03-01T12:02:00Z",
        "detail": "spot instance-action stop",
    }

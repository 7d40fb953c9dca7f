"""Event-started runs end to end on the moto server: `navarch events setup` makes the SQS
queue and the S3 bucket notification, the real agent writes a report to S3, moto delivers
S3's event to SQS (in server mode, synchronously with the PUT), `navarch apply
--on-events` cordons the node and deletes the message only after the state is saved."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest

from navarch.events.aws_lambda import aws_lambda_handler
from navarch.events.queues import SqsQueue
from navarch.reconcile.state import load_memory
from navarch.stores import open_store
from tests.aws.test_e2e import (  # noqa: F401 - env is a fixture
    BUCKET,
    FLEET,
    GPU_0_LOST,
    env,
    fleet_nodes,
    navarch,
    s3_report,
    write_fleet,
)
from tests.support.api_log import ApiLog, recording

__all__ = ["env"]


def setup_queue(fleet: Path, env: dict[str, str], cwd: Path) -> str:
    run = navarch(["events", "setup", str(fleet)], env, cwd)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "put_bucket_notification_configuration" in run.stdout
    url = re.search(r"--on-events (\S+)", run.stdout)
    assert url, run.stdout
    return url.group(1)


def queued(url: str) -> int:
    """Messages in the queue, visible or received and not yet deleted."""
    attrs = boto3.client("sqs").get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]) + int(
        attrs["ApproximateNumberOfMessagesNotVisible"]
    )


def phase(node: str) -> str:
    memory, _ = load_memory(open_store(f"s3://{BUCKET}/navarch"), FLEET)
    nm = memory.node(node)
    assert nm is not None
    return str(nm.phase.value)


@pytest.fixture
def healthy_fleet(env, tmp_path) -> tuple[Path, dict[str, str], str]:
    """Two nodes with healthy reports folded in, and the event queue set up (drained)."""
    fleet = write_fleet(tmp_path, target=2, offline_after="1h", surge_on="any")
    assert navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path).returncode == 0
    nodes = fleet_nodes()
    for node, iid in nodes.items():
        assert s3_report(node, tmp_path, instance_id=iid)["status"] == "healthy"
    url = setup_queue(fleet, env, tmp_path)
    assert queued(url) == 1  # S3's s3:TestEvent
    drained = navarch(
        ["apply", str(fleet), "--auto-approve", "--on-events", url, "--events-wait", "0s"],
        env,
        tmp_path,
    )
    assert drained.returncode == 0, drained.stdout + drained.stderr
    assert "1 test_event" in drained.stderr
    assert queued(url) == 0
    return fleet, nodes, url


def test_a_report_written_to_s3_starts_a_run_that_cordons_the_node_then_deletes_its_message(
    healthy_fleet, env, tmp_path
) -> None:
    fleet, nodes, url = healthy_fleet
    sick, healthy = sorted(nodes)
    assert (
        s3_report(sick, tmp_path, instance_id=nodes[sick], faults=GPU_0_LOST)["status"]
        == "unhealthy"
    )
    assert queued(url) == 1  # moto delivered S3's ObjectCreated:Put for the report

    with recording(ApiLog()) as calls:
        run = navarch(
            ["apply", str(fleet), "--auto-approve", "--on-events", url, "--triggered"],
            env,
            tmp_path,
        )
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"{sick}: cordon ok" in run.stdout, run.stdout
    assert "1 messages, 1 reports named" in run.stderr
    assert phase(sick) in ("cordoned", "draining")
    assert queued(url) == 0
    # Only what changed: the run listed the one report its event named, not health/<fleet>/.
    listed = [c.key for c in calls.calls if c.action == "s3:ListBucket"]
    report_key = f"navarch/health/{FLEET}/train/{sick}.json"
    assert report_key in listed and f"navarch/health/{FLEET}/" not in listed, listed

    # Nothing queued: a job the queue started does nothing.
    idle = navarch(
        [
            "apply",
            str(fleet),
            "--auto-approve",
            "--on-events",
            url,
            "--triggered",
            "--events-wait",
            "0s",
        ],
        env,
        tmp_path,
    )
    assert idle.returncode == 0 and "cordon" not in idle.stdout, idle.stdout


def test_a_heartbeat_written_to_s3_starts_a_partial_run_that_lists_no_instance(
    healthy_fleet, env, tmp_path
) -> None:
    fleet, nodes, url = healthy_fleet
    node = sorted(nodes)[0]
    (tmp_path / f"{node}.agent.json").unlink()  # the agent writes again, as on its heartbeat
    assert s3_report(node, tmp_path, instance_id=nodes[node])["status"] == "healthy"
    assert queued(url) == 1

    with recording(ApiLog()) as calls:
        run = navarch(
            ["apply", str(fleet), "--auto-approve", "--on-events", url, "--triggered"],
            env,
            tmp_path,
        )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Partial run: read the 1 report its events named (1 new)" in run.stdout, run.stdout
    assert "No changes" not in run.stdout
    actions = {c.action for c in calls.calls}
    assert not any(a.startswith("ec2:") for a in actions), actions  # the cloud was not asked
    listed = [c.key for c in calls.calls if c.action == "s3:ListBucket"]
    assert listed == [f"navarch/health/{FLEET}/train/{node}.json"], listed
    assert queued(url) == 0  # deleted once the state was saved


def test_a_kill_between_the_run_and_the_delete_redelivers_and_the_next_run_repeats_nothing(
    healthy_fleet, env, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet, nodes, url = healthy_fleet
    sick, _ = sorted(nodes)
    s3_report(sick, tmp_path, instance_id=nodes[sick], faults=GPU_0_LOST)
    deletes: list[int] = []

    def killed(self: SqsQueue, messages: Any) -> None:
        deletes.append(len(messages))
        raise KeyboardInterrupt  # the process dies after the run, before the delete

    args = ["apply", str(fleet), "--auto-approve", "--on-events", url, "--triggered"]
    with monkeypatch.context() as m:
        m.setattr(SqsQueue, "delete", killed)
        run = navarch([*args, "--events-visibility", "1s"], env, tmp_path)
    assert run.returncode == 1 and "interrupted" in run.stderr, run.stdout + run.stderr
    assert deletes == [1]
    assert f"{sick}: cordon ok" in run.stdout
    assert phase(sick) in (
        "cordoned",
        "draining",
    )  # the state was saved before the delete was tried
    launched = len(fleet_nodes(live_only=False))

    again = navarch([*args, "--events-wait", "5s"], env, tmp_path)  # re-delivered after 1 s
    assert again.returncode == 0, again.stdout + again.stderr
    assert "1 messages, 1 reports named" in again.stderr
    assert "cordon" not in again.stdout and "provision" not in again.stdout, again.stdout
    assert len(fleet_nodes(live_only=False)) == launched
    assert queued(url) == 0


def test_the_lambda_handler_applies_for_the_reports_its_sqs_batch_names(
    healthy_fleet, env, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet, nodes, url = healthy_fleet
    sick, _ = sorted(nodes)
    s3_report(sick, tmp_path, instance_id=nodes[sick], faults=GPU_0_LOST)
    got = boto3.client("sqs").receive_message(QueueUrl=url, MaxNumberOfMessages=10)
    records = [
        {"messageId": m["MessageId"], "body": m["Body"], "eventSource": "aws:sqs"}
        for m in got["Messages"]
    ]
    records.append({"messageId": "t", "body": json.dumps({"Event": "s3:TestEvent"})})
    monkeypatch.setenv("NAVARCH_FLEET", str(fleet))
    monkeypatch.chdir(tmp_path)
    answer = aws_lambda_handler({"Records": records}, None)
    assert answer["batchItemFailures"] == []
    assert answer["reports"] == 1 and answer["ignored"] == {"test_event": 1}
    assert phase(sick) in ("cordoned", "draining")


def test_an_event_started_run_lists_every_report_when_another_one_looks_stale(
    healthy_fleet, env, tmp_path
) -> None:
    fleet, nodes, url = healthy_fleet
    sick, healthy = sorted(nodes)
    later = datetime.now(UTC) + timedelta(minutes=10)  # past stale_after (6 min)
    s3_report(sick, tmp_path, instance_id=nodes[sick], faults=GPU_0_LOST, now=later)
    with recording(ApiLog()) as calls:
        run = navarch(
            ["apply", str(fleet), "--auto-approve", "--on-events", url, "--triggered"],
            env | {"NAVARCH_NOW": later.isoformat().replace("+00:00", "Z")},
            tmp_path,
        )
    assert run.returncode == 3, run.stdout + run.stderr  # the breaker: both look stale or sick
    # The healthy node's report is ten minutes old by the run's clock: judging it needs the
    # store's own listing (its modification time), not the state's memory of it.
    listed = [c.key for c in calls.calls if c.action == "s3:ListBucket"]
    assert f"navarch/health/{FLEET}/" in listed, listed
    assert queued(url) == 0


def test_a_listening_apply_cordons_within_its_next_poll_and_stops_on_sigterm(
    healthy_fleet, env, tmp_path
) -> None:
    fleet, nodes, url = healthy_fleet
    sick, _ = sorted(nodes)
    args = ["apply", str(fleet), "--auto-approve", "--on-events", url, "--listen"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "navarch", *args, "--period", "1h", "--events-wait", "1s"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        s3_report(sick, tmp_path, instance_id=nodes[sick], faults=GPU_0_LOST)
        for _ in range(600):  # the listener's first (periodic) run, then the event's
            if queued(url) == 0 and phase(sick) in ("cordoned", "draining"):
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        else:
            pytest.fail("the listener did not act on the report")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out + err
    assert f"{sick}: cordon ok" in out


def test_the_periodic_run_still_runs_when_its_event_queue_cannot_be_read(env, tmp_path) -> None:
    fleet = write_fleet(tmp_path, target=1)
    missing = "http://127.0.0.1:1/123456789012/navarch-e2e-events"
    run = navarch(
        ["apply", str(fleet), "--auto-approve", "--on-events", missing, "--events-wait", "0s"],
        env | {"AWS_MAX_ATTEMPTS": "1"},
        tmp_path,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "event queue unreadable, running without it" in run.stderr
    assert len(fleet_nodes()) == 1  # the run converged the fleet all the same

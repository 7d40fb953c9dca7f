"""Draining, coalescing and the listening loop, on real SQS queues (the moto server) fed by
S3's own notifications: a burst of reports is one run, a message is deleted only after its
run returned, the periodic run happens without events, and a held lease keeps the batch."""

from __future__ import annotations

import boto3
import pytest

from navarch.errors import LockHeld, StoreUnavailable
from navarch.events.messages import Watch
from navarch.events.queues import SqsQueue
from navarch.events.routes import SetupTarget
from navarch.events.runner import drain, listen, run_batch
from navarch.events.setup import setup_events

BUCKET = "navarch-events-runner"


@pytest.fixture
def queue(moto) -> SqsQueue:
    """The fleet's queue set up on moto, S3's test event drained."""
    boto3.client("s3").create_bucket(Bucket=BUCKET)
    target = SetupTarget.of_fleet(f"s3://{BUCKET}", "demo", {})
    url, _ = setup_events(target, say=lambda _: None)
    q = SqsQueue(url, Watch.of_store(f"s3://{BUCKET}", "demo"))
    q.delete(drain(q, wait_s=0, settle_s=0).messages)
    return q


def write_reports(count: int, start: int = 1) -> None:
    s3 = boto3.client("s3")
    for i in range(start, start + count):
        s3.put_object(Bucket=BUCKET, Key=f"health/demo/train/demo-train-{i:04d}.json", Body=b"{}")


def in_queue(q: SqsQueue) -> int:
    attrs = boto3.client("sqs").get_queue_attributes(
        QueueUrl=q.url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]) + int(
        attrs["ApproximateNumberOfMessagesNotVisible"]
    )


def test_a_hundred_reports_written_in_the_same_seconds_start_one_run(queue) -> None:
    write_reports(100)
    boto3.client("s3").put_object(Bucket=BUCKET, Key="health/other/x/y.json", Body=b"{}")
    runs: list[tuple[str, ...] | None] = []

    def apply_once(named: tuple[str, ...] | None) -> int:
        assert in_queue(queue) == 100  # nothing deleted before the run returned
        runs.append(named)
        return 0

    batch = drain(queue, wait_s=1, settle_s=1)
    assert len(batch.messages) == 100
    assert run_batch(queue, batch, apply_once, full=False) == 0
    assert len(runs) == 1 and runs[0] is not None and len(runs[0]) == 100
    assert in_queue(queue) == 0


def test_a_run_that_raises_leaves_its_messages_queued(queue) -> None:
    write_reports(3)

    def apply_once(named: tuple[str, ...] | None) -> int:
        raise StoreUnavailable("state/demo.json: 503")  # the run saved no state

    batch = drain(queue, wait_s=1, settle_s=0)
    with pytest.raises(StoreUnavailable):
        run_batch(queue, batch, apply_once, full=False)
    assert in_queue(queue) == 3


def test_listening_runs_on_a_burst_periodically_without_one_and_retries_a_held_lease(
    queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("navarch.events.runner.time.sleep", lambda s: None)
    runs: list[tuple[str, ...] | None] = []
    plan = iter(["periodic", "burst", "held", "burst-again", "stop"])
    state = {"step": next(plan)}

    def apply_once(named: tuple[str, ...] | None) -> int:
        if state["step"] == "held":
            state["step"] = next(plan)
            raise LockHeld("cron@host", "apply fleet.yaml", "lock-1", 10.0, 50.0)
        runs.append(named)
        state["step"] = next(plan)
        if state["step"] == "burst":
            write_reports(5)
        elif state["step"] == "held":
            write_reports(2, start=50)
        return 0

    ticks = iter(range(10**6))
    listen(
        queue,
        apply_once,
        period_s=10**6,  # one periodic run, the first
        wait_s=1,
        settle_s=0.5,
        retry_s=0,
        clock=lambda: float(next(ticks)),
        stop=lambda: state["step"] == "stop",
    )
    assert runs[0] is None  # a listener starting cold lists everything
    assert [len(r or ()) for r in runs[1:]] == [5, 2]  # the held batch ran once, later
    assert in_queue(queue) == 0


def test_an_ec2_state_change_through_the_rule_setup_made_starts_a_full_run(queue) -> None:
    body = {
        "detail-type": "EC2 Instance State-change Notification",
        "source": "aws.ec2",
        "resources": ["arn:aws:ec2:us-east-1:123456789012:instance/i-0dead0000000000001"],
        "detail": {"instance-id": "i-0dead0000000000001", "state": "stopping"},
    }
    import json

    boto3.client("events").put_events(
        Entries=[
            {
                "Source": body["source"],
                "DetailType": body["detail-type"],
                "Resources": body["resources"],
                "Detail": json.dumps(body["detail"]),
            }
        ]
    )
    write_reports(1)
    runs: list[tuple[str, ...] | None] = []
    batch = drain(queue, wait_s=1, settle_s=1)
    assert batch.parsed.instances == ("i-0dead0000000000001",)
    run_batch(queue, batch, lambda named: runs.append(named) or 0, full=False)
    assert runs == [None]  # the cloud listed again, not only the report the batch names
    assert in_queue(queue) == 0

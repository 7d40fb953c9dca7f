"""Least privilege for event-started runs, tested against the code on moto: `navarch events
setup` makes only the calls docs/policies/aws-events-setup.json allows, and an apply
started by events only those docs/policies/aws-reconciler.json allows."""

from __future__ import annotations

import copy
import re

import boto3

from tests.aws.test_e2e import navarch
from tests.aws.test_least_privilege import BUCKET, FLEET, env, policy, write_fleet
from tests.support.api_log import ApiLog, Call, missing_from_policy, recording

__all__ = ["env"]


def test_events_setup_and_an_event_started_run_stay_within_the_policies(env, tmp_path) -> None:
    fleet = write_fleet(tmp_path, target=1, team="research")
    assert navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path).returncode == 0
    with recording(ApiLog()) as setup:
        run = navarch(["events", "setup", str(fleet)], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    url = re.search(r"--on-events (\S+)", run.stdout)
    assert url
    assert {"sqs:CreateQueue", "s3:PutBucketNotification", "events:PutRule"} <= setup.actions()
    assert missing_from_policy(setup.calls, policy("aws-events-setup.json")) == []

    node = f"{FLEET}-train-0001"
    boto3.client("s3").put_object(
        Bucket=BUCKET, Key=f"{FLEET}/health/{FLEET}/train/{node}.json", Body=b"{}"
    )
    with recording(ApiLog()) as started:
        run = navarch(
            ["apply", str(fleet), "--auto-approve", "--on-events", url.group(1), "--triggered"],
            env,
            tmp_path,
        )
    assert run.returncode == 0, run.stdout + run.stderr
    assert {"sqs:ReceiveMessage", "sqs:DeleteMessage"} <= started.actions()
    assert missing_from_policy(started.calls, policy("aws-reconciler.json")) == []

    without = copy.deepcopy(policy("aws-reconciler.json"))
    without["Statement"] = [
        s for s in without["Statement"] if s.get("Sid") != "ReceiveAndDeleteTheFleetsStoreEvents"
    ]
    assert Call("sqs:ReceiveMessage") in missing_from_policy(started.calls, without)

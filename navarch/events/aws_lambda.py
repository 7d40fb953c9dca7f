"""The AWS Lambda entry point of event-started runs: an SQS-triggered function.

Lambda's SQS event source polls the queue S3 notifies and calls the handler with a batch:
``{"Records": [{"messageId", "receiptHandle", "body", "eventSource": "aws:sqs", ...}]}``
(AWS Lambda developer guide, "Using Lambda with Amazon SQS"). Lambda deletes the batch's
messages when the handler returns and leaves them queued when it raises, so the handler
returns only after the run saved its state, and raises when the run did not happen (another
run held the lease, the store failed): the messages come back after the queue's visibility
timeout. Deploy: examples/aws-lambda/ (template and IAM policy).

Environment: NAVARCH_FLEET, the fleet file packaged with the function (default
fleet.yaml in the task root); the fleet's secret as the fleet file says (for example
``secret: {env: NAVARCH_FLEET_SECRET}``, set from Secrets Manager).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from navarch import api
from navarch.actor import Actor, ActorKind
from navarch.events.messages import Parsed, Watch, parse_s3_message

__all__ = ["aws_lambda_handler", "FLEET_ENV"]

log = logging.getLogger(__name__)

#: The environment variable naming the fleet file.
FLEET_ENV = "NAVARCH_FLEET"


def aws_lambda_handler(event: Mapping[str, Any], context: Any = None) -> dict[str, Any]:
    """Apply once for the reports an SQS batch of S3 notifications names.

    event: Lambda's SQS event (Records with a body each: an S3 notification, direct or
    through EventBridge). Returns ``{"batchItemFailures": [], "reports": N, "ignored":
    {reason: count}, "actions": N}``; an empty batchItemFailures tells Lambda (with
    ReportBatchItemFailures on) that every message is done. A batch naming no report (test
    events, other prefixes) starts no run. Raises NavarchError (LockHeld, StoreError, ...)
    when the run did not save its state, so Lambda keeps the messages.
    """
    fleet = api.load_fleet(os.environ.get(FLEET_ENV, "fleet.yaml"))
    watch = Watch.of_store(fleet.spec.store_url, fleet.name)
    parsed = Parsed()
    for record in event.get("Records") or ():
        body = record.get("body") if isinstance(record, Mapping) else None
        parsed = parsed + parse_s3_message(body if isinstance(body, str) else "", watch)
    ignored = {r.value: n for r, n in parsed.ignored.items()}
    if parsed.ignored:
        log.info("ignored %s", parsed.ignored_text())
    if not parsed.keys and not parsed.instances:
        return {"batchItemFailures": [], "reports": 0, "ignored": ignored, "actions": 0}
    function = str(getattr(context, "function_name", "") or "lambda")
    result = api.apply(
        fleet,
        api.ApplyOptions(
            auto_approve=True,
            reports_named=None if parsed.named is None else frozenset(parsed.named),
            actor=Actor(ActorKind.SCHEDULED, name=function, job="store event (AWS Lambda)"),
            command=f"apply {fleet.path} --on-events (AWS Lambda {function})",
        ),
    )
    return {
        "batchItemFailures": [],
        "reports": len(parsed.keys),
        "ignored": ignored,
        "actions": len(result.plan.actions),
    }

"""Event-started runs: the object stores' own notifications make a run start within
seconds of a health report being written, with no server of navarch's.

    messages    the notifications parsed (S3 via SQS or EventBridge, GCS via Pub/Sub,
                Azure Blob via Event Grid to a storage queue) into report keys
    queues      the queue each cloud delivers them to, behind one interface
    runner      drain, coalesce a burst into one run, apply, delete after the state is saved
    setup       `navarch events setup`: the queue and the bucket notification, per cloud
    aws_lambda  the AWS Lambda handler (SQS-triggered)

Where it runs (docs/events.md): a short-lived job the queue starts (the Lambda handler
below; a Cloud Run job on a Pub/Sub push; an Azure Function on a queue trigger), a
long-polling service (`navarch apply FLEET --on-events URL --listen`), or the CronJob
with `--on-events URL` draining what came since its last run.
"""

from __future__ import annotations

from typing import Any

__all__ = ["aws_lambda_handler"]


def aws_lambda_handler(event: Any, context: Any = None) -> Any:
    """The AWS Lambda handler (navarch.events.aws_lambda.aws_lambda_handler): imported
    on first call so `import navarch.events` stays light."""
    from navarch.events.aws_lambda import aws_lambda_handler as handler

    return handler(event, context)

"""Which AWS API actions navarch used, and are they all in the IAM policy files?

``ApiLog`` records every request the in-process moto server answers (from the reconciler's
subprocesses and the agent alike; EC2, S3, SQS, IAM and Service Quotas) as an IAM action and, for S3, the object key or list
prefix (a bucket's notification configuration: the bucket alone). SQS calls are checked by
action. ``missing_from_policy`` checks calls against an IAM policy document: an Allow
statement must name the action (wildcards allowed) and, for S3, a resource ARN matching
the object (or the bucket with an ``s3:prefix`` condition matching the list prefix).
EC2 resource ARNs and tag conditions on resources are not evaluated (they need the
account, region and tags of each resource); EC2 is checked by action, and a CreateTags
call (tags on an existing resource) also against ``ec2:CreateAction`` (tag-on-create
only) and ``aws:TagKeys`` conditions.
"""

from __future__ import annotations

import fnmatch
import io
import threading
import urllib.parse
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from moto.moto_server.werkzeug_app import DomainDispatcherApplication


@dataclass(frozen=True, order=True)
class Call:
    """One API call as IAM sees it: action ("s3:PutObject"), and for S3 the bucket and
    the object key (or, for s3:ListBucket, the prefix listed); for ec2:CreateTags the tag
    keys, comma-separated."""

    action: str
    bucket: str = ""
    key: str = ""


@dataclass
class ApiLog:
    """Calls recorded while `recording()` is active, in order."""

    calls: list[Call] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def actions(self) -> set[str]:
        return {c.action for c in self.calls}


_SQS_ACTIONS = {"DeleteMessageBatch": "DeleteMessage", "SendMessageBatch": "SendMessage"}

_S3_BY_METHOD = {
    "GET": "s3:GetObject",
    "HEAD": "s3:GetObject",
    "PUT": "s3:PutObject",
    "DELETE": "s3:DeleteObject",
}


def _to_call(environ: dict[str, Any], body: bytes) -> Call | None:
    method = environ["REQUEST_METHOD"]
    path = urllib.parse.unquote(environ.get("PATH_INFO", ""))
    query = dict(urllib.parse.parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True))
    if path.startswith("/moto-api"):
        return None
    auth = environ.get("HTTP_AUTHORIZATION", "")
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    if target.startswith("AmazonSQS.") or "/sqs/" in auth:
        # SQS's JSON protocol names the operation in X-Amz-Target; IAM has no action of its
        # own for the batch form (DeleteMessageBatch is allowed by sqs:DeleteMessage).
        operation = target.partition(".")[2] or dict(urllib.parse.parse_qsl(body.decode())).get(
            "Action", ""
        )
        return Call(f"sqs:{_SQS_ACTIONS.get(operation, operation)}")
    if target.startswith("AWSEvents."):
        # EventBridge's JSON protocol names the operation in X-Amz-Target (events:PutRule).
        return Call(f"events:{target.partition('.')[2]}")
    if target.startswith("ServiceQuotas"):
        return Call(f"servicequotas:{target.partition('.')[2]}")
    form = dict(urllib.parse.parse_qsl(body.decode(errors="replace")))
    if "/iam/" in auth:
        return Call(f"iam:{form.get('Action') or query.get('Action')}")
    if "/ec2/" in auth or ("Action" in form and "/s3/" not in auth):
        action = form.get("Action") or query.get("Action")
        tag_keys = sorted(v for k, v in form.items() if k.startswith("Tag.") and k.endswith(".Key"))
        return Call(f"ec2:{action}", key=",".join(tag_keys) if action == "CreateTags" else "")
    bucket, _, key = path.lstrip("/").partition("/")
    if not key and "notification" in query:
        return Call(
            "s3:GetBucketNotification" if method == "GET" else "s3:PutBucketNotification", bucket
        )
    if not key:
        if method == "GET":
            return Call("s3:ListBucket", bucket, query.get("prefix", ""))
        return Call(f"s3:{method}Bucket", bucket)
    return Call(_S3_BY_METHOD.get(method, f"s3:{method}"), bucket, key)


@contextmanager
def recording(log: ApiLog) -> Iterator[ApiLog]:
    """Record every request moto's server app answers while the block runs."""
    original = DomainDispatcherApplication.__call__

    def call(self: Any, environ: dict[str, Any], start_response: Any) -> Any:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        recorded = _to_call(environ, body)
        if recorded is not None:
            with log.lock:
                log.calls.append(recorded)
        return original(self, environ, start_response)

    DomainDispatcherApplication.__call__ = call  # type: ignore[method-assign]
    try:
        yield log
    finally:
        DomainDispatcherApplication.__call__ = original  # type: ignore[method-assign]


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _allowed(call: Call, statement: dict[str, Any]) -> bool:
    if statement.get("Effect") != "Allow":
        return False
    if not any(fnmatch.fnmatchcase(call.action, a) for a in _as_list(statement["Action"])):
        return False
    condition = statement.get("Condition", {})
    if call.action == "ec2:CreateTags":
        # A CreateTags call tags existing resources; tag-on-create is part of RunInstances.
        if "ec2:CreateAction" in condition.get("StringEquals", {}):
            return False
        banned = condition.get("ForAllValues:StringNotLike", {}).get("aws:TagKeys", [])
        keys = [k for k in call.key.split(",") if k]
        return not any(fnmatch.fnmatchcase(k, b) for k in keys for b in _as_list(banned))
    if not call.action.startswith("s3:"):
        return True
    resources = _as_list(statement["Resource"])
    if call.action == "s3:ListBucket":
        if f"arn:aws:s3:::{call.bucket}" not in resources:
            return False
        like = statement.get("Condition", {}).get("StringLike", {}).get("s3:prefix")
        return like is None or any(fnmatch.fnmatchcase(call.key, p) for p in _as_list(like))
    arn = f"arn:aws:s3:::{call.bucket}" + (f"/{call.key}" if call.key else "")
    return any(fnmatch.fnmatchcase(arn, r) for r in resources)


def missing_from_policy(calls: Iterable[Call], policy: dict[str, Any]) -> list[Call]:
    """The distinct calls no Allow statement of policy covers, sorted."""
    statements = _as_list(policy["Statement"])
    return sorted({c for c in calls if not any(_allowed(c, s) for s in statements)})

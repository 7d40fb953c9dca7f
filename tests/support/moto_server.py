"""moto as a server on 127.0.0.1, one per session, the `moto` fixture that resets it, and
botocore errors as AWS answers them (client_error).

Each test gets a clean moto (POST /moto-api/reset) and an environment where boto3 reaches
it through AWS_ENDPOINT_URL with dummy credentials; no other network is used.

One faithfulness fix: moto checks S3 conditional writes (If-None-Match / If-Match) and then
writes, in two steps, on whichever server thread takes the request, so two racing
create-if-absent PUTs can both win there. S3 makes them atomic. The server's S3 object
PUT and DELETE handlers are therefore serialised here, and every successful write or
delete of a `*.lock` key is logged in order (Moto.lock_log), so tests can check that the
lock was held by one run at a time.
"""

from __future__ import annotations

import functools
import logging
import threading
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from botocore.exceptions import ClientError

REGION = "us-east-1"


def client_error(code: str, status: int = 400, operation: str = "RunInstances") -> ClientError:
    """The botocore ClientError an AWS API answers with: error code, HTTP status, operation."""
    return ClientError(
        {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}},
        operation,
    )


@dataclass
class Moto:
    """The running moto server: endpoint URL, the env a child process needs, the lock log."""

    endpoint: str
    lock_log: list[tuple[str, str]] = field(default_factory=list)  # (op, key), in order
    # DescribeInstanceTopology (moto has none; _topology_stand_in answers it): the request
    # parameters of each call, in order, and network nodes set by a test per instance id.
    topology_calls: list[dict[str, Any]] = field(default_factory=list)
    topology: dict[str, list[str]] = field(default_factory=dict)
    # EC2 actions answered with an HTML page of this status (an outage or proxy page where
    # EC2's XML is due), and actions refused as a policy without them is (_ec2_faults).
    pages: dict[str, int] = field(default_factory=dict)
    denied: set[str] = field(default_factory=set)

    def reset(self) -> None:
        req = urllib.request.Request(self.endpoint + "/moto-api/reset", method="POST")
        with urllib.request.urlopen(req, timeout=30) as resp:
            resp.read()
        self.lock_log.clear()
        self.topology_calls.clear()
        self.topology.clear()
        self.pages.clear()
        self.denied.clear()

    def env(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": REGION,
            "AWS_REGION": REGION,
            "AWS_CONFIG_FILE": "/nonexistent/navarch-test-aws-config",
            "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/navarch-test-aws-credentials",
            "AWS_EC2_METADATA_DISABLED": "true",
        }


def _serialised(
    original: Callable[..., Any], op: str, log: list[tuple[str, str]], mutex: threading.Lock
) -> Callable[..., Any]:
    @functools.wraps(original)
    def handler(self: Any) -> Any:
        with mutex:
            result = original(self)
            key = self.parse_key_name()
            status = result[0] if isinstance(result, tuple) else 200
            if key.endswith(".lock") and 200 <= int(status) < 300:
                log.append((op, key))
            return result

    return handler


def _topology_stand_in(moto: Moto) -> Callable[..., Any]:
    """EC2Response.describe_instance_topology for moto, which lacks the call.

    Answers in the EC2 model's shapes (moto serialises the result by botocore's
    DescribeInstanceTopology output shape): per running instance of a type with a topology
    (navarch.providers.aws_topology.TOPOLOGY_TYPES), its InstanceId, InstanceType,
    AvailabilityZone, ZoneId and three NetworkNodes (a test's Moto.topology, else derived
    from the zone and the instance id); other instances are left out. Refuses, as the API
    documents: MaxResults beside InstanceIds (InvalidParameterCombination), MaxResults
    outside 1..100 and more than 100 InstanceIds (InvalidParameterValue), an unknown
    instance id (InvalidInstanceID.NotFound). Every call's parameters go to
    Moto.topology_calls.
    """
    import hashlib

    from moto.core.responses import ActionResult
    from moto.ec2.exceptions import (
        InvalidInstanceIdError,
        InvalidParameterCombination,
        InvalidParameterValue,
    )

    from navarch.providers.aws_topology import has_topology

    def nodes(zone: str, instance_id: str) -> list[str]:
        h = lambda text: "nn-" + hashlib.sha256(text.encode()).hexdigest()[:17]  # noqa: E731
        return [h(f"spine:{zone}"), h(f"block:{zone}"), h(f"leaf:{instance_id}")]

    def describe_instance_topology(self: Any) -> ActionResult:
        ids = self._get_param("InstanceIds", [])
        max_results = self._get_param("MaxResults")
        moto.topology_calls.append(
            {k: v for k, v in (("InstanceIds", ids), ("MaxResults", max_results)) if v}
        )
        if ids and max_results is not None:
            raise InvalidParameterCombination(
                "The parameter instanceIds cannot be used with the parameter maxResults"
            )
        if max_results is not None and not 1 <= int(max_results) <= 100:
            raise InvalidParameterValue(f"Invalid value for maxResults: {max_results}")
        if len(ids) > 100:
            raise InvalidParameterValue("instanceIds: at most 100 instance ids")
        listed = []
        for iid in ids:
            try:
                listed.append(self.ec2_backend.get_instance_by_id(iid))
            except Exception:  # moto's own lookup error
                listed.append(None)
            if listed[-1] is None:
                raise InvalidInstanceIdError(iid)
        out = []
        for inst in listed:
            zone = inst.placement.zone
            if inst.state == "running" and has_topology(inst.instance_type):
                out.append(
                    {
                        "InstanceId": inst.id,
                        "InstanceType": inst.instance_type,
                        "AvailabilityZone": zone,
                        "ZoneId": f"use1-az{zone[-1:]}",
                        "NetworkNodes": moto.topology.get(inst.id) or nodes(zone, inst.id),
                    }
                )
        return ActionResult({"Instances": out})

    return describe_instance_topology


#: EC2's answer to an action the caller's policy does not allow (EC2 API reference, "Error
#: codes": UnauthorizedOperation, HTTP 403, in EC2's XML error envelope). Composed for
#: these tests from that documented shape; {action} is the IAM action refused.
UNAUTHORIZED_XML = """<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>UnauthorizedOperation</Code><Message>You are not authorized \
to perform this operation. User: arn:aws:iam::123456789012:user/navarch is not authorized \
to perform: {action} because no identity-based policy allows the {action} action</Message>\
</Error></Errors><RequestID>59dbff89-35bd-4eac-99ed-be587EXAMPLE</RequestID></Response>"""


def _ec2_faults(moto: Moto, original: Callable[..., Any]) -> Callable[..., Any]:
    """EC2Response.call_action, answering Moto.pages' actions with an HTML page of that
    status (tests.support.fakehttp.OUTAGE_PAGE) and Moto.denied's with UnauthorizedOperation
    (UNAUTHORIZED_XML, 403), as an outage page or a policy without the action would."""
    from tests.support.fakehttp import OUTAGE_PAGE

    @functools.wraps(original)
    def call_action(self: Any) -> Any:
        action = self._get_action()
        if action in moto.denied:
            body = UNAUTHORIZED_XML.format(action=f"ec2:{action}")
            return 403, {"Content-Type": "text/xml;charset=UTF-8"}, body
        if action in moto.pages:
            return moto.pages[action], {"Content-Type": "text/html; charset=utf-8"}, OUTAGE_PAGE
        return original(self)

    return call_action


@pytest.fixture(scope="session")
def moto_server() -> Iterator[Moto]:
    """moto on 127.0.0.1 (ephemeral port) for the session, S3 object writes serialised."""
    from moto.s3.responses import S3Response
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    mutex = threading.Lock()
    log: list[tuple[str, str]] = []
    saved = (S3Response.put_object, S3Response.delete_object)
    S3Response.put_object = _serialised(saved[0], "put", log, mutex)
    S3Response.delete_object = _serialised(saved[1], "delete", log, mutex)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    moto = Moto(endpoint=f"http://{host}:{port}", lock_log=log)
    from moto.ec2.responses import EC2Response

    EC2Response.describe_instance_topology = _topology_stand_in(moto)  # type: ignore[attr-defined]
    call_action = EC2Response.call_action
    EC2Response.call_action = _ec2_faults(moto, call_action)  # type: ignore[method-assign]
    try:
        yield moto
    finally:
        server.stop()
        S3Response.put_object, S3Response.delete_object = saved
        EC2Response.call_action = call_action  # type: ignore[method-assign]
        del EC2Response.describe_instance_topology  # type: ignore[attr-defined]


@pytest.fixture
def moto(moto_server: Moto, monkeypatch: pytest.MonkeyPatch) -> Moto:
    """A freshly reset moto, with this process's AWS environment pointed at it."""
    moto_server.reset()
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    for name, value in moto_server.env().items():
        monkeypatch.setenv(name, value)
    return moto_server

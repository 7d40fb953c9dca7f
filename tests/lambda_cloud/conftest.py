"""A local fake of the Lambda Cloud REST API (v1.10 shapes), on 127.0.0.1.

Routes: GET /api/v1/instance-types, GET /api/v1/instances, GET /api/v1/instances/{id},
POST /api/v1/instance-operations/launch, POST /api/v1/instance-operations/terminate,
POST /api/v1/instance-operations/restart.
Bearer-key auth (401 global/invalid-api-key), the {"data": ...} / {"error": {code,
message}} envelopes, capacity per (type, region) driving both
regions_with_capacity_available and launch's insufficient-capacity error, and canned
failures for any route. Terminated instances stay listed with status "terminated" for a
while, as on the real API.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

API_KEY = "secret_navarch-test_0123456789abcdef"

REGIONS = {
    "us-east-1": "Virginia, USA",
    "us-west-1": "California, USA",
    "us-south-1": "Texas, USA",
}

INSTANCE_TYPES = {
    "gpu_1x_a10": (1, "1x A10 (24 GB PCIe)", 75),
    "gpu_8x_h100_sxm5": (8, "8x H100 (80 GB SXM5)", 2392),
}


@dataclass
class Failure:
    method: str
    path: str
    status: int
    code: str
    message: str = "injected"
    times: int = 1


@dataclass
class FakeLambda:
    """In-memory Lambda Cloud account."""

    capacity: dict[str, set[str]] = field(default_factory=dict)  # type -> regions with capacity
    instances: dict[str, dict[str, Any]] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    calls: list[tuple[str, str, Any]] = field(default_factory=list)
    launch_status: str = "booting"
    ssh_keys: set[str] = field(default_factory=lambda: {"navarch"})
    # hold_launch: the n-th launch (1-based) blocks until `release` is set, then is
    # processed (the instance is created) and `held_done` is set; for killing a client
    # while its launch is in flight.
    hold_launch: int | None = None
    launches_seen: int = 0
    holding: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    held_done: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def reset(self) -> None:
        with self.lock:
            self.capacity = {t: set(REGIONS) for t in INSTANCE_TYPES}
            self.instances.clear()
            self.failures.clear()
            self.calls.clear()
            self.launch_status = "booting"
            self.hold_launch = None
            self.launches_seen = 0
            self.holding.clear()
            self.release.clear()
            self.held_done.clear()

    def fail(
        self,
        method: str,
        path: str,
        status: int,
        code: str,
        message: str = "injected",
        times: int = 1,
    ) -> None:
        """Answer the next `times` requests matching method + path regex with an error (-1: all)."""
        with self.lock:
            self.failures.append(Failure(method, path, status, code, message, times))

    def count(self, method: str, pattern: str) -> int:
        return sum(1 for m, p, _ in self.calls if m == method and re.search(pattern, p))

    def live(self) -> list[dict[str, Any]]:
        return [
            i for i in self.instances.values() if i["status"] not in ("terminated", "terminating")
        ]

    def add_instance(
        self, name: str, region: str, tags: dict[str, str], status: str = "active"
    ) -> str:
        with self.lock:
            return self._create(name, region, "gpu_1x_a10", tags, status)["id"]

    def set_status(self, status: str) -> None:
        with self.lock:
            for inst in self.instances.values():
                if inst["status"] not in ("terminated", "terminating"):
                    inst["status"] = status

    def _create(
        self, name: str, region: str, itype: str, tags: dict[str, str], status: str
    ) -> dict[str, Any]:
        gpus, desc, price = INSTANCE_TYPES[itype]
        n = next(self._ids)
        inst = {
            "id": uuid.uuid4().hex,
            "name": name,
            "ip": f"192.0.2.{n % 250 + 1}",
            "private_ip": f"10.1.0.{n % 250 + 1}",
            "status": status,
            "ssh_key_names": ["navarch"],
            "file_system_names": [],
            "region": {"name": region, "description": REGIONS.get(region, region)},
            "instance_type": _type_json(itype),
            "hostname": f"{region}-{n}",
            "is_reserved": False,
            "tags": [{"key": k, "value": v} for k, v in sorted(tags.items())],
            "actions": {},
        }
        self.instances[inst["id"]] = inst
        return inst


def _type_json(itype: str) -> dict[str, Any]:
    gpus, desc, price = INSTANCE_TYPES[itype]
    return {
        "name": itype,
        "description": desc,
        "gpu_description": desc,
        "price_cents_per_hour": price,
        "specs": {"vcpus": 30 * gpus, "memory_gib": 200 * gpus, "storage_gib": 1400, "gpus": gpus},
    }


def _error(status: int, code: str, message: str) -> tuple[int, dict[str, Any]]:
    return status, {"error": {"code": code, "message": message}}


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def _route(self, method: str) -> None:
        fake = self.server.fake
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n)) if n else None
        held = False
        if method == "POST" and self.path.endswith("/instance-operations/launch"):
            with fake.lock:
                fake.launches_seen += 1
                held = fake.launches_seen == fake.hold_launch
            if held:
                fake.holding.set()
                fake.release.wait(60)
        try:
            with fake.lock:
                fake.calls.append((method, self.path, body))
                status, out = self._dispatch(fake, method, self.path, body)
            data = json.dumps(out).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass  # the client was killed while we held its request
        finally:
            if held:
                fake.held_done.set()

    def _dispatch(
        self, fake: FakeLambda, method: str, path: str, body: Any
    ) -> tuple[int, dict[str, Any]]:
        if self.headers.get("Authorization") != f"Bearer {API_KEY}":
            return _error(
                401, "global/invalid-api-key", "API key was invalid, expired, or deleted."
            )
        for f in list(fake.failures):
            if f.method == method and re.search(f.path, path):
                if f.times > 0:
                    f.times -= 1
                    if f.times == 0:
                        fake.failures.remove(f)
                return _error(f.status, f.code, f.message)
        if method == "GET" and path == "/api/v1/instance-types":
            return 200, {
                "data": {
                    t: {
                        "instance_type": _type_json(t),
                        "regions_with_capacity_available": [
                            {"name": r, "description": REGIONS[r]}
                            for r in sorted(fake.capacity.get(t, ()))
                        ],
                    }
                    for t in INSTANCE_TYPES
                }
            }
        if method == "GET" and path == "/api/v1/instances":
            return 200, {"data": list(fake.instances.values())}
        m = re.fullmatch(r"/api/v1/instances/([0-9a-f]+)", path)
        if method == "GET" and m:
            inst = fake.instances.get(m.group(1))
            if inst is None:
                return _error(
                    404, "global/object-does-not-exist", "Specified instance does not exist."
                )
            return 200, {"data": inst}
        if method == "POST" and path == "/api/v1/instance-operations/launch":
            return self._launch(fake, body or {})
        if method == "POST" and path == "/api/v1/instance-operations/terminate":
            ids = (body or {}).get("instance_ids") or []
            missing = [
                i
                for i in ids
                if i not in fake.instances or fake.instances[i]["status"] == "terminated"
            ]
            if missing:
                return _error(
                    404, "global/object-does-not-exist", "Specified instance does not exist."
                )
            for i in ids:
                fake.instances[i]["status"] = "terminated"
            return 200, {"data": {"terminated_instances": [fake.instances[i] for i in ids]}}
        if method == "POST" and path == "/api/v1/instance-operations/restart":  # issue 13
            ids = (body or {}).get("instance_ids") or []
            if any(fake.instances.get(i, {}).get("status") != "active" for i in ids):
                return _error(
                    404, "global/object-does-not-exist", "Specified instance does not exist."
                )
            return 200, {"data": {"restarted_instances": [fake.instances[i] for i in ids]}}
        return _error(404, "global/not-found", f"no route {method} {path}")

    def _launch(self, fake: FakeLambda, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        for required in ("region_name", "instance_type_name", "ssh_key_names"):
            if required not in body:
                return _error(400, "global/invalid-parameters", f"missing {required}")
        if len(body["ssh_key_names"]) != 1 or body["ssh_key_names"][0] not in fake.ssh_keys:
            return _error(400, "global/invalid-parameters", "exactly one known SSH key is required")
        itype, region = body["instance_type_name"], body["region_name"]
        if itype not in INSTANCE_TYPES or region not in REGIONS:
            return _error(400, "global/invalid-parameters", "unknown instance type or region")
        for tag in body.get("tags", []):
            if not re.fullmatch(r"[a-z][a-z0-9-:]+", tag["key"]) or len(tag["key"]) > 55:
                return _error(400, "global/invalid-parameters", f"bad tag key {tag['key']}")
        if region not in fake.capacity.get(itype, set()):
            return _error(
                400,
                "instance-operations/launch/insufficient-capacity",
                "Not enough capacity to fulfill launch request.",
            )
        tags = {t["key"]: t["value"] for t in body.get("tags", [])}
        inst = fake._create(body.get("name", ""), region, itype, tags, fake.launch_status)
        inst["user_data"] = body.get("user_data")
        return 200, {"data": {"instance_ids": [inst["id"]]}}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeLambda


@pytest.fixture(scope="session")
def lambda_server() -> Iterator[tuple[FakeLambda, str]]:
    fake = FakeLambda()
    server = _Server(("127.0.0.1", 0), _Handler)
    server.fake = fake
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield fake, f"http://127.0.0.1:{server.server_address[1]}/api/v1"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def fake_lambda(
    lambda_server: tuple[FakeLambda, str], monkeypatch: pytest.MonkeyPatch
) -> FakeLambda:
    """The fake Lambda account, reset, with LAMBDA_API_KEY set for this test."""
    fake, _ = lambda_server
    fake.reset()
    monkeypatch.setenv("LAMBDA_API_KEY", API_KEY)
    return fake


@pytest.fixture
def lambda_api_base(lambda_server: tuple[FakeLambda, str]) -> str:
    return lambda_server[1]

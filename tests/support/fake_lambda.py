"""A local fake of the Lambda Cloud REST API v1.10 (a FakeAPI), and its pytest fixtures.

Routes: GET /api/v1/instance-types, GET /api/v1/instances, GET /api/v1/instances/{id},
POST /api/v1/instance-operations/launch, .../terminate, .../restart.
Bearer-key auth (401 global/invalid-api-key), the {"data": ...} / {"error": {code,
message}} envelopes, capacity per (type, region) driving both
regions_with_capacity_available and launch's insufficient-capacity error, and (FakeAPI)
canned failures for any route and a held n-th launch. Terminated instances stay listed
with status "terminated" for a while, as on the real API. Source: Lambda Cloud API v1.10.
"""

from __future__ import annotations

import itertools
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest

from tests.support.fakehttp import Answer, FakeAPI, Request, Route, serve

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

GONE = ("terminated", "terminating")


def _type_json(itype: str) -> dict[str, Any]:
    gpus, desc, price = INSTANCE_TYPES[itype]
    return {
        "name": itype,
        "description": desc,
        "gpu_description": desc,
        "price_cents_per_hour": price,
        "specs": {"vcpus": 30 * gpus, "memory_gib": 200 * gpus, "storage_gib": 1400, "gpus": gpus},
    }


@dataclass
class FakeLambda(FakeAPI):
    """In-memory Lambda Cloud account behind the routes below."""

    capacity: dict[str, set[str]] = field(default_factory=dict)  # type -> regions with capacity
    instances: dict[str, dict[str, Any]] = field(default_factory=dict)
    launch_status: str = "booting"
    ssh_keys: set[str] = field(default_factory=lambda: {"navarch"})
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    NO_ROUTE_CODE: ClassVar[str] = "global/not-found"
    HOLD: ClassVar[tuple[str, str] | None] = ("POST", r"/api/v1/instance-operations/launch")

    def reset(self) -> None:
        super().reset()
        with self.lock:
            self.capacity = {t: set(REGIONS) for t in INSTANCE_TYPES}
            self.instances.clear()
            self.launch_status = "booting"

    def authorize(self, request: Request) -> Answer | None:
        if request.headers.get("Authorization") != f"Bearer {API_KEY}":
            return self.error(
                401, "global/invalid-api-key", "API key was invalid, expired, or deleted."
            )
        return None

    def live(self) -> list[dict[str, Any]]:
        return [i for i in self.instances.values() if i["status"] not in GONE]

    def add_instance(
        self, name: str, region: str, tags: dict[str, str], status: str = "active"
    ) -> str:
        """Create an instance directly (e.g. a foreign one); returns its id."""
        with self.lock:
            return self._create(name, region, "gpu_1x_a10", tags, status)["id"]

    def set_status(self, status: str, instance_id: str | None = None) -> None:
        """Set the status of every live instance, or of the one given."""
        with self.lock:
            for inst in self.live():
                if instance_id is None or inst["id"] == instance_id:
                    inst["status"] = status

    def _create(
        self, name: str, region: str, itype: str, tags: dict[str, str], status: str
    ) -> dict[str, Any]:
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

    def _no_such_instance(self) -> Answer:
        return self.error(404, "global/object-does-not-exist", "Specified instance does not exist.")

    # -- routes --------------------------------------------------------------------------
    def _instance_types(self, req: Request, m: re.Match[str]) -> Answer:
        data = {
            t: {
                "instance_type": _type_json(t),
                "regions_with_capacity_available": [
                    {"name": r, "description": REGIONS[r]} for r in sorted(self.capacity.get(t, ()))
                ],
            }
            for t in INSTANCE_TYPES
        }
        return 200, {"data": data}

    def _list(self, req: Request, m: re.Match[str]) -> Answer:
        return 200, {"data": list(self.instances.values())}

    def _get(self, req: Request, m: re.Match[str]) -> Answer:
        inst = self.instances.get(m["id"])
        return (200, {"data": inst}) if inst else self._no_such_instance()

    def _launch(self, req: Request, m: re.Match[str]) -> Answer:
        body = req.body or {}
        for required in ("region_name", "instance_type_name", "ssh_key_names"):
            if required not in body:
                return self.error(400, "global/invalid-parameters", f"missing {required}")
        if len(body["ssh_key_names"]) != 1 or body["ssh_key_names"][0] not in self.ssh_keys:
            return self.error(
                400, "global/invalid-parameters", "exactly one known SSH key is required"
            )
        itype, region = body["instance_type_name"], body["region_name"]
        if itype not in INSTANCE_TYPES or region not in REGIONS:
            return self.error(400, "global/invalid-parameters", "unknown instance type or region")
        for tag in body.get("tags", []):
            if not re.fullmatch(r"[a-z][a-z0-9-:]+", tag["key"]) or len(tag["key"]) > 55:
                return self.error(400, "global/invalid-parameters", f"bad tag key {tag['key']}")
        if region not in self.capacity.get(itype, set()):
            return self.error(
                400,
                "instance-operations/launch/insufficient-capacity",
                "Not enough capacity to fulfill launch request.",
            )
        tags = {t["key"]: t["value"] for t in body.get("tags", [])}
        inst = self._create(body.get("name", ""), region, itype, tags, self.launch_status)
        inst["user_data"] = body.get("user_data")
        return 200, {"data": {"instance_ids": [inst["id"]]}}

    def _terminate(self, req: Request, m: re.Match[str]) -> Answer:
        ids = (req.body or {}).get("instance_ids") or []
        if any(self.instances.get(i, {}).get("status", "terminated") == "terminated" for i in ids):
            return self._no_such_instance()
        for i in ids:
            self.instances[i]["status"] = "terminated"
        return 200, {"data": {"terminated_instances": [self.instances[i] for i in ids]}}

    def _restart(self, req: Request, m: re.Match[str]) -> Answer:
        """instance-operations/restart: the same machines, rebooted."""
        ids = (req.body or {}).get("instance_ids") or []
        if any(self.instances.get(i, {}).get("status") != "active" for i in ids):
            return self._no_such_instance()
        return 200, {"data": {"restarted_instances": [self.instances[i] for i in ids]}}

    ROUTES: ClassVar[tuple[Route, ...]] = (
        Route("GET", r"/api/v1/instance-types", _instance_types),
        Route("GET", r"/api/v1/instances", _list),
        Route("GET", r"/api/v1/instances/(?P<id>[0-9a-f]+)", _get),
        Route("POST", r"/api/v1/instance-operations/launch", _launch),
        Route("POST", r"/api/v1/instance-operations/terminate", _terminate),
        Route("POST", r"/api/v1/instance-operations/restart", _restart),
    )


@pytest.fixture(scope="session")
def lambda_server() -> Iterator[tuple[FakeLambda, str]]:
    """The fake Lambda Cloud API on 127.0.0.1 for the session: (fake, API base URL)."""
    fake = FakeLambda()
    with serve(fake) as url:
        yield fake, f"{url}/api/v1"


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
    """The fake's API base URL (the provider's api_base)."""
    return lambda_server[1]

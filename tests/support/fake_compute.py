"""A local fake of the Compute Engine REST API v1 (a FakeAPI), and its pytest fixtures.

google-cloud-compute's REST transport talks to it through the provider's api_endpoint.
It speaks the JSON shapes of instances aggregatedList/list/insert/get/delete/setLabels/
reset and zoneOperations get/wait, resourcePolicies get/insert and regionOperations
get/wait (compact placement policies), reservations aggregatedList, honours requestId, answers 409 alreadyExists for a
duplicate name and 412 conditionNotMet for a stale label fingerprint, and can be told to
end insert operations in a zone with a stockout (ZONE_RESOURCE_POOL_EXHAUSTED, HTTP 503
on the operation) or a quota error, to leave operations RUNNING, or (FakeAPI) to fail
requests and hold the n-th insert. Preflight's reads are answered too: projects.get (with
`project_quotas`), zones.get, machineTypes.get (MACHINE_ACCELERATORS' GPUs), images.get /
getFromFamily in any project, regions.get (with `region_quotas`); every zone, machine type
and image exists except those a test lists. Source: Compute Engine API v1 reference.

Instance and resource-policy insert bodies are parsed with google-cloud-compute's own
message types (compute_v1.Instance / ResourcePolicy .from_json, unknown fields refused), so
a body the API's model would refuse is answered 400 invalid, and kept in `inserted` for a
test to assert the exact request. An instance naming a resource policy that does not
exist in its region is refused (400 invalid), one naming a specific reservation that does
not exist or is used up is refused (the stockout answer for a full reservation); one
naming a policy in `full_policies` ends its insert operation with the stockout.
"""

from __future__ import annotations

import itertools
import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar

import pytest

from tests.support.fakehttp import Answer, FakeAPI, Request, Route, serve

BASE = "https://www.googleapis.com/compute/v1"
PROJECT_PATH = r"/compute/v1/projects/[^/]+"

#: The GPUs built into the machine types tests launch (Compute Engine "GPU machine types":
#: A3 High 8 x H100 80GB, A2 Standard 1 x A100 40GB, G2 1 x L4). Composed for these tests.
MACHINE_ACCELERATORS: dict[str, tuple[str, int]] = {
    "a3-highgpu-8g": ("nvidia-h100-80gb", 8),
    "a2-highgpu-1g": ("nvidia-tesla-a100", 1),
    "g2-standard-4": ("nvidia-l4", 1),
}

STOCKOUT_MESSAGE = (
    "The zone 'projects/{project}/zones/{zone}' does not have enough resources available to "
    "fulfill the request.  Try a different zone, or try again later."
)


def _public(op: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in op.items() if not k.startswith("_")}


def _match_filter(flt: str, labels: dict[str, str]) -> bool:
    for key, value in re.findall(r'labels\.([\w-]+)\s*=\s*"?([^"\s]*)"?', flt):
        if labels.get(key) != value:
            return False
    return True


@dataclass
class FakeCompute(FakeAPI):
    """In-memory Compute Engine project behind the routes below."""

    project: str = "navarch-test"
    instances: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    operations: dict[str, dict[str, Any]] = field(default_factory=dict)
    request_ids: dict[str, str] = field(default_factory=dict)
    stockout_zones: set[str] = field(default_factory=set)
    stockout_code: str = "ZONE_RESOURCE_POOL_EXHAUSTED"
    quota_error: str | None = None  # e.g. "Quota 'GPUS_ALL_REGIONS' exceeded. Limit: 0.0 globally."
    initial_status: str = "RUNNING"
    ops_never_finish: bool = False  # operations stay RUNNING (a very slow launch)
    # instances.reportHostAsFaulty bodies taken: (zone, name, body, requestId)
    host_reports: list[tuple[str, str, dict[str, Any], str]] = field(default_factory=list)
    #: (region, name) -> the resource policy as resourcePolicies.get answers it.
    resource_policies: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    #: (region, name) of compact placement policies with no room: an instance naming one
    #: ends its insert operation with the zone's stockout, as Compute Engine answers.
    full_policies: set[tuple[str, str]] = field(default_factory=set)
    #: (zone, name) -> [count, in use] of a specific reservation.
    reservations: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    #: The machine type every reservation of `reservations` holds.
    reservation_machine_type: str = "a3-highgpu-8g"
    #: Preflight's reads (projects.get, zones.get, machineTypes.get, images.get /
    #: getFromFamily, regions.get): every zone and image exists and every machine type is
    #: offered except those listed here; quotas are answered as set, by metric.
    missing_zones: set[str] = field(default_factory=set)
    unoffered: set[tuple[str, str]] = field(default_factory=set)  # (zone, machine type)
    missing_images: set[str] = field(default_factory=set)  # "P/NAME" or "P/family/F"
    project_quotas: dict[str, tuple[float, float]] = field(default_factory=dict)
    region_quotas: dict[str, dict[str, tuple[float, float]]] = field(default_factory=dict)
    #: (kind, body) of every instance / resource policy insert, in order.
    inserted: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1000))

    HOLD: ClassVar[tuple[str, str] | None] = ("POST", PROJECT_PATH + r"/zones/[^/]+/instances")

    def reset(self) -> None:
        super().reset()
        with self.lock:
            self.instances.clear()
            self.operations.clear()
            self.request_ids.clear()
            self.stockout_zones.clear()
            self.quota_error = None
            self.stockout_code = "ZONE_RESOURCE_POOL_EXHAUSTED"
            self.initial_status = "RUNNING"
            self.ops_never_finish = False
            self.host_reports.clear()
            self.resource_policies.clear()
            self.full_policies.clear()
            self.reservations.clear()
            self.inserted.clear()
            self.missing_zones.clear()
            self.unoffered.clear()
            self.missing_images.clear()
            self.project_quotas.clear()
            self.region_quotas.clear()

    def error_body(self, status: int, code: str, message: str) -> Any:
        return {
            "error": {
                "code": status,
                "message": message,
                "errors": [{"domain": "global", "reason": code, "message": message}],
            }
        }

    def authorize(self, request: Request) -> Answer | None:
        m = re.match(r"/compute/v1/projects/([^/]+)(?:/|$)", request.path)
        if m is not None and "/global/images/" in request.path:
            return None  # images are read in other projects too (debian-cloud, ...)
        if m is None or m.group(1) != self.project:
            project = m and m.group(1)
            return self.error(404, "notFound", f"The resource 'projects/{project}' was not found")
        return None

    def call_data(self, request: Request) -> Any:
        return request.query  # Compute's arguments that matter here: requestId, filter

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

    def set_status(self, zone: str, name: str, status: str, **fields: Any) -> None:
        """Compute Engine's own doing to an instance: a status (REPAIRING after a host
        error, TERMINATED) and other fields (statusMessage, lastStopTimestamp,
        resourceStatus {upcomingMaintenance: {windowStartTime}})."""
        with self.lock:
            self.instances[(zone, name)].update(status=status, **fields)

    # -- state -------------------------------------------------------------------------
    def _instance(self, zone: str, body: dict[str, Any]) -> dict[str, Any]:
        name = body["name"]
        mtype = body.get("machineType", "").rsplit("/", 1)[-1]
        inst = dict(body)
        inst.update(
            kind="compute#instance",
            id=str(next(self._ids)),
            zone=f"{BASE}/projects/{self.project}/zones/{zone}",
            machineType=f"{BASE}/projects/{self.project}/zones/{zone}/machineTypes/{mtype}",
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
        self, zone: str, kind: str, target: str, error: dict[str, Any] | None = None
    ) -> Answer:
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
        return 200, _public(op)

    def _launch_error(self, zone: str, body: dict[str, Any]) -> dict[str, Any] | None:
        """The error an insert's operation ends with in this zone (stockout, also of a full
        compact placement policy the body names; quota), if any."""
        named = {tuple(url.split("/")[3::2]) for url in body.get("resourcePolicies", ())}
        if zone in self.stockout_zones or named & self.full_policies:
            message = STOCKOUT_MESSAGE.format(project=self.project, zone=zone)
            return {
                "status": 503,
                "status_message": "SERVICE UNAVAILABLE",
                "error": {"code": self.stockout_code, "message": message},
            }
        if self.quota_error:
            return {
                "status": 403,
                "status_message": "FORBIDDEN",
                "error": {"code": "QUOTA_EXCEEDED", "message": self.quota_error},
            }
        return None

    def _not_found(self, m: re.Match[str]) -> Answer:
        what = f"projects/{self.project}/zones/{m['zone']}/instances/{m['name']}"
        return self.error(404, "notFound", f"The resource '{what}' was not found")

    # -- routes --------------------------------------------------------------------------
    def _aggregated_list(self, req: Request, m: re.Match[str]) -> Answer:
        flt = req.query.get("filter", [""])[0]
        items: dict[str, Any] = {}
        for (zone, _), inst in sorted(self.instances.items()):
            if _match_filter(flt, inst.get("labels", {})):
                items.setdefault(f"zones/{zone}", {"instances": []})["instances"].append(inst)
        return 200, {"kind": "compute#instanceAggregatedList", "items": items}

    def _aggregated_reservations(self, req: Request, m: re.Match[str]) -> Answer:
        """reservations.aggregatedList: every reservation of `reservations` as Compute
        Engine's Reservation shape (specificReservation count and inUseCount)."""
        items: dict[str, Any] = {}
        for (zone, name), (count, used) in sorted(self.reservations.items()):
            items.setdefault(f"zones/{zone}", {"reservations": []})["reservations"].append(
                {
                    "kind": "compute#reservation",
                    "name": name,
                    "zone": f"{BASE}/projects/{self.project}/zones/{zone}",
                    "status": "READY",
                    "specificReservationRequired": True,
                    "specificReservation": {
                        "count": str(count),
                        "inUseCount": str(used),
                        "instanceProperties": {"machineType": self.reservation_machine_type},
                    },
                }
            )
        return 200, {"kind": "compute#reservationAggregatedList", "items": items}

    def _list(self, req: Request, m: re.Match[str]) -> Answer:
        zone = m["zone"]
        return 200, {"items": [i for (z, _), i in sorted(self.instances.items()) if z == zone]}

    def _insert(self, req: Request, m: re.Match[str]) -> Answer:
        zone, body = m["zone"], req.body or {}
        rid = req.query.get("requestId", [""])[0]
        if rid and rid in self.request_ids:
            return 200, _public(self.operations[self.request_ids[rid]])
        name = body["name"]
        refused = self._refused("instance", body, zone)
        if refused is not None:
            return refused
        if (zone, name) in self.instances:
            what = f"projects/{self.project}/zones/{zone}/instances/{name}"
            return self.error(409, "alreadyExists", f"The resource '{what}' already exists")
        error = self._launch_error(zone, body)
        if error is None:
            self.instances[(zone, name)] = self._instance(zone, body)
        status, op = self._operation(zone, "insert", name, error)
        if rid:
            self.request_ids[rid] = op["name"]
        return status, op

    def _refused(self, kind: str, body: dict[str, Any], zone: str) -> Answer | None:
        """400 for a body the API's message type refuses; an unknown policy; a missing or
        used-up specific reservation. Records the body first."""
        self.inserted.append((kind, body))
        # Imported here: the root conftest imports this module in every test process.
        from google.cloud import compute_v1

        message = compute_v1.Instance if kind == "instance" else compute_v1.ResourcePolicy
        try:
            message.from_json(json.dumps(body))
        except Exception as exc:  # noqa: BLE001 - proto-plus raises ParseError and others
            return self.error(400, "invalid", f"Invalid JSON payload received. {exc}")
        if kind != "instance":
            return None
        region = zone.rsplit("-", 1)[0]
        for url in body.get("resourcePolicies", ()):
            m = re.fullmatch(r"projects/[^/]+/regions/([^/]+)/resourcePolicies/([^/]+)", url)
            if m is None or m[1] != region or (m[1], m[2]) not in self.resource_policies:
                return self.error(400, "invalid", f"The resource '{url}' was not found")
        affinity = body.get("reservationAffinity") or {}
        if affinity.get("consumeReservationType") == "SPECIFIC_RESERVATION":
            name = affinity["values"][0].rsplit("/", 1)[-1]
            held = self.reservations.get((zone, name))
            if held is None:
                return self.error(400, "invalid", f"Reservation '{name}' was not found in {zone}")
            if held[1] >= held[0]:
                message_text = STOCKOUT_MESSAGE.format(project=self.project, zone=zone)
                return self.error(503, "ZONE_RESOURCE_POOL_EXHAUSTED", message_text)
            held[1] += 1
        return None

    def _policy_get(self, req: Request, m: re.Match[str]) -> Answer:
        policy = self.resource_policies.get((m["region"], m["name"]))
        if policy is None:
            what = f"projects/{self.project}/regions/{m['region']}/resourcePolicies/{m['name']}"
            return self.error(404, "notFound", f"The resource '{what}' was not found")
        return 200, policy

    def _policy_insert(self, req: Request, m: re.Match[str]) -> Answer:
        region, body = m["region"], req.body or {}
        refused = self._refused("resourcePolicy", body, "")
        if refused is not None:
            return refused
        if (region, body["name"]) in self.resource_policies:
            return self.error(409, "alreadyExists", f"resource policy {body['name']} exists")
        self.resource_policies[(region, body["name"])] = {
            **body,
            "kind": "compute#resourcePolicy",
            "region": f"{BASE}/projects/{self.project}/regions/{region}",
            "status": "READY",
        }
        name = f"operation-{uuid.uuid4().hex}"
        op = {
            "kind": "compute#operation",
            "name": name,
            "region": f"{BASE}/projects/{self.project}/regions/{region}",
            "operationType": "insert",
            "status": "RUNNING",
            "selfLink": f"{BASE}/projects/{self.project}/regions/{region}/operations/{name}",
            "_error": None,
        }
        self.operations[name] = op
        return 200, _public(op)

    def _get(self, req: Request, m: re.Match[str]) -> Answer:
        inst = self.instances.get((m["zone"], m["name"]))
        return (200, inst) if inst else self._not_found(m)

    def _delete(self, req: Request, m: re.Match[str]) -> Answer:
        inst = self.instances.pop((m["zone"], m["name"]), None)
        if inst is None:
            return self._not_found(m)
        affinity = inst.get("reservationAffinity") or {}
        if affinity.get("consumeReservationType") == "SPECIFIC_RESERVATION":
            held = self.reservations.get((m["zone"], affinity["values"][0].rsplit("/", 1)[-1]))
            if held is not None:  # the slot is free again, as Compute Engine frees it
                held[1] = max(held[1] - 1, 0)
        return self._operation(m["zone"], "delete", m["name"])

    def _reset_vm(self, req: Request, m: re.Match[str]) -> Answer:
        """instances.reset: the same VM, restarted."""
        inst = self.instances.get((m["zone"], m["name"]))
        if inst is None:
            return self._not_found(m)
        inst["lastStartTimestamp"] = datetime.now(UTC).isoformat(timespec="milliseconds")
        return self._operation(m["zone"], "reset", m["name"])

    def _set_labels(self, req: Request, m: re.Match[str]) -> Answer:
        inst, body = self.instances.get((m["zone"], m["name"])), req.body or {}
        if inst is None:
            return self._not_found(m)
        if body.get("labelFingerprint") != inst["labelFingerprint"]:
            return self.error(
                412,
                "conditionNotMet",
                "Labels fingerprint either invalid or resource labels have changed",
            )
        inst["labels"] = body.get("labels", {})
        inst["labelFingerprint"] = uuid.uuid4().hex[:12]
        return self._operation(m["zone"], "setLabels", m["name"])

    #: instances.reportHostAsFaulty's enums (google-cloud-compute 1.57.0:
    #: InstancesReportHostAsFaultyRequest.DisruptionSchedule, ...FaultReason.Behavior).
    _SCHEDULES = frozenset({"IMMEDIATE", "FUTURE", "DISRUPTION_SCHEDULE_UNSPECIFIED"})
    _BEHAVIORS = frozenset(
        {
            "BEHAVIOR_UNSPECIFIED",
            "PERFORMANCE",
            "SILENT_DATA_CORRUPTION",
            "UNRECOVERABLE_GPU_ERROR",
            "CHIP_ERROR",
        }
    )

    def _report_host(self, req: Request, m: re.Match[str]) -> Answer:
        """instances.reportHostAsFaulty as Compute Engine documents it: disruptionSchedule
        "Required field, only allows IMMEDIATE"; faultReasons' behavior from the enum; only
        a running, reservation-bound VM (scheduling.provisioningModel RESERVATION_BOUND;
        cloud.google.com/ai-hypercomputer/docs/manage/report-faulty-host)."""
        inst, body = self.instances.get((m["zone"], m["name"])), req.body or {}
        if inst is None:
            return self._not_found(m)
        schedule = body.get("disruptionSchedule")
        reasons = body.get("faultReasons") or []
        if schedule not in self._SCHEDULES or schedule != "IMMEDIATE":
            return self.error(400, "invalid", f"Invalid value for disruptionSchedule: {schedule}")
        if not reasons or any(r.get("behavior") not in self._BEHAVIORS for r in reasons):
            return self.error(400, "invalid", "Invalid value for faultReasons[].behavior")
        # Error codes: docs.cloud.google.com/ai-hypercomputer/docs/troubleshooting/
        # troubleshoot-faulty-host-api ("Error messages").
        if inst.get("status") != "RUNNING":
            return self.error(400, "INSTANCE_SHOULD_BE_RUNNING", "The instance is not running")
        if (inst.get("scheduling") or {}).get("provisioningModel") != "RESERVATION_BOUND":
            return self.error(
                400,
                "INSTANCES_WITHOUT_RESERVATION_NOT_SUPPORTED",
                "Reporting a faulty host requires a reservation-bound VM",
            )
        rid = (req.query.get("requestId") or [""])[0]
        self.host_reports.append((m["zone"], m["name"], body, rid))
        return self._operation(m["zone"], "reportHostAsFaulty", m["name"])

    def _operation_status(self, req: Request, m: re.Match[str]) -> Answer:
        op = self.operations.get(m["op"])
        if op is None:
            return self.error(404, "notFound", f"operation {m['op']} not found")
        if self.ops_never_finish:
            return 200, _public(op)
        op["status"] = "DONE"
        op["progress"] = 100
        err = op.get("_error")
        if err:
            op["error"] = {"errors": [err["error"]]}
            op["httpErrorStatusCode"] = err["status"]
            op["httpErrorMessage"] = err["status_message"]
        return 200, _public(op)

    # -- preflight's reads (Compute Engine API v1: Project, Zone, MachineType, Image,
    # Region resources; the fields read are those the reference documents) ------------
    def _quotas(self, quotas: dict[str, tuple[float, float]]) -> list[dict[str, Any]]:
        return [{"metric": k, "limit": v[0], "usage": v[1]} for k, v in sorted(quotas.items())]

    def _project_get(self, req: Request, m: re.Match[str]) -> Answer:
        body = {"kind": "compute#project", "name": self.project, "id": "1234567890"}
        return 200, {**body, "quotas": self._quotas(self.project_quotas)}

    def _zone_get(self, req: Request, m: re.Match[str]) -> Answer:
        zone = m["zone"]
        if zone in self.missing_zones:
            return self.error(
                404,
                "notFound",
                f"The resource 'projects/{self.project}/zones/{zone}' was not found",
            )
        region = f"{BASE}/projects/{self.project}/regions/{zone.rsplit('-', 1)[0]}"
        return 200, {"kind": "compute#zone", "name": zone, "status": "UP", "region": region}

    def _machine_type_get(self, req: Request, m: re.Match[str]) -> Answer:
        zone, name = m["zone"], m["name"]
        if zone in self.missing_zones or (zone, name) in self.unoffered:
            what = f"projects/{self.project}/zones/{zone}/machineTypes/{name}"
            return self.error(404, "notFound", f"The resource '{what}' was not found")
        body: dict[str, Any] = {"kind": "compute#machineType", "name": name, "zone": zone}
        if name in MACHINE_ACCELERATORS:
            accel, count = MACHINE_ACCELERATORS[name]
            body["accelerators"] = [{"guestAcceleratorType": accel, "guestAcceleratorCount": count}]
        return 200, body

    def _image_get(self, req: Request, m: re.Match[str]) -> Answer:
        ref = f"{m['project']}/{m['rest']}"
        if ref in self.missing_images:
            what = f"projects/{m['project']}/global/images/{m['rest']}"
            return self.error(404, "notFound", f"The resource '{what}' was not found")
        name = m["rest"].removeprefix("family/")
        return 200, {"kind": "compute#image", "name": f"{name}-v20260101", "status": "READY"}

    def _region_get(self, req: Request, m: re.Match[str]) -> Answer:
        region = m["region"]
        quotas = self._quotas(self.region_quotas.get(region, {}))
        return 200, {"kind": "compute#region", "name": region, "status": "UP", "quotas": quotas}

    _INSTANCE = PROJECT_PATH + r"/zones/(?P<zone>[^/]+)/instances/(?P<name>[^/]+)"
    _OPERATION = PROJECT_PATH + r"/zones/[^/]+/operations/(?P<op>[^/]+)"
    _POLICY = PROJECT_PATH + r"/regions/(?P<region>[^/]+)/resourcePolicies/(?P<name>[^/]+)"
    _REGION_OPERATION = PROJECT_PATH + r"/regions/[^/]+/operations/(?P<op>[^/]+)"
    ROUTES: ClassVar[tuple[Route, ...]] = (
        Route("GET", PROJECT_PATH + r"/aggregated/instances", _aggregated_list),
        Route("GET", PROJECT_PATH + r"/aggregated/reservations", _aggregated_reservations),
        Route("GET", PROJECT_PATH + r"/zones/(?P<zone>[^/]+)/instances", _list),
        Route("POST", PROJECT_PATH + r"/zones/(?P<zone>[^/]+)/instances", _insert),
        Route("GET", _INSTANCE, _get),
        Route("DELETE", _INSTANCE, _delete),
        Route("POST", _INSTANCE + "/reset", _reset_vm),
        Route("POST", _INSTANCE + "/setLabels", _set_labels),
        Route("POST", _INSTANCE + "/reportHostAsFaulty", _report_host),
        Route("GET", _OPERATION, _operation_status),
        Route("POST", _OPERATION + "/wait", _operation_status),
        Route("GET", _POLICY, _policy_get),
        Route(
            "POST", PROJECT_PATH + r"/regions/(?P<region>[^/]+)/resourcePolicies", _policy_insert
        ),
        Route("GET", _REGION_OPERATION, _operation_status),
        Route("GET", PROJECT_PATH, _project_get),
        Route("GET", PROJECT_PATH + r"/zones/(?P<zone>[^/]+)", _zone_get),
        Route(
            "GET",
            PROJECT_PATH + r"/zones/(?P<zone>[^/]+)/machineTypes/(?P<name>[^/]+)",
            _machine_type_get,
        ),
        Route(
            "GET",
            r"/compute/v1/projects/(?P<project>[^/]+)/global/images/(?P<rest>(?:family/)?[^/]+)",
            _image_get,
        ),
        Route("GET", PROJECT_PATH + r"/regions/(?P<region>[^/]+)", _region_get),
        Route("POST", _REGION_OPERATION + "/wait", _operation_status),
    )


@pytest.fixture(scope="session")
def compute_server() -> Iterator[tuple[FakeCompute, str]]:
    """The fake Compute API on 127.0.0.1 for the session: (fake, endpoint URL)."""
    fake = FakeCompute()
    with serve(fake) as url:
        yield fake, url


@pytest.fixture
def fake_compute(compute_server: tuple[FakeCompute, str]) -> FakeCompute:
    """The fake Compute API, reset for this test."""
    fake, _ = compute_server
    fake.reset()
    return fake


@pytest.fixture
def compute_endpoint(compute_server: tuple[FakeCompute, str]) -> str:
    """The fake Compute API's endpoint URL (the provider's api_endpoint)."""
    return compute_server[1]

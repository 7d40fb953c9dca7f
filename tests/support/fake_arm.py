"""A local fake of the ARM REST endpoints azure-mgmt-compute / azure-mgmt-network call:
virtualMachines (list, get, PUT, PATCH, DELETE, restart), networkInterfaces (PUT, DELETE)
and disks (DELETE), in memory, on tests/support/fakehttp.py's base.

PUTs answer 200 with provisioningState Succeeded (a finished long-running operation), so
the SDK's poller ends at once. Places are "location[-zone]/vmSize" strings:

- `no_capacity`: a VM PUT is refused at once, 409 AllocationFailed;
- `fails_later`: a VM PUT is accepted (201, provisioningState Creating, an
  Azure-AsyncOperation URL), the operation answers InProgress once and then Failed with
  AllocationFailed, and the VM stays behind in provisioningState Failed. This is how ARM
  reports most allocation failures: after the fact, on the operation (ARM "Track
  asynchronous Azure operations"; Azure VM docs "Troubleshoot allocation failures").

As ARM does, a VM PUT may not move an existing VM to other zones (409
PropertyChangeNotAllowed), and a NIC still attached to a VM cannot be deleted (400
NicInUse).

Preflight's reads are served too: Resource SKUs of a location (CATALOG, less `unoffered`,
with `sku_restrictions`) and the location's vCPU usages (`usages`).

Proximity placement groups (GET, PUT) and capacity reservation groups (set up by a test in
`reservation_groups`, id -> [reserved, allocated]; GET with $expand=instanceView and the
list of their member reservations; a deleted VM frees its slot) are served too. A VM PUT body is read
with azure-mgmt-compute's own VirtualMachine model: a member the model does not know is
refused (400 InvalidRequestContent, as ARM refuses it), and so is a VM naming a proximity
placement group or capacity reservation group that does not exist; a VM beyond a
reservation group's reserved count is refused with AllocationFailed, and a VM naming a
proximity placement group in `full_ppgs` with OverconstrainedAllocationRequest. Every VM PUT body is
kept in `vm_puts` for a test to assert the exact request.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar

from azure.core.exceptions import HttpResponseError
from azure.mgmt.core.exceptions import ARMErrorFormat

from tests.support.fakehttp import Answer, FakeAPI, Request, Route

SUB = "00000000-0000-0000-0000-000000000001"
_RG = r"/subscriptions/(?P<sub>[^/]+)/resourceGroups/(?P<rg>[^/]+)/providers"
_VMS = _RG + r"/Microsoft\.Compute/virtualMachines"
_VM = _VMS + r"/(?P<name>[^/]+)"
_NIC = _RG + r"/Microsoft\.Network/networkInterfaces/(?P<name>[^/]+)"
_DISK = _RG + r"/Microsoft\.Compute/disks/(?P<name>[^/]+)"
_PPG = _RG + r"/Microsoft\.Compute/proximityPlacementGroups/(?P<name>[^/]+)"
_CRG = _RG + r"/Microsoft\.Compute/capacityReservationGroups/(?P<name>[^/]+)"
_OPERATION = (
    r"/subscriptions/(?P<sub>[^/]+)/providers/Microsoft\.Compute/locations/"
    r"(?P<loc>[^/]+)/operations/(?P<op>[^/]+)"
)
TOKEN = "fake-arm-token"
_SKUS = r"/subscriptions/(?P<sub>[^/]+)/providers/Microsoft\.Compute/skus"
_USAGES = (
    r"/subscriptions/(?P<sub>[^/]+)/providers/Microsoft\.Compute/locations/(?P<loc>[^/]+)/usages"
)

#: VM size -> (quota family, vCPUs) of the sizes tests and examples name (Azure VM sizes
#: documentation and the family names "Check vCPU quotas" lists). Composed for these tests.
CATALOG: dict[str, tuple[str, int]] = {
    "Standard_D4s_v5": ("standardDSv5Family", 4),
    "Standard_NC24ads_A100_v4": ("standardNCADSA100v4Family", 24),
    "Standard_NC4as_T4_v3": ("standardNCASv3_T4Family", 4),
    "Standard_NC8as_T4_v3": ("standardNCASv3_T4Family", 8),
    "Standard_ND96amsr_A100_v4": ("standardNDAMSv4_A100Family", 96),
    "Standard_ND96isr_H100_v5": ("standardNDSH100v5Family", 96),
    "Standard_NC80adis_H100_v5": ("standardNCadsH100v5Family", 80),
    "Standard_NV36ads_A10_v5": ("standardNVADSA10v5Family", 36),
}


def _vm_id(m: re.Match[str]) -> str:
    return (
        f"/subscriptions/{m['sub']}/resourceGroups/{m['rg']}/providers/"
        f"Microsoft.Compute/virtualMachines/{m['name']}"
    )


def _list_vms(fake: FakeARM, req: Request, m: re.Match[str]) -> Answer:
    """As ARM does, the instance view is in each VM only when the list asks for it
    ($expand=instanceView); a VM running as ARM made it shows PowerState/running."""
    rg = m["rg"].lower()
    vms = [vm for (g, _), vm in sorted(fake.vms.items()) if g == rg]
    if req.query.get("$expand") == ["instanceView"]:
        running = {
            "statuses": [{"code": "ProvisioningState/succeeded"}, {"code": "PowerState/running"}]
        }
        vms = [
            {
                **vm,
                "properties": {
                    **vm["properties"],
                    "instanceView": fake.instance_views.get((rg, vm["name"]), running),
                },
            }
            for vm in vms
        ]
    return 200, {"value": vms}


def _get_vm(fake: FakeARM, req: Request, m: re.Match[str]) -> Answer:
    vm = fake.vms.get((m["rg"].lower(), m["name"]))
    if vm is None:
        return fake.error(404, "ResourceNotFound", f"VM {m['name']} not found")
    return 200, vm


def _unknown_members(body: dict[str, Any]) -> list[str]:
    """Key paths of a VM body that azure-mgmt-compute's VirtualMachine model has no field
    for (its rest_field names, walked through the nested models it builds)."""
    from azure.mgmt.compute._utils.model_base import Model
    from azure.mgmt.compute.models import VirtualMachine

    def fields(model: Any) -> dict[str, str]:
        out: dict[str, str] = {}
        for cls in type(model).__mro__:
            for attr, desc in vars(cls).items():
                rest = getattr(desc, "_rest_name", None)
                if isinstance(rest, str):
                    out.setdefault(rest, attr)
        return out

    def walk(model: Any, raw: dict[str, Any], prefix: str) -> list[str]:
        known, bad = fields(model), []
        for key, value in raw.items():
            if key not in known:
                bad.append(f"{prefix}{key}")
                continue
            sub = getattr(model, known[key])
            if isinstance(sub, Model) and isinstance(value, dict):
                bad += walk(sub, value, f"{prefix}{key}.")
            elif isinstance(sub, list) and isinstance(value, list):
                for item, raw_item in zip(sub, value, strict=False):
                    if isinstance(item, Model) and isinstance(raw_item, dict):
                        bad += walk(item, raw_item, f"{prefix}{key}[].")
        return bad

    return walk(VirtualMachine(body), body, "")


def _placement_refused(fake: FakeARM, props: dict[str, Any]) -> Answer | None:
    ppg = (props.get("proximityPlacementGroup") or {}).get("id")
    if ppg and ppg.lower() not in fake.ppgs:
        return fake.error(400, "NotFound", f"Proximity placement group {ppg} was not found.")
    if ppg and ppg.lower() in fake.full_ppgs:
        return fake.error(
            409,
            "OverconstrainedAllocationRequest",
            "Allocation failed. VM(s) with the following constraints cannot be allocated, "
            "because the condition is too restrictive. (fake: proximity placement group full)",
        )
    crg = ((props.get("capacityReservation") or {}).get("capacityReservationGroup") or {}).get("id")
    if crg:
        held = fake.reservation_groups.get(crg.lower())
        if held is None:
            return fake.error(400, "NotFound", f"Capacity reservation group {crg} was not found.")
        if held[1] >= held[0]:
            return fake.error(409, "AllocationFailed", "Capacity reservation is fully used.")
        held[1] += 1
    return None


def _get_ppg(fake: FakeARM, req: Request, m: re.Match[str]) -> Answer:
    ppg = fake.ppgs.get(_ppg_id(m).lower())
    if ppg is None:
        return fake.error(
            404, "ResourceNotFound", f"proximity placement group {m['name']} not found"
        )
    return 200, ppg


def _put_ppg(fake: FakeARM, req: Request, m: re.Match[str]) -> Answer:
    fake.ppg_puts.append(req.body)
    ppg = {
        "id": _ppg_id(m),
        "name": m["name"],
        "type": "Microsoft.Compute/proximityPlacementGroups",
        **req.body,
    }
    fake.ppgs[_ppg_id(m).lower()] = ppg
    return 200, ppg


def _crg(fake: FakeARM, m: re.Match[str]) -> tuple[str, list[int]] | None:
    """(ARM id, [reserved, allocated]) of the capacity reservation group matched, or None."""
    gid = (
        f"/subscriptions/{m['sub']}/resourceGroups/{m['rg']}/providers/"
        f"Microsoft.Compute/capacityReservationGroups/{m['name']}"
    )
    held = fake.reservation_groups.get(gid.lower())
    return None if held is None else (gid, held)


def _no_crg(fake: FakeARM, m: re.Match[str]) -> Answer:
    return fake.error(404, "ResourceNotFound", f"capacity reservation group {m['name']} not found")


def _get_crg(fake: FakeARM, req: Request, m: re.Match[str]) -> Answer:
    """capacityReservationGroups get: with $expand=instanceView, one member reservation
    ("<group>-1") whose utilizationInfo holds the group's reserved and allocated counts."""
    found = _crg(fake, m)
    if found is None:
        return _no_crg(fake, m)
    gid, (reserved, allocated) = found
    props: dict[str, Any] = {
        "capacityReservations": [{"id": f"{gid}/capacityReservations/{m['name']}-1"}]
    }
    if req.query.get("$expand") == ["instanceView"]:
        props["instanceView"] = {
            "capacityReservations": [
                {
                    "name": f"{m['name']}-1",
                    "utilizationInfo": {
                        "currentCapacity": reserved,
                        "virtualMachinesAllocated": [
                            {"id": f"{gid}/vm{i}"} for i in range(allocated)
                        ],
                    },
                }
            ]
        }
    return 200, {"id": gid, "name": m["name"], "location": "eastus", "properties": props}


def _list_crg_members(fake: FakeARM, req: Request, m: re.Match[str]) -> Answer:
    """capacityReservations listByCapacityReservationGroup: the one member reservation,
    of sku `reservation_sku` in zone 1."""
    found = _crg(fake, m)
    if found is None:
        return _no_crg(fake, m)
    gid, (reserved, _) = found
    member = {
        "id": f"{gid}/capacityReservations/{m['name']}-1",
        "name": f"{m['name']}-1",
        "location": "eastus",
        "zones": ["1"],
        "sku": {"name": fake.reservation_sku, "capacity": reserved},
        "properties": {"provisioningState": "Succeeded"},
    }
    return 200, {"value": [member]}


def _ppg_id(m: re.Match[str]) -> str:
    return (
        f"/subscriptions/{m['sub']}/resourceGroups/{m['rg']}/providers/"
        f"Microsoft.Compute/proximityPlacementGroups/{m['name']}"
    )


def _list_skus(fake: FakeARM, req: Request, m: re.Match[str]) -> Answer:
    """Resource Skus - List, $filter "location eq 'L'": every CATALOG size offered in L in
    zones 1-3, less `unoffered`, with the restrictions of `sku_restrictions` (the
    ResourceSku shape of the Compute REST reference)."""
    found = re.fullmatch(r"location eq '([^']+)'", req.query.get("$filter", [""])[0])
    if found is None:
        return fake.error(400, "InvalidFilter", "this fake answers a location filter only")
    loc = found.group(1).lower()
    skus = []
    for size, (family, vcpus) in sorted(CATALOG.items()):
        if (loc, size) in fake.unoffered:
            continue
        skus.append(
            {
                "resourceType": "virtualMachines",
                "name": size,
                "tier": "Standard",
                "size": size.removeprefix("Standard_"),
                "family": family,
                "locations": [loc],
                "locationInfo": [{"location": loc, "zones": ["1", "2", "3"]}],
                "capabilities": [{"name": "vCPUs", "value": str(vcpus)}],
                "restrictions": fake.sku_restrictions.get((loc, size), []),
            }
        )
    return 200, {"value": skus}


def _list_usages(fake: FakeARM, req: Request, m: re.Match[str]) -> Answer:
    """Usage - List of a location: `usages[location]` as (limit, current) by quota name."""
    usages = fake.usages.get(m["loc"].lower(), {})
    return 200, {
        "value": [
            {
                "unit": "Count",
                "currentValue": int(current),
                "limit": int(limit),
                "name": {"value": name, "localizedValue": name},
            }
            for name, (limit, current) in sorted(usages.items())
        ]
    }


def _put_vm(fake: FakeARM, req: Request, m: re.Match[str]) -> Answer:
    body = req.body
    fake.vm_puts.append(body)
    unknown = _unknown_members(body)
    if unknown:
        return fake.error(400, "InvalidRequestContent", f"Could not find member {unknown[0]}")
    props = body["properties"]
    refused = _placement_refused(fake, props)
    if refused is not None:
        return refused
    zone = (body.get("zones") or [""])[0]
    size = props["hardwareProfile"]["vmSize"]
    place = f"{body['location']}{'-' + zone if zone else ''}/{size}"
    if place in fake.no_capacity:
        return fake.error(409, "AllocationFailed", "Allocation failed. (fake)")
    nic_id = props["networkProfile"]["networkInterfaces"][0]["id"]
    if nic_id.rsplit("/", 1)[1] not in fake.nics:
        return fake.error(400, "InvalidResourceReference", f"NIC {nic_id} not found")
    key = (m["rg"].lower(), m["name"])
    old = fake.vms.get(key)
    if old is not None and old.get("zones") != body.get("zones"):
        return fake.error(
            409, "PropertyChangeNotAllowed", "Changing property 'zones' is not allowed. (fake)"
        )
    later = place in fake.fails_later
    vm = {
        "id": _vm_id(m),
        "name": m["name"],
        "type": "Microsoft.Compute/virtualMachines",
        "location": body["location"],
        "tags": body.get("tags", {}),
        "properties": {
            **props,
            "provisioningState": "Creating" if later else "Succeeded",
            "timeCreated": (old or {})
            .get("properties", {})
            .get("timeCreated", datetime.now(UTC).isoformat()),
        },
    }
    if body.get("zones"):
        vm["zones"] = body["zones"]
    fake.vms[key] = vm
    if not later:
        fake.disks.add(props["storageProfile"]["osDisk"]["name"])
        return 200, vm
    op = f"op-{len(fake.operations) + 1}"
    fake.operations[op] = {"vm": key, "polls": 0}
    status_url = (
        f"http://{req.headers['Host']}/subscriptions/{m['sub']}/providers/"
        f"Microsoft.Compute/locations/{body['location']}/operations/{op}"
        "?api-version=2024-07-01"
    )
    return 201, vm, {"Azure-AsyncOperation": status_url, "Retry-After": "0"}


def _get_operation(fake: FakeARM, req: Request, m: re.Match[str]) -> Answer:
    """An asynchronous VM create of `fails_later`: InProgress once, then Failed with
    AllocationFailed, leaving the VM in provisioningState Failed."""
    op = fake.operations.get(m["op"])
    if op is None:
        return fake.error(404, "ResourceNotFound", f"operation {m['op']} not found")
    op["polls"] += 1
    if op["polls"] == 1:
        return 200, {"name": m["op"], "status": "InProgress"}, {"Retry-After": "0"}
    vm = fake.vms.get(op["vm"])
    if vm is not None:
        vm["properties"]["provisioningState"] = "Failed"
    return 200, {
        "name": m["op"],
        "status": "Failed",
        "error": {
            "code": "AllocationFailed",
            "message": "Allocation failed. We do not have sufficient capacity for the requested "
            "VM size in this region. (fake)",
        },
    }


def _patch_vm(fake: FakeARM, req: Request, m: re.Match[str]) -> Answer:
    vm = fake.vms.get((m["rg"].lower(), m["name"]))
    if vm is None:
        return fake.error(404, "ResourceNotFound", "not found")
    if "tags" in req.body:
        vm["tags"] = req.body["tags"]
    return 200, vm


def _delete_vm(fake: FakeARM, req: Request, m: re.Match[str]) -> Answer:
    vm = fake.vms.pop((m["rg"].lower(), m["name"]), None)
    if vm is None:
        return 204, None
    # deleteOption Delete: ARM removes the NIC and OS disk with the VM.
    props = vm["properties"]
    crg = ((props.get("capacityReservation") or {}).get("capacityReservationGroup") or {}).get("id")
    held = fake.reservation_groups.get(str(crg).lower())
    if held is not None:  # the VM's slot in its reservation is free again
        held[1] = max(held[1] - 1, 0)
    if props["storageProfile"]["osDisk"].get("deleteOption") == "Delete":
        fake.disks.discard(props["storageProfile"]["osDisk"]["name"])
    for nic in props["networkProfile"]["networkInterfaces"]:
        if nic.get("properties", {}).get("deleteOption") == "Delete":
            fake.nics.pop(nic["id"].rsplit("/", 1)[1], None)
    return 200, None


def _restart(fake: FakeARM, req: Request, m: re.Match[str]) -> Answer:
    if (m["rg"].lower(), m["name"]) not in fake.vms:
        return fake.error(404, "ResourceNotFound", "not found")
    fake.restarts.append(m["name"])
    return 200, None


def _put_nic(fake: FakeARM, req: Request, m: re.Match[str]) -> Answer:
    nic_id = (
        f"/subscriptions/{m['sub']}/resourceGroups/{m['rg']}/providers/"
        f"Microsoft.Network/networkInterfaces/{m['name']}"
    )
    nic = {
        "id": nic_id,
        "name": m["name"],
        "location": req.body["location"],
        "tags": req.body.get("tags", {}),
        "properties": {**req.body.get("properties", {}), "provisioningState": "Succeeded"},
    }
    fake.nics[m["name"]] = nic
    return 200, nic


def _delete_nic(fake: FakeARM, req: Request, m: re.Match[str]) -> Answer:
    for vm in fake.vms.values():
        attached = vm["properties"]["networkProfile"]["networkInterfaces"]
        if any(n["id"].rsplit("/", 1)[1] == m["name"] for n in attached):
            return fake.error(400, "NicInUse", f"NIC {m['name']} is attached to {vm['name']}")
    return (200, None) if fake.nics.pop(m["name"], None) else (204, None)


def _delete_disk(fake: FakeARM, req: Request, m: re.Match[str]) -> Answer:
    if m["name"] in fake.disks:
        fake.disks.discard(m["name"])
        return 200, None
    return 204, None


@dataclass
class FakeARM(FakeAPI):
    """Azure Resource Manager, the parts navarch's azure provider calls."""

    ROUTES: ClassVar[tuple[Route, ...]] = (
        Route("GET", _VMS, _list_vms),
        Route("GET", _VM, _get_vm),
        Route("PUT", _VM, _put_vm),
        Route("PATCH", _VM, _patch_vm),
        Route("DELETE", _VM, _delete_vm),
        Route("POST", _VM + "/restart", _restart),
        Route("PUT", _NIC, _put_nic),
        Route("DELETE", _NIC, _delete_nic),
        Route("DELETE", _DISK, _delete_disk),
        Route("GET", _OPERATION, _get_operation),
        Route("GET", _PPG, _get_ppg),
        Route("PUT", _PPG, _put_ppg),
        Route("GET", _CRG, _get_crg),
        Route("GET", _CRG + "/capacityReservations", _list_crg_members),
        Route("GET", _SKUS, _list_skus),
        Route("GET", _USAGES, _list_usages),
    )
    NO_ROUTE_CODE: ClassVar[str] = "ResourceNotFound"
    HOLD: ClassVar[tuple[str, str] | None] = ("PUT", _VM)

    vms: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    nics: dict[str, dict[str, Any]] = field(default_factory=dict)
    disks: set[str] = field(default_factory=set)
    restarts: list[str] = field(default_factory=list)
    no_capacity: set[str] = field(default_factory=set)
    fails_later: set[str] = field(default_factory=set)
    operations: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: (resource group, VM name) -> the instance view ARM answers for it (set_instance_view).
    instance_views: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    #: lower-case ARM id -> proximity placement group; PUT bodies in order.
    ppgs: dict[str, dict[str, Any]] = field(default_factory=dict)
    ppg_puts: list[dict[str, Any]] = field(default_factory=list)
    #: lower-case ARM ids of proximity placement groups with no room: a VM naming one is
    #: refused 409 OverconstrainedAllocationRequest ("Troubleshoot allocation failures").
    full_ppgs: set[str] = field(default_factory=set)
    #: lower-case ARM id of a capacity reservation group -> [reserved, allocated].
    reservation_groups: dict[str, list[int]] = field(default_factory=dict)
    vm_puts: list[dict[str, Any]] = field(default_factory=list)
    #: Preflight's reads: (location, size) not offered at all; (location, size) -> the
    #: SKU's restrictions (ResourceSkuRestrictions shape); location -> quota name ->
    #: (limit, current value).
    unoffered: set[tuple[str, str]] = field(default_factory=set)
    sku_restrictions: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)
    usages: dict[str, dict[str, tuple[float, float]]] = field(default_factory=dict)
    #: The VM size the member reservation of every reservation group holds.
    reservation_sku: str = "Standard_NC24ads_A100_v4"

    def set_instance_view(self, rg: str, name: str, view: dict[str, Any]) -> None:
        """Azure's own view of a VM (statuses with PowerState/..., vmHealth,
        maintenanceRedeployStatus), answered by a list with $expand=instanceView."""
        with self.lock:
            self.instance_views[(rg.lower(), name)] = view

    def authorize(self, request: Request) -> Answer | None:
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self.error(401, "InvalidAuthenticationToken", "bad token")
        return None

    def reset(self) -> None:
        super().reset()
        with self.lock:
            self.vms.clear()
            self.nics.clear()
            self.disks.clear()
            self.restarts.clear()
            self.no_capacity.clear()
            self.fails_later.clear()
            self.operations.clear()
            self.instance_views.clear()
            self.ppgs.clear()
            self.ppg_puts.clear()
            self.full_ppgs.clear()
            self.reservation_groups.clear()
            self.vm_puts.clear()
            self.unoffered.clear()
            self.sku_restrictions.clear()
            self.usages.clear()

    def add_foreign(self, rg: str, name: str, location: str = "eastus") -> None:
        """A VM navarch did not make (no navarch tags)."""
        self.add_vm(rg, name, location, {"owner": "someone-else"})

    def add_vm(self, rg: str, name: str, zone: str, tags: dict[str, str]) -> str:
        """A VM made outside navarch in `zone` ("eastus-1" zonal, "eastus" regional) with
        these tags -> its ARM id."""
        location, _, number = zone.rpartition("-") if zone[-1:].isdigit() else (zone, "", "")
        vm_id = (
            f"/subscriptions/{SUB}/resourceGroups/{rg}/providers/"
            f"Microsoft.Compute/virtualMachines/{name}"
        )
        vm: dict[str, Any] = {
            "id": vm_id,
            "name": name,
            "location": location,
            "tags": dict(tags),
            "properties": {
                "provisioningState": "Succeeded",
                "hardwareProfile": {"vmSize": "Standard_D4s_v5"},
                "networkProfile": {"networkInterfaces": []},
                "storageProfile": {"osDisk": {"name": f"{name}-disk"}},
            },
        }
        if number:
            vm["zones"] = [number]
        with self.lock:
            self.vms[(rg.lower(), name)] = vm
        return vm_id


def arm_error(status: int, code: str, message: str = "m") -> HttpResponseError:
    """An HttpResponseError as azure-mgmt raises it for an ARM error answer (the ARM error
    envelope {"error": {"code", "message"}}, parsed with ARMErrorFormat)."""

    class _Resp:
        status_code = status
        reason = "r"
        headers: dict[str, str] = {}
        content_type = "application/json"

        def text(self) -> str:
            return json.dumps({"error": {"code": code, "message": message}})

    return HttpResponseError(response=_Resp(), error_format=ARMErrorFormat)  # type: ignore[arg-type]

"""A local fake of the ARM REST endpoints azure-mgmt-compute / azure-mgmt-network call:
virtualMachines (list, get, PUT, PATCH, DELETE, restart), networkInterfaces (PUT, DELETE)
and disks (DELETE), in memory, on tests/support/fakehttp.py's base.

PUTs answer 200 with provisioningState Succeeded (a finished long-running operation), so
the SDK's poller ends at once. `capacity` holds (location zone-or-"", vmSize) places that
answer a VM PUT with 409 AllocationFailed (as ARM does, synchronously here).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar

from tests.support.fakehttp import Answer, FakeAPI, Request, Route

SUB = "00000000-0000-0000-0000-000000000001"
_RG = r"/subscriptions/(?P<sub>[^/]+)/resourceGroups/(?P<rg>[^/]+)/providers"
_VMS = _RG + r"/Microsoft\.Compute/virtualMachines"
_VM = _VMS + r"/(?P<name>[^/]+)"
_NIC = _RG + r"/Microsoft\.Network/networkInterfaces/(?P<name>[^/]+)"
_DISK = _RG + r"/Microsoft\.Compute/disks/(?P<name>[^/]+)"
TOKEN = "fake-arm-token"


def _vm_id(m: re.Match[str]) -> str:
    return (f"/subscriptions/{m['sub']}/resourceGroups/{m['rg']}/providers/"
            f"Microsoft.Compute/virtualMachines/{m['name']}")


def _list_vms(fake: FakeARM, req: Request, m: re.Match[str]) -> Answer:
    rg = m["rg"].lower()
    return 200, {"value": [vm for (g, _), vm in sorted(fake.vms.items()) if g == rg]}


def _get_vm(fake: FakeARM, req: Request, m: re.Match[str]) -> Answer:
    vm = fake.vms.get((m["rg"].lower(), m["name"]))
    if vm is None:
        return fake.error(404, "ResourceNotFound", f"VM {m['name']} not found")
    return 200, vm


def _put_vm(fake: FakeARM, req: Request, m: re.Match[str]) -> Answer:
    body = req.body
    props = body["properties"]
    zone = (body.get("zones") or [""])[0]
    size = props["hardwareProfile"]["vmSize"]
    if f"{body['location']}{'-' + zone if zone else ''}/{size}" in fake.no_capacity:
        return fake.error(409, "AllocationFailed", "Allocation failed. (fake)")
    nic_id = props["networkProfile"]["networkInterfaces"][0]["id"]
    if nic_id.rsplit("/", 1)[1] not in fake.nics:
        return fake.error(400, "InvalidResourceReference", f"NIC {nic_id} not found")
    key = (m["rg"].lower(), m["name"])
    old = fake.vms.get(key)
    vm = {
        "id": _vm_id(m), "name": m["name"], "type": "Microsoft.Compute/virtualMachines",
        "location": body["location"], "tags": body.get("tags", {}),
        "properties": {**props, "provisioningState": "Succeeded",
                       "timeCreated": (old or {}).get("properties", {}).get(
                           "timeCreated", datetime.now(UTC).isoformat())},
    }
    if body.get("zones"):
        vm["zones"] = body["zones"]
    fake.vms[key] = vm
    fake.disks.add(props["storageProfile"]["osDisk"]["name"])
    return 200, vm


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
    nic_id = (f"/subscriptions/{m['sub']}/resourceGroups/{m['rg']}/providers/"
              f"Microsoft.Network/networkInterfaces/{m['name']}")
    nic = {"id": nic_id, "name": m["name"], "location": req.body["location"],
           "tags": req.body.get("tags", {}),
           "properties": {**req.body.get("properties", {}), "provisioningState": "Succeeded"}}
    fake.nics[m["name"]] = nic
    return 200, nic


def _delete_nic(fake: FakeARM, req: Request, m: re.Match[str]) -> Answer:
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
    )
    NO_ROUTE_CODE: ClassVar[str] = "ResourceNotFound"
    HOLD: ClassVar[tuple[str, str] | None] = ("PUT", _VM)

    vms: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    nics: dict[str, dict[str, Any]] = field(default_factory=dict)
    disks: set[str] = field(default_factory=set)
    restarts: list[str] = field(default_factory=list)
    no_capacity: set[str] = field(default_factory=set)

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

    def add_foreign(self, rg: str, name: str, location: str = "eastus") -> None:
        """A VM navarch did not make (no navarch tags)."""
        with self.lock:
            self.vms[(rg.lower(), name)] = {
                "id": f"/subscriptions/{SUB}/resourceGroups/{rg}/providers/"
                      f"Microsoft.Compute/virtualMachines/{name}",
                "name": name, "location": location, "tags": {"owner": "someone-else"},
                "properties": {"provisioningState": "Succeeded",
                               "hardwareProfile": {"vmSize": "Standard_D4s_v5"},
                               "networkProfile": {"networkInterfaces": []},
                               "storageProfile": {"osDisk": {"name": f"{name}-disk"}}},
            }

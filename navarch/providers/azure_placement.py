"""Where an Azure launch lands inside a zone: a proximity placement group and the
capacity reservation group it draws on.

A pool's `azure:` section may declare (schemas/providers/azure.schema.json#/$defs/pool):

- proximity_placement_group: NAME (in the provider's resource group) or a full ARM id:
  every VM carries it in properties.proximityPlacementGroup; navarch creates a Standard
  group of that name in the VM's location when it does not exist, so a replacement lands
  close to the nodes it works with.
- capacity_reservation_group: NAME or a full ARM id: every VM draws on it
  (properties.capacityReservation.capacityReservationGroup).
- placement_fallback: wait | outside: when the group has no room (the VM is refused
  AllocationFailed or OverconstrainedAllocationRequest), wait (the default) backs the
  place off and says the group is full; outside launches the VM without the group, with
  a warning (navarch.providers.placement_fallback).

Sources: ARM REST reference, virtualMachines create (VirtualMachineProperties
proximityPlacementGroup, capacityReservation), proximityPlacementGroups create
(proximityPlacementGroupType Standard); azure-mgmt-compute 39.0.0 models of the same
names. Pure builders, and read_reservation_groups, which reads the groups pools draw on
(capacityReservationGroups get with $expand=instanceView, capacityReservations
listByCapacityReservationGroup; CapacityReservationUtilization currentCapacity and
virtualMachinesAllocated).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from navarch.inventory import Reservation
from navarch.providers.placement_fallback import PlacementFallback, fallback_of

__all__ = ["AzurePlacement", "placed_vm_body", "ppg_body", "read_reservation_groups", "resource_id"]


@dataclass(frozen=True)
class AzurePlacement:
    """A pool's placement settings from its `azure:` mapping (see the module docstring)."""

    proximity_placement_group: str | None = None
    capacity_reservation_group: str | None = None
    placement_fallback: PlacementFallback = PlacementFallback.WAIT

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any], *, pool: str = "") -> AzurePlacement:
        """Raises ConfigError (pools.<pool>.azure.placement_fallback) for a fallback other
        than wait or outside."""
        return cls(
            proximity_placement_group=options.get("proximity_placement_group") or None,
            capacity_reservation_group=options.get("capacity_reservation_group") or None,
            placement_fallback=fallback_of(
                options, key_path=f"pools.{pool}.azure.placement_fallback"
            ),
        )


def resource_id(subscription: str, rg: str, kind: str, name: str) -> str:
    """The ARM id of a Microsoft.Compute resource `kind` named `name` in rg; a name that
    is already an ARM id (starts with /subscriptions/) is returned as it is."""
    if name.startswith("/subscriptions/"):
        return name
    return f"/subscriptions/{subscription}/resourceGroups/{rg}/providers/Microsoft.Compute/{kind}/{name}"


def ppg_body(location: str, fleet: str) -> dict[str, Any]:
    """The proximityPlacementGroups PUT body navarch creates a missing group with."""
    return {
        "location": location,
        "tags": {"navarch-fleet": fleet},
        "properties": {"proximityPlacementGroupType": "Standard"},
    }


def placed_vm_body(
    body: dict[str, Any], placement: AzurePlacement, subscription: str, rg: str
) -> dict[str, Any]:
    """The VM PUT body (vm_body) with the pool's proximity placement group and capacity
    reservation group added (modifies and returns `body`)."""
    props = body["properties"]
    if placement.proximity_placement_group:
        props["proximityPlacementGroup"] = {
            "id": resource_id(
                subscription, rg, "proximityPlacementGroups", placement.proximity_placement_group
            )
        }
    if placement.capacity_reservation_group:
        props["capacityReservation"] = {
            "capacityReservationGroup": {
                "id": resource_id(
                    subscription,
                    rg,
                    "capacityReservationGroups",
                    placement.capacity_reservation_group,
                )
            }
        }
    return body


def _group_and_rg(named: str, rg: str) -> tuple[str, str]:
    """(resource group, group name) of a capacity reservation group named as a pool names
    it: a name in rg, or an ARM id (.../resourceGroups/RG/.../capacityReservationGroups/N)."""
    if not named.startswith("/subscriptions/"):
        return rg, named
    parts = named.strip("/").split("/")
    lower = [p.lower() for p in parts]
    return parts[lower.index("resourcegroups") + 1], parts[-1]


def read_reservation_groups(
    compute: Any, rg: str, ids: Sequence[str], provider: str
) -> list[Reservation]:
    """One Reservation per capacity reservation group a pool names (a name in rg or an
    ARM id), its id as the pool names it: reserved = the sum of its reservations'
    utilizationInfo.currentCapacity (what Azure holds, and bills), running = their
    virtualMachinesAllocated, type and zone from its reservations' sku and zones (ARM
    REST reference, capacityReservationGroups get $expand=instanceView and
    capacityReservations listByCapacityReservationGroup). compute: a
    ComputeManagementClient. Call inside azure_errors: SDK errors are left to it."""
    out: list[Reservation] = []
    for named in ids:
        group_rg, name = _group_and_rg(named, rg)
        group = compute.capacity_reservation_groups.get(group_rg, name, expand="instanceView")
        view = getattr(group.properties, "instance_view", None) if group.properties else None
        used = view.capacity_reservations if view and view.capacity_reservations else []
        total = sum(int(u.utilization_info.current_capacity or 0) for u in used)
        running = sum(len(u.utilization_info.virtual_machines_allocated or ()) for u in used)
        members = list(
            compute.capacity_reservations.list_by_capacity_reservation_group(group_rg, name)
        )
        types = sorted({str(r.sku.name) for r in members if r.sku and r.sku.name})
        zones = sorted({z for r in members for z in (r.zones or ())})
        location = str(group.location or "")
        out.append(
            Reservation(
                provider=provider,
                reservation_id=named,
                instance_type=",".join(types),
                zone=",".join(f"{location}-{z}" for z in zones) or location,
                total=total,
                available=max(total - running, 0),
            )
        )
    return out

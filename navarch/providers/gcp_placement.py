"""Where a Compute Engine launch lands inside a zone: a compact placement policy and the
reservation it consumes.

A pool's `gcp:` section may declare (schemas/providers/gcp.schema.json#/$defs/pool):

- placement_policy: NAME: every instance carries the regional resource policy NAME in
  `resourcePolicies`; navarch creates it as a compact group placement policy
  (`groupPlacementPolicy.collocation: COLLOCATED`) when it does not exist, so a
  replacement lands in the same low-latency network block as the nodes it works with.
- reservation: NAME (or projects/OTHER/reservations/NAME for a shared one): the instance
  consumes that specific reservation (`reservationAffinity` SPECIFIC_RESERVATION with key
  compute.googleapis.com/reservation-name), never on-demand capacity beside it.
- placement_fallback: wait | outside: when the policy has no room (the insert ends
  ZONE_RESOURCE_POOL_EXHAUSTED), wait (the default) backs the place off and says the
  policy is full; outside launches the instance without the policy, with a warning
  (navarch.providers.placement_fallback).

Sources: Compute Engine API v1 reference (ResourcePolicy.groupPlacementPolicy,
Instance.resourcePolicies, Instance.reservationAffinity), google-cloud-compute 1.57.0
(ResourcePolicyGroupPlacementPolicy, ReservationAffinity), the Compute Engine guides
"Compact placement policies" and "Consume reserved instances". Pure builders, and
ensure_policy, the one call that creates a missing policy, and read_reservations, the one
that reads the reservations pools consume (reservations.aggregatedList).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import compute_v1

from navarch.inventory import Reservation
from navarch.providers.placement_fallback import PlacementFallback, fallback_of

__all__ = [
    "RESERVATION_KEY",
    "GcpPlacement",
    "compact_policy",
    "ensure_policy",
    "placed_instance",
    "policy_path",
    "read_reservations",
    "to_reservation",
]

#: The reservation affinity key that names specific reservations (Compute Engine guide,
#: "Consume reserved instances").
RESERVATION_KEY = "compute.googleapis.com/reservation-name"


@dataclass(frozen=True)
class GcpPlacement:
    """A pool's placement settings from its `gcp:` mapping (see the module docstring)."""

    placement_policy: str | None = None
    reservation: str | None = None
    placement_fallback: PlacementFallback = PlacementFallback.WAIT

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any], *, pool: str = "") -> GcpPlacement:
        """Raises ConfigError (pools.<pool>.gcp.placement_fallback) for a fallback other
        than wait or outside."""
        return cls(
            placement_policy=options.get("placement_policy") or None,
            reservation=options.get("reservation") or None,
            placement_fallback=fallback_of(
                options, key_path=f"pools.{pool}.gcp.placement_fallback"
            ),
        )


def policy_path(project: str, region: str, name: str) -> str:
    """The partial URL an instance names its resource policy by."""
    return f"projects/{project}/regions/{region}/resourcePolicies/{name}"


def compact_policy(name: str, fleet: str) -> compute_v1.ResourcePolicy:
    """The resourcePolicies.insert body of a compact placement policy: COLLOCATED, no
    vmCount (Compute Engine advises against it unless the group has exactly that size)."""
    return compute_v1.ResourcePolicy(
        name=name,
        description=f"navarch fleet {fleet}: compact placement",
        group_placement_policy=compute_v1.ResourcePolicyGroupPlacementPolicy(
            collocation="COLLOCATED"
        ),
    )


def placed_instance(
    inst: compute_v1.Instance, placement: GcpPlacement, project: str, region: str
) -> compute_v1.Instance:
    """The instances.insert body with the pool's placement policy and reservation added
    (modifies and returns `inst`). A compact policy needs onHostMaintenance TERMINATE, as
    GPU machines already have (instance_resource)."""
    if placement.placement_policy:
        inst.resource_policies = [policy_path(project, region, placement.placement_policy)]
        inst.scheduling.on_host_maintenance = "TERMINATE"
    if placement.reservation:
        inst.reservation_affinity = compute_v1.ReservationAffinity(
            consume_reservation_type="SPECIFIC_RESERVATION",
            key=RESERVATION_KEY,
            values=[placement.reservation],
        )
    return inst


def ensure_policy(
    client_kwargs: Mapping[str, Any], project: str, region: str, name: str, fleet: str
) -> None:
    """Create the compact placement policy `name` in region unless it exists:
    resourcePolicies.get, on 404 resourcePolicies.insert (compact_policy) and a wait on its
    region operation. A policy made by someone else is used as it is. Call inside
    gcp_errors: SDK errors are left to it."""
    policies = compute_v1.ResourcePoliciesClient(**client_kwargs)
    try:
        policies.get(project=project, region=region, resource_policy=name)
        return
    except gexc.NotFound:
        pass
    op = policies.insert_unary(
        project=project, region=region, resource_policy_resource=compact_policy(name, fleet)
    )
    if op.status != compute_v1.Operation.Status.DONE:
        compute_v1.RegionOperationsClient(**client_kwargs).wait(
            project=project, region=region, operation=op.name
        )


def to_reservation(provider: str, named: str, raw: compute_v1.Reservation) -> Reservation:
    """One Compute Engine reservation -> Reservation, its id as the pool names it (`named`):
    specificReservation.count reserved, count - inUseCount available,
    instanceProperties.machineType its type, its zone, status lower-cased (ready,
    creating, deleting, ...). Compute Engine bills every reserved VM whether used or not
    ("Reservations of Compute Engine zonal resources")."""
    sku = raw.specific_reservation
    total = int(sku.count or 0)
    return Reservation(
        provider=provider,
        reservation_id=named,
        instance_type=str(sku.instance_properties.machine_type or "").rsplit("/", 1)[-1],
        zone=str(raw.zone or "").rsplit("/", 1)[-1],
        total=total,
        available=max(total - int(sku.in_use_count or 0), 0),
        state=str(raw.status or "").lower(),
    )


def read_reservations(
    client_kwargs: Mapping[str, Any], project: str, ids: Sequence[str], provider: str
) -> list[Reservation]:
    """The reservations pools name (NAME in `project`, or projects/OTHER/reservations/NAME
    for a shared one) -> Reservations, by one reservations.aggregatedList per project
    (every zone; Compute Engine API v1). Names not found are left out. Call inside
    gcp_errors: SDK errors are left to it."""
    wanted: dict[str, dict[str, str]] = {}
    for rid in ids:
        shared = re.fullmatch(r"projects/([^/]+)/reservations/([^/]+)", rid)
        proj, name = (shared[1], shared[2]) if shared else (project, rid)
        wanted.setdefault(proj, {})[name] = rid
    if not wanted:
        return []
    client = compute_v1.ReservationsClient(**client_kwargs)
    out: list[Reservation] = []
    for proj, names in sorted(wanted.items()):
        for _scope, scoped in client.aggregated_list(project=proj):
            out += [
                to_reservation(provider, names[r.name], r)
                for r in scoped.reservations
                if r.name in names
            ]
    return out

"""Reserved capacity as the clouds report it: one Reservation per reservation a pool names.

A provider that can read its cloud's reservations (EC2 DescribeCapacityReservations,
Compute Engine reservations.aggregatedList, Azure capacity reservation groups with their
instance view, the local provider's simulated one) offers `list_reservations(ids)`; `reservations_of` asks
every such provider for the ids the fleet's pools name and hands the planner plain data
(PlanOptions.reservations), so the planner stays pure: a Capacity Block pool launches only
inside its block and is drained before EC2 reclaims it (navarch.planner.blocks), and
`status` shows each reservation's use. The lookup is optional: a provider whose lookup
fails or is denied leaves its pools' reservations unknown for the run, with a warning
naming the permission (its `reservations_permission`), and the run goes on.

Sources: EC2 API reference, DescribeCapacityReservations (CapacityReservation:
TotalInstanceCount, AvailableInstanceCount, StartDate, EndDate, ReservationType,
State); EC2 user guide "Capacity Blocks for ML" (capacity-blocks-monitor: instances in a
block begin to terminate 30 minutes before its EndDate).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, Protocol

from navarch.errors import ProviderError
from navarch.spec import FleetSpec

__all__ = [
    "BLOCK_TERMINATION_LEAD_S",
    "Reservation",
    "ReservationReader",
    "Reserved",
    "pool_reservation",
    "reservations_of",
]

#: EC2 begins terminating a Capacity Block's instances this long before its EndDate
#: (EC2 user guide, capacity-blocks-monitor: the warning comes 40 minutes before the end,
#: termination 10 minutes later).
BLOCK_TERMINATION_LEAD_S = 1800


@dataclass(frozen=True)
class Reservation:
    """One reservation as its cloud reports it.

    reservation_id: the cloud's id (cr-..., a local name); total: instances reserved;
    available: not in use (total - running); start, end: aware UTC (None: open-ended or
    already started); capacity_block: an EC2 Capacity Block for ML (ReservationType
    capacity-block); state: the cloud's word (active, scheduled, expired, ...).
    """

    provider: str
    reservation_id: str
    instance_type: str
    zone: str
    total: int
    available: int
    start: datetime | None = None
    end: datetime | None = None
    capacity_block: bool = False
    state: str = "active"

    @property
    def running(self) -> int:
        """Instances running in the reservation now."""
        return max(self.total - self.available, 0)


class ReservationReader(Protocol):
    """A provider that can read reservations by id (an optional Provider method)."""

    def list_reservations(self, ids: Sequence[str]) -> Sequence[Reservation]: ...


def pool_reservation(options: Mapping[str, Any]) -> str | None:
    """The reservation id a placement's provider options name for reading, or None: EC2
    `capacity_reservation: cr-...` (not the open/none preferences or a resource group ARN,
    which name no single reservation), Compute Engine `reservation: NAME` (or
    projects/OTHER/reservations/NAME), Azure `capacity_reservation_group: NAME` (or its
    ARM id). Each key belongs to one provider type's schema, so none is ambiguous."""
    rid = options.get("capacity_reservation")
    if isinstance(rid, str) and rid.startswith("cr-"):
        return rid
    for key in ("reservation", "capacity_reservation_group"):
        named = options.get(key)
        if isinstance(named, str) and named:
            return named
    return None


class Reserved(NamedTuple):
    """What reservations_of read: found, the reservations by id; unknown, the ids whose
    provider's lookup failed or was denied this run (neither listed nor known absent)."""

    found: dict[str, Reservation]
    unknown: frozenset[str]


def reservations_of(
    spec: FleetSpec, providers: Mapping[str, Any], log: logging.Logger | None = None
) -> Reserved:
    """Every reservation the fleet's pools name (and every one the local provider
    simulates), by id, read from the providers that offer list_reservations. Providers
    without it are skipped: their pools' reservations are then unknown to the planner.
    A provider's mapped error (ProviderError: denied, 5xx, an unreadable answer) makes its
    ids unknown, with one warning on log naming the provider's `reservations_permission`
    (navarch.providers.optional); it never stops the run."""
    from navarch.providers.optional import OptionalLookup, warning_for

    log = log or logging.getLogger("navarch.reservations")
    wanted: dict[str, list[str]] = {}
    for pool in spec.pools:
        for pl in pool.placed():
            rid = pool_reservation(pl.options)
            if rid:
                wanted.setdefault(pl.provider, []).append(rid)
    out: dict[str, Reservation] = {}
    unknown: set[str] = set()
    for name, provider in sorted(providers.items()):
        reader = getattr(provider, "list_reservations", None)
        if reader is None:
            continue
        ids = sorted(set(wanted.get(name, ())))
        # Asked with the ids its pools name (maybe none: the local provider reports the
        # reservations it simulates whatever is asked; EC2 then makes no call).
        try:
            found = reader(ids)
        except ProviderError as exc:
            lookup = OptionalLookup(
                str(getattr(provider, "reservations_permission", "") or f"{name} reservations"),
                f"reservations {', '.join(ids)}" if ids else "reservations",
                "reservation-aware launches and Capacity Block windows",
            )
            log.warning("%s", warning_for(lookup, exc, f" ({name})"))
            unknown.update(ids)
            continue
        for r in found:
            out[r.reservation_id] = r
    return Reserved(out, frozenset(unknown))

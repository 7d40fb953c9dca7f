"""Reserved capacity left idle: the reservation_idle condition. Pure.

A reservation is paid for whether or not anything runs in it (EC2 On-Demand Capacity
Reservations and Capacity Blocks bill the reserved instances; so do GCE reservations and
Azure capacity reservation groups), so reserved capacity sitting idle is money spent for
nothing. Each run, every reservation the run read (navarch.inventory) with idle slots
(reserved less running) is remembered with the time it was first seen idle (the notifier's
state, `idle_since`); once it has been idle for the fleet's `reservation_idle_after`, it
becomes a condition, sent once, and cleared once it is used again (navarch.notify.state).
A Capacity Block before its start, and an expired or cancelled reservation, is not idle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime

from navarch.inventory import Reservation
from navarch.notify.events import Event, EventKind, make
from navarch.report.timefmt import required_ts, ts

__all__ = ["idle_conditions", "idle_key"]

#: Reservation states in which nothing can run (EC2 CapacityReservationState).
_OVER = frozenset({"expired", "cancelled", "failed", "payment-failed"})


def idle_key(reservation_id: str) -> str:
    """The condition key of a reservation's idleness ("*/<id>/reservation_idle")."""
    return f"*/{reservation_id}/{EventKind.RESERVATION_IDLE.value}"


def idle_conditions(
    fleet: str,
    reservations: Iterable[Reservation],
    idle_since: Mapping[str, str],
    now: datetime,
    idle_after_s: int,
    run_id: str = "",
) -> tuple[dict[str, Event], dict[str, str]]:
    """(conditions by key, the new idle_since: reservation id -> RFC 3339 time first seen
    idle). A reservation idle for at least idle_after_s (seconds) is a condition whose
    message says how much of it is idle and since when."""
    conditions: dict[str, Event] = {}
    since_out: dict[str, str] = {}
    for r in reservations:
        idle = r.total - r.running
        not_yet = r.start is not None and now < r.start
        if idle <= 0 or not_yet or r.state in _OVER:
            continue
        since = idle_since.get(r.reservation_id) or ""
        try:
            since_at = required_ts(since)
        except ValueError:  # first seen idle now (or an unreadable time: start again)
            since, since_at = ts(now) or "", now
        since_out[r.reservation_id] = since
        if (now - since_at).total_seconds() < idle_after_s:
            continue
        key = idle_key(r.reservation_id)
        where = " ".join(x for x in (r.provider, r.zone, r.instance_type) if x)
        event = make(
            EventKind.RESERVATION_IDLE,
            fleet,
            "*",
            None,
            f"reservation {r.reservation_id} ({where}): {idle} of {r.total} reserved "
            f"instances idle since {since}, billed but unused",
            run_id,
            reservation=r.reservation_id,
            idle=idle,
            reserved=r.total,
        )
        conditions[key] = replace(event, condition=key)
    return conditions, since_out

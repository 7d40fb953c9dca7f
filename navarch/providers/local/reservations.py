"""The local provider's simulated reservations: reserved capacity in a zone for a type.

fleet.yaml's local provider may declare `reservations: {NAME: {zone, instance_type,
count}}`; the local provider then reports each (list_reservations) the way EC2's
DescribeCapacityReservations does: reserved (count), and available = reserved less the
fleet's live machines of that type in that zone. So `navarch status` on the local
provider shows a reservation's use (reserved, running, idle but billed) with no account.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from navarch.inventory import Reservation

#: Machine states that hold a slot of a reservation (as EC2 counts pending and running).
_HOLDING = frozenset({"pending", "running"})


def local_reservations(
    provider: str, declared: Mapping[str, Mapping[str, Any]], machines: Iterable[Mapping[str, Any]]
) -> list[Reservation]:
    """Every declared reservation (by name) with its use among `machines` (machine.json
    records: zone, instance_type, state)."""
    used: dict[tuple[str, str], int] = {}
    for m in machines:
        if m.get("state") in _HOLDING:
            key = (str(m.get("zone")), str(m.get("instance_type")))
            used[key] = used.get(key, 0) + 1
    out = []
    for name, r in sorted(declared.items()):
        zone, itype, count = str(r["zone"]), str(r["instance_type"]), int(r["count"])
        running = min(used.get((zone, itype), 0), count)
        out.append(Reservation(provider, name, itype, zone, count, count - running))
    return out

"""The local provider's simulated data centre: racks of hosts per zone, so topology,
lemon hosts and same-block replacement can be seen offline. Pure.

Each zone has RACKS racks; a rack has as many hosts as it needs (h00, h01, ...), one
machine per host, as a GPU machine takes a whole host. A machine's topology is
(zone, rack, host), so its block (navarch.inventory.block_of) is zone/rack.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection

#: Racks per simulated zone: enough for several blocks, few enough that a small fleet
#: shares them (two nodes of one rack are likely with four or more nodes).
RACKS = 4


def rack_name(index: int) -> str:
    """The rack's topology level: rack-0 ... rack-3."""
    return f"rack-{index}"


def host_name(zone: str, rack: int, slot: int) -> str:
    """A host id unique across zones: <zone>-r<rack>-h<slot>, e.g. local-a-r2-h00."""
    return f"{zone}-r{rack}-h{slot:02d}"


def pick_host(
    zone: str,
    launch_id: str,
    occupied: Collection[str],
    avoid: Collection[str] = (),
    block: str = "",
) -> tuple[str, tuple[str, ...]]:
    """Where a new machine lands -> (host id, topology (zone, rack, host)).

    The rack: the one `block` names ("<zone>/rack-N") when it is in this zone, else one
    derived from the launch id (deterministic: a launch repeated with its id lands in the
    same rack). The host: the rack's lowest slot neither occupied by another machine nor
    in `avoid` (lemon hosts), so a replacement launched after its node is gone takes the
    freed host unless that host is avoided. Never fails: a rack grows as needed.
    """
    racks = {f"{zone}/{rack_name(i)}": i for i in range(RACKS)}
    rack = racks.get(block)
    if rack is None:
        rack = int(hashlib.sha256(launch_id.encode()).hexdigest()[:8], 16) % RACKS
    taken = set(occupied) | set(avoid)
    slot = 0
    while host_name(zone, rack, slot) in taken:
        slot += 1
    host = host_name(zone, rack, slot)
    return host, (zone, rack_name(rack), host)

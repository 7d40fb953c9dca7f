"""The local provider's simulated data centre: racks of hosts per zone, so topology,
lemon hosts and same-block replacement can be seen offline. Pure.

Each zone has RACKS racks; a rack has as many hosts as it needs (h00, h01, ...), one
machine per host, as a GPU machine takes a whole host. A machine's topology is
(zone, rack, host), so its block (navarch.inventory.block_of) is zone/rack.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Iterable

#: Racks per simulated zone: enough for several blocks, few enough that a small fleet
#: shares them (two nodes of one rack are likely with four or more nodes).
RACKS = 4


def rack_name(index: int) -> str:
    """The rack's topology level: rack-0 ... rack-3."""
    return f"rack-{index}"


def host_name(zone: str, rack: int, slot: int) -> str:
    """A host id unique across zones: <zone>-r<rack>-h<slot>, e.g. local-a-r2-h00."""
    return f"{zone}-r{rack}-h{slot:02d}"


class HostBook:
    """The hosts taken in one simulated cloud, kept across the launches of a run.

    take() scans a rack from its low-water mark (every slot below it is taken), so a run of
    N launches costs O(N), not a scan of the rack each: O(N^2), 37 s of 10,000 launches
    into four racks (bench/scale.py). Not thread-safe: the caller holds its lock.
    """

    def __init__(self, taken: Iterable[str] = ()) -> None:
        self._taken = set(taken)
        #: (zone, rack) -> a slot such that every lower slot of that rack is taken.
        self._floor: dict[tuple[str, int], int] = {}

    def __contains__(self, host: object) -> bool:
        return host in self._taken

    def add(self, host: str) -> None:
        """Mark a host taken (adding never breaks a low-water mark)."""
        self._taken.add(host)

    def discard(self, host: str) -> None:
        """Free a host; its rack's low-water mark drops to it when it names a slot."""
        self._taken.discard(host)
        m = _HOST_RE.match(host)
        if m is not None:
            key = (m["zone"], int(m["rack"]))
            self._floor[key] = min(self._floor.get(key, 0), int(m["slot"]))

    def take(
        self, zone: str, launch_id: str, avoid: Collection[str] = (), block: str = ""
    ) -> tuple[str, tuple[str, ...]]:
        """Where a new machine lands -> (host id, topology (zone, rack, host)), marked taken.

        The rack: the one `block` names ("<zone>/rack-N") when it is in this zone, else one
        derived from the launch id (deterministic: a launch repeated with its id lands in
        the same rack). The host: the rack's lowest slot neither taken by another machine
        nor in `avoid` (lemon hosts), so a replacement launched after its node is gone
        takes the freed host unless that host is avoided. Never fails: a rack grows as
        needed."""
        rack = _rack(zone, launch_id, block)
        floor = _free_slot(zone, rack, self._floor.get((zone, rack), 0), self._taken, ())
        self._floor[(zone, rack)] = floor
        slot = _free_slot(zone, rack, floor, self._taken, avoid)
        host, topology = _placed(zone, rack, slot)
        self._taken.add(host)
        return host, topology


#: host_name's form, read back (a zone may hold dashes: the last -r<rack>-h<slot> counts).
_HOST_RE = re.compile(r"^(?P<zone>.*)-r(?P<rack>[0-9]+)-h(?P<slot>[0-9]+)$")


def _rack(zone: str, launch_id: str, block: str) -> int:
    """The rack `block` names in this zone, else the one the launch id hashes to."""
    rack = {f"{zone}/{rack_name(i)}": i for i in range(RACKS)}.get(block)
    if rack is None:
        rack = int(hashlib.sha256(launch_id.encode()).hexdigest()[:8], 16) % RACKS
    return rack


def _free_slot(
    zone: str, rack: int, start: int, occupied: Collection[str], avoid: Collection[str]
) -> int:
    """The rack's lowest slot from `start` on that is neither occupied nor avoided."""
    slot = start
    while (h := host_name(zone, rack, slot)) in occupied or h in avoid:
        slot += 1
    return slot


def _placed(zone: str, rack: int, slot: int) -> tuple[str, tuple[str, ...]]:
    host = host_name(zone, rack, slot)
    return host, (zone, rack_name(rack), host)

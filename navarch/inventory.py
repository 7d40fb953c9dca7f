"""Observed instances as providers report them, in navarch's own terms (no SDK types).

Ownership tags (labels on GCP) that every provider sets at launch and filters on:
navarch-fleet, navarch-pool, navarch-node, navarch-launch (the launch id), and
navarch-spec (a hash of the pool's launch settings, for drift). Safety rule 1
of the design: navarch only ever touches instances carrying the fleet's tags.

Reserved capacity as the clouds report it: one Reservation per reservation a pool names.

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

import hashlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from operator import attrgetter
from typing import Any, NamedTuple, Protocol

from navarch.errors import ProviderError
from navarch.fleet.spec import FleetSpec
from navarch.report.compat import StrEnum

__all__ = [
    "BLOCK_TERMINATION_LEAD_S",
    "Reservation",
    "ReservationReader",
    "Reserved",
    "pool_reservation",
    "reservations_of",
]

TAG_FLEET = "navarch-fleet"
TAG_POOL = "navarch-pool"
TAG_NODE = "navarch-node"
TAG_LAUNCH = "navarch-launch"
TAG_SPEC = "navarch-spec"  # PoolSpec.launch_hash() at launch: drift survives a lost Memory
#: Set by `navarch adopt`: when the instance was taken under management, in whole seconds
#: since the epoch (digits: a valid GCE label value). Its boot window starts there.
TAG_ADOPTED = "navarch-adopted"
#: Every tag key with this prefix is navarch's own: set at launch, never written after it.
RESERVED_TAG_PREFIX = "navarch-"


class InstanceState(StrEnum):
    """Cloud instance state, normalised across providers.

    EC2 pending/running/stopping/stopped map one to one; shutting-down and terminated are
    not listed by providers at all (they no longer count toward capacity).
    """

    PENDING = "pending"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"


class InstanceHealth(StrEnum):
    """The cloud's own verdict on an instance, where the cloud gives one.

    ok: the cloud's checks pass; impaired: the cloud says the host or the instance is
    unreachable or failed (EC2 status checks impaired, GCE REPAIRING or a host error, Azure
    health unavailable, Lambda unhealthy); unknown: the cloud says nothing (the default for
    providers without such a status, and for EC2 while checks initialise).
    """

    OK = "ok"
    IMPAIRED = "impaired"
    UNKNOWN = "unknown"


class CloudEvent(StrEnum):
    """A disruption the cloud has scheduled for an instance (EC2 scheduled event codes,
    GCE upcoming maintenance, Azure scheduled events). Each is handled as a maintenance
    notice: the node is replaced before the deadline, within the disruption budget."""

    INSTANCE_RETIREMENT = "instance-retirement"
    INSTANCE_STOP = "instance-stop"
    INSTANCE_REBOOT = "instance-reboot"
    SYSTEM_REBOOT = "system-reboot"
    SYSTEM_MAINTENANCE = "system-maintenance"


@dataclass(frozen=True)
class CloudStatus:
    """The cloud's own view of an instance: its health verdict and any scheduled disruption.

    health: see InstanceHealth; detail: which check or status says so ("system status
    check failed", "REPAIRING"); since: when the cloud first reported it (aware UTC, None
    when the cloud does not say); event, event_deadline: a disruption the cloud scheduled
    and when it takes effect (None: none, or unknown).
    """

    health: InstanceHealth = InstanceHealth.UNKNOWN
    detail: str = ""
    since: datetime | None = None
    event: CloudEvent | None = None
    event_deadline: datetime | None = None

    @property
    def impaired(self) -> bool:
        return self.health is InstanceHealth.IMPAIRED


#: What a provider without a status of its own reports: nothing known.
NO_CLOUD_STATUS = CloudStatus()


@dataclass(frozen=True)
class Instance:
    """One cloud VM as a provider lists it.

    tags: sorted (key, value) pairs; owned instances carry the navarch-* tags.
    launched_at: aware UTC datetime.
    """

    provider: str
    instance_id: str
    zone: str
    instance_type: str
    state: InstanceState
    launched_at: datetime
    tags: tuple[tuple[str, str], ...] = ()
    spot: bool = False
    address: str | None = None
    #: The physical host where the cloud exposes it (EC2 Dedicated Hosts' Placement.HostId;
    #: Compute Engine and Lambda Cloud expose none): lemon faults are counted per host too.
    host_id: str | None = None
    #: The cloud's own status of the instance (health checks, scheduled disruption).
    cloud_status: CloudStatus = NO_CLOUD_STATUS

    #: Derived from tags once, at construction: a run reads them several times for every
    #: instance (ownership, pools, views), and functools.cached_property takes a lock on
    #: every read before Python 3.12 (about 2 us each, a second at 100,000 nodes).
    fleet: str | None = field(init=False, repr=False, compare=False)
    pool: str | None = field(init=False, repr=False, compare=False)
    node: str | None = field(init=False, repr=False, compare=False)
    _tag_map: dict[str, str] = field(init=False, repr=False, compare=False)
    #: The node's place in the cloud's network fabric, coarse to fine, where the cloud
    #: reports it: Compute Engine resourceStatus.physicalHostTopology (cluster, block,
    #: subblock, host), EC2 DescribeInstanceTopology NetworkNodes (top of the tree first),
    #: the local provider's simulated (zone, rack, host). Empty: the cloud says nothing.
    topology: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # The first pair of a duplicated key wins, as a scan of the tags would.
        tag_map: dict[str, str] = {}
        for k, v in self.tags:
            tag_map.setdefault(k, v)
        object.__setattr__(self, "_tag_map", tag_map)
        object.__setattr__(self, "fleet", tag_map.get(TAG_FLEET))
        object.__setattr__(self, "pool", tag_map.get(TAG_POOL))
        object.__setattr__(self, "node", tag_map.get(TAG_NODE))

    def tag(self, key: str) -> str | None:
        return self._tag_map.get(key)

    @cached_property
    def _digest_line(self) -> bytes:
        # The cloud's verdict changes plans, so a saved plan goes stale when it changes;
        # the default adds nothing, so fingerprints of providers without it stay as they were.
        cs = self.cloud_status
        cloud = (
            ""
            if not cs.impaired and cs.event is None
            else f"|{cs.health.value}|{cs.event.value if cs.event else ''}"
        )
        return (
            f"{self.provider}|{self.instance_id}|{self.state.value}|{self.tags}{cloud}\n".encode()
        )

    @property
    def launch_id(self) -> str | None:
        return self.tag(TAG_LAUNCH)

    @property
    def block(self) -> str:
        """The topology block the node sits in: its first TOPOLOGY_BLOCK_LEVELS levels
        joined by "/" (Compute Engine cluster/block, the top two EC2 network nodes, the
        local provider's zone/rack); "" when the cloud reports no topology."""
        return block_of(self.topology)


#: How many levels of a topology, from the coarsest, make its block: Compute Engine's
#: block sits under its cluster ("Instances within the same block experience low network
#: latency", Compute Engine API, Instance.resourceStatus.physicalHostTopology); an EC2
#: node's first two network nodes are the spine and the layer under it (DescribeInstanceTopology).
TOPOLOGY_BLOCK_LEVELS = 2


def block_of(topology: tuple[str, ...]) -> str:
    """A topology's block (see TOPOLOGY_BLOCK_LEVELS) as one string, "" for no topology."""
    return "/".join(topology[:TOPOLOGY_BLOCK_LEVELS])


def adopted_at(inst: Instance) -> datetime | None:
    """When `navarch adopt` took the instance under management (its TAG_ADOPTED tag), as
    an aware UTC datetime; None for an instance navarch launched or an unreadable tag."""
    text = inst.tag(TAG_ADOPTED)
    if text is None or not text.isdigit():
        return None
    return datetime.fromtimestamp(int(text), UTC)


def ownership_tags(fleet: str, pool: str, node: str, launch_id: str) -> dict[str, str]:
    """The tags navarch puts on every instance (and its volumes) it launches."""
    return {TAG_FLEET: fleet, TAG_POOL: pool, TAG_NODE: node, TAG_LAUNCH: launch_id}


def launch_id(fleet: str, node: str, attempt: int) -> str:
    """Deterministic launch id for (fleet, node, attempt): 32 lower-case hex characters.

    Used as the EC2 ClientToken (<= 64 ASCII chars, EC2 RunInstances idempotency), the GCP
    request id seed, and the navarch-launch tag, so a run killed between launch and state
    write finds its own instance on the next run instead of launching a second one.
    """
    digest = hashlib.sha256(f"navarch:{fleet}:{node}:{attempt}".encode()).hexdigest()
    return digest[:32]


def fingerprint(instances: Iterable[Instance]) -> str:
    """A stable digest of an inventory (ids, states, tags) for saved-plan staleness checks."""
    h = hashlib.sha256()
    for inst in sorted(instances, key=attrgetter("provider", "instance_id")):
        h.update(inst._digest_line)
    return h.hexdigest()[:16]


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

    log = log or logging.getLogger("navarch.inventory")
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

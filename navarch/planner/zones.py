"""Which zone a pool's next node goes to, and which zone a scale-down takes from. Pure.

A pool declares its zones per placement in fallback order; `zone_policy` says how its
nodes sit across them:

- spread (the default): each provision tries the zone of its placement that holds the
  fewest of the pool's nodes first, so the zones never differ by more than one node
  once a run converges; scale-down takes from the fullest zone. This is an EC2 Auto
  Scaling group's Availability Zone balancing ("Auto Scaling benefits: instance
  distribution", AWS Auto Scaling user guide), the same rule one node at a time.
- pack: each provision tries the zone that already holds the most nodes first, and
  scale-down takes from the emptiest, so the pool gathers in one zone and moves on only
  when that zone has no capacity.

Either way a replacement tries the zone of the node it replaces first (its jobs, volumes
and neighbours are there), placements keep their declared order (zones only move within
one placement), and instance types and spot modes keep their fallback order: only the
zones of each run of places sharing placement, type and capacity are reordered. A place
keeps its `attempt` number, so launch ids stay stable whatever the order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from navarch.fleet.spec import PoolSpec, ZonePolicy
from navarch.planner.model import NodeView, Place

#: (provider name, zone): a zone is counted per provider, so two clouds' "a" zones differ.
ZoneKey = tuple[str, str]


def zone_counts(views: Iterable[NodeView]) -> Counter[ZoneKey]:
    """How many of these nodes sit in each (provider, zone), from their listed instances;
    a node without an instance (not listed this run) counts nowhere."""
    return Counter((v.instance.provider, v.instance.zone) for v in views if v.instance)


def zone_of(view: NodeView | None) -> ZoneKey | None:
    """The (provider, zone) a node's instance sits in, None when it is not listed."""
    if view is None or view.instance is None:
        return None
    return (view.instance.provider, view.instance.zone)


def order_places(
    pool: PoolSpec,
    places: Sequence[Place],
    counts: Counter[ZoneKey],
    prefer: ZoneKey | None = None,
) -> tuple[Place, ...]:
    """The places of one provision in the order it tries them, by the pool's zone_policy.

    places: the pool's open places in fallback order (capacity.open_places); counts: the
    pool's nodes per (provider, zone) that stay, this plan's earlier provisions included;
    prefer: the zone of the node this provision replaces (tried first in each run), or
    None. Each maximal run of consecutive places sharing (placement, instance_type, spot)
    is stably reordered: the preferred zone, then the fewest nodes first (spread) or the
    most first (pack); ties keep declared order. Other places never move.
    """
    placed = pool.placed()
    sign = 1 if pool.zone_policy is ZonePolicy.SPREAD else -1

    def rank(p: Place) -> tuple[bool, int]:
        key = (placed[p.placement].provider, p.zone)
        return (key != prefer, sign * counts[key])

    out: list[Place] = []
    run: list[Place] = []
    for p in places:
        if run and (run[0].placement, run[0].instance_type, run[0].spot) != (
            p.placement,
            p.instance_type,
            p.spot,
        ):
            out += sorted(run, key=rank)
            run = []
        run.append(p)
    out += sorted(run, key=rank)
    return tuple(out)


def plan_places(
    pool: PoolSpec,
    places: Sequence[Place],
    present: Iterable[NodeView],
    prefers: Sequence[ZoneKey | None],
) -> tuple[tuple[Place, ...], ...]:
    """The place order of each provision one plan makes for a pool, in plan order.

    present: the pool's nodes that stay (counted per zone); prefers: per provision, the
    zone of the node it replaces or None. Each provision is counted in the zone it tries
    first before the next is ordered, so three new nodes over two empty zones go a, b, a.
    A launch that falls over to another zone is seen by the next run's counts.
    """
    counts = zone_counts(present)
    placed = pool.placed()
    out: list[tuple[Place, ...]] = []
    for prefer in prefers:
        order = order_places(pool, places, counts, prefer)
        if order:
            counts[(placed[order[0].placement].provider, order[0].zone)] += 1
        out.append(order)
    return tuple(out)


def take_for_scale_down(
    pool: PoolSpec,
    ordered: Sequence[NodeView],
    present: Iterable[NodeView],
    first: Callable[[NodeView], Any],
    n: int,
) -> list[NodeView]:
    """The first n nodes of `ordered` (ready nodes in the order they leave) to take, so
    zones stay balanced.

    first: the key of what must leave before any zone rule (drifted, recently faulted
    nodes); among equals a spread pool takes from the zone holding the most of `present`
    (pack: the fewest), recounted after each pick, then keeps `ordered`'s order. Returns at
    most n nodes, in the order they leave. O(n * len(ordered)): n is a scale-down's excess.
    """
    counts = zone_counts(present)
    sign = -1 if pool.zone_policy is ZonePolicy.SPREAD else 1
    firsts = [first(v) for v in ordered]
    left = list(range(len(ordered)))
    out: list[NodeView] = []
    while left and len(out) < n:
        pick = min(
            left, key=lambda i: (firsts[i], sign * counts[zone_of(ordered[i]) or ("", "")], i)
        )
        left.remove(pick)
        key = zone_of(ordered[pick])
        if key is not None:
            counts[key] -= 1
        out.append(ordered[pick])
    return out


def rebalance_order(
    pool: PoolSpec, places: Sequence[Place], present: Iterable[NodeView]
) -> tuple[tuple[Place, ...], str] | None:
    """(place order, why) of one extra node that evens a spread pool's zones, or None.

    When the zones of the placement launched into first differ by more than one node
    (a fault or a capacity fallback during a scale-down can leave them so), one node is
    launched in the emptiest zone first, and the scale-down that follows takes from the
    fullest (an EC2 Auto Scaling group's AZRebalance: launch before terminate). None for a
    pack pool, for zones within one, or when the emptiest zone is in capacity backoff
    (launching elsewhere would not even them); the order holds only that zone's places.
    """
    if pool.zone_policy is not ZonePolicy.SPREAD or not places:
        return None
    placed = pool.placed()[places[0].placement]
    keys = [(placed.provider, z) for z in placed.zones]
    counts = zone_counts(present)
    if max(counts[k] for k in keys) - min(counts[k] for k in keys) <= 1:
        return None
    order = order_places(pool, places, counts)
    first = (placed.provider, order[0].zone)
    if counts[first] != min(counts[k] for k in keys):
        return None
    spread = ", ".join(f"{z} {counts[(placed.provider, z)]}" for z in placed.zones)
    # Only the emptiest zone: a fallback into a fuller zone would not even them, and the
    # scale-down after it would take that very node (a launch-and-terminate loop).
    only = tuple(p for p in order if p.placement == order[0].placement and p.zone == order[0].zone)
    return only, f"zones uneven ({spread}): one more node first, then scale-down evens them"

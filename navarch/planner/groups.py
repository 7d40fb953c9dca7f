"""The placement group a pool's placement launches into, as the plan names it. Pure.

A placement group keeps a pool's nodes in one low-latency network fabric: EC2
`aws.placement_group` (a cluster placement group), Compute Engine `gcp.placement_policy`
(a compact resource policy) and Azure `azure.proximity_placement_group`. The provider
launches into it; the planner only names it, so a plan held back for capacity says that
the group may be what is full, and which fallback the pool chose.
"""

from __future__ import annotations

from navarch.fleet.spec import Placement

#: The provider section key naming the group, per provider type, and what the cloud calls it.
GROUP_KEYS = (
    ("aws", "placement_group", "placement group"),
    ("gcp", "placement_policy", "placement policy"),
    ("azure", "proximity_placement_group", "proximity placement group"),
)


def group_of(placement: Placement) -> str:
    """The placement's group for humans, e.g. "placement group pg-train (placement_fallback:
    wait)", or "" when it declares none. Reads the provider options (placement.options),
    keyed as GROUP_KEYS says; the fallback defaults to wait."""
    for ptype, key, called in GROUP_KEYS:
        if placement.provider_type != ptype:
            continue
        name = placement.options.get(key)
        if name:
            fallback = placement.options.get("placement_fallback", "wait")
            return f"{called} {name} (placement_fallback: {fallback})"
    return ""

"""fleet.yaml placement groups that EC2 would refuse: checked when the fleet file loads.

navarch creates a pool's `aws.placement_group` with strategy `cluster` when it is missing
(navarch.providers.aws_placement.ensure_group), and "a cluster placement group is a logical
grouping of instances within a single Availability Zone" (EC2 API reference,
CreatePlacementGroup; the EC2 User Guide's "Placement strategies"); EC2 Auto Scaling adds
"You cannot specify multiple Availability Zones and a cluster placement group"
(CreateAutoScalingGroup PlacementGroup). A group named for several zones would launch in
its first zone and fail in every other, so the file is refused instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from navarch.errors import ConfigError
from navarch.fleet.schemas import dotted

__all__ = ["check_placement_groups"]

_Fail = Callable[[tuple[Any, ...], str, str], ConfigError]


def _entries(name: str, raw: Mapping[str, Any]) -> list[tuple[tuple[Any, ...], Mapping[str, Any]]]:
    """A pool's placements with their key paths: its placements: list, or the pool itself."""
    if "placements" in raw:
        return [(("pools", name, "placements", i), e) for i, e in enumerate(raw["placements"])]
    return [(("pools", name), raw)]


def check_placement_groups(
    pools: Mapping[str, Mapping[str, Any]], providers: Mapping[str, Any], fail: _Fail
) -> None:
    """Refuse an AWS placement_group whose placements span more than one zone.

    pools: fleet.yaml's pools (schema-valid mappings); providers: its providers. Raises
    the ConfigError fail() builds at <placement>.aws.placement_group when one placement
    names several zones, or when two placements (of any pool, same provider) share the
    group name in different zones. Other providers' groups are not checked here.
    """
    seen: dict[tuple[str, str], tuple[str, tuple[Any, ...]]] = {}
    for name, raw in pools.items():
        for path, e in _entries(name, raw):
            provider = e.get("provider", "")
            group = e.get("aws", {}).get("placement_group")
            if not group or providers.get(provider, {}).get("type") != "aws":
                continue
            where = path + ("aws", "placement_group")
            zones = list(dict.fromkeys(e.get("zones", ())))
            if len(zones) > 1:
                raise fail(
                    where,
                    f"placement group {group} is a cluster placement group, which EC2 keeps "
                    f"in a single Availability Zone, but this placement lists {len(zones)} "
                    f"zones ({', '.join(zones)}): launches outside the first zone would fail",
                    "list one zone here, or split the zones into placements: entries, each "
                    "with its own placement_group (or none)",
                )
            if not zones:
                continue
            first = seen.setdefault((provider, group), (zones[0], where))
            if first[0] != zones[0]:
                other = dotted(first[1][:-2])
                raise fail(
                    where,
                    f"placement group {group} is already used in zone {first[0]} (by {other}); "
                    f"a cluster placement group lies in a single Availability Zone, so a "
                    f"launch in {zones[0]} would fail",
                    "give this placement its own placement_group name",
                )

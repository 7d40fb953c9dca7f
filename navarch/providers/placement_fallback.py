"""What a launch into a full placement group does, the same on every cloud.

A pool's provider section names its group (EC2 `placement_group`, Compute Engine
`placement_policy`, Azure `proximity_placement_group`) and may set `placement_fallback`:

- `wait` (the default): the launch fails with a CapacityError naming the group, so the
  executor backs the place off as for any capacity error, the outcome says the group has
  no room, and the plan's capacity halt says the group may be what is full
  (navarch.planner.groups);
- `outside`: a warning names the group and the node launches again without it, so it has
  capacity but not the group's low-latency network.

The cloud's answer for a full group is its ordinary insufficient-capacity error (EC2
InsufficientInstanceCapacity, EC2 API "Error codes"; Compute Engine
ZONE_RESOURCE_POOL_EXHAUSTED for a compact policy, "Troubleshooting resource availability
errors"; Azure AllocationFailed / OverconstrainedAllocationRequest for a proximity
placement group, "Troubleshoot allocation failures"), which each provider maps to
CapacityError at its one error boundary before this module sees it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TypeVar

from navarch.errors import CapacityError, ConfigError
from navarch.report.compat import StrEnum

__all__ = ["PlacementFallback", "fallback_of", "launch_with_fallback"]

T = TypeVar("T")


class PlacementFallback(StrEnum):
    """What a launch does when its placement group has no room: ``wait`` for room (the
    place backs off, the plan says so), or launch ``outside`` the group with a warning."""

    WAIT = "wait"
    OUTSIDE = "outside"


def fallback_of(options: Mapping[str, object], *, key_path: str) -> PlacementFallback:
    """The pool's placement_fallback from its provider options (default wait).

    Raises ConfigError naming key_path (e.g. pools.train.gcp.placement_fallback) for a
    value other than wait or outside."""
    value = str(options.get("placement_fallback", PlacementFallback.WAIT.value))
    try:
        return PlacementFallback(value)
    except ValueError:
        raise ConfigError(
            f"placement_fallback {value!r} is not wait or outside",
            key_path=key_path,
            hint="set placement_fallback: wait (the default) or outside",
        ) from None


def launch_with_fallback(
    launch: Callable[[], T],
    outside: Callable[[], T],
    *,
    group: str,
    fallback: PlacementFallback,
    where: str,
    log: logging.Logger,
) -> T:
    """launch() -> its result; when it raises CapacityError, the group may be full.

    group: how the cloud calls the group and its name ("placement policy train-compact"),
    "" when the launch names none (the error leaves as it is). With fallback wait a
    CapacityError naming the group is raised (same code and scope); with outside a
    warning naming the group and `where` (type and zone) is logged and outside() runs,
    the same launch without the group. Other errors leave as they are.
    """
    try:
        return launch()
    except CapacityError as exc:
        if not group:
            raise
        if fallback is PlacementFallback.WAIT:
            raise CapacityError(
                f"{group} has no room: {exc} (placement_fallback: wait keeps launches in "
                "the group; outside launches beside it)",
                code=exc.code,
                scope=exc.scope,
            ) from exc
        log.warning(
            "%s has no room for %s: launching outside it (placement_fallback: outside), "
            "without its low-latency network",
            group,
            where,
        )
        return outside()

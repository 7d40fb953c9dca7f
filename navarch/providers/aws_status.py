"""EC2's own view of an instance: DescribeInstanceStatus entries as CloudStatus.

Kept apart from navarch.providers.aws (launch, list, terminate) so the status rules have
one home. Pure: no SDK call.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from navarch.inventory import CloudEvent, CloudStatus, InstanceHealth

__all__ = ["aware_utc", "cloud_status_of"]


def aware_utc(value: Any) -> datetime:
    """An EC2 timestamp (datetime or ISO 8601 text) as an aware UTC datetime."""
    if isinstance(value, datetime):
        return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).astimezone(UTC)


#: EC2 status check names as DescribeInstanceStatus reports them, and what a failure means.
_CHECKS = (
    ("SystemStatus", "system status check failed"),
    ("InstanceStatus", "instance status check failed"),
)
#: An event EC2 has finished or called off keeps its code; its description says so.
_DONE_EVENT_PREFIXES = ("[Completed]", "[Canceled]")


def cloud_status_of(raw: Mapping[str, Any]) -> CloudStatus:
    """One DescribeInstanceStatus entry -> CloudStatus.

    impaired when the system or the instance status check is "impaired" (detail names
    which; since: the earliest ImpairedSince of a failed check); ok when both are "ok";
    unknown otherwise (initializing, insufficient-data, not-applicable). event: the first
    scheduled event not marked [Completed] or [Canceled] whose code navarch knows, with
    NotBefore as its deadline. Source: EC2 API reference, DescribeInstanceStatus,
    InstanceStatusSummary, InstanceStatusEvent (codes instance-reboot, system-reboot,
    system-maintenance, instance-retirement, instance-stop).
    """
    failed = [
        (what, raw.get(key) or {})
        for key, what in _CHECKS
        if (raw.get(key) or {}).get("Status") == "impaired"
    ]
    since = [
        aware_utc(d["ImpairedSince"])
        for _, summary in failed
        for d in summary.get("Details", ())
        if d.get("ImpairedSince")
    ]
    if failed:
        health = InstanceHealth.IMPAIRED
    elif all((raw.get(key) or {}).get("Status") == "ok" for key, _ in _CHECKS):
        health = InstanceHealth.OK
    else:
        health = InstanceHealth.UNKNOWN
    event, deadline = None, None
    known = {e.value: e for e in CloudEvent}
    for ev in raw.get("Events", ()):
        if ev.get("Code") in known and not str(ev.get("Description", "")).startswith(
            _DONE_EVENT_PREFIXES
        ):
            event = known[ev["Code"]]
            deadline = aware_utc(ev["NotBefore"]) if ev.get("NotBefore") else None
            break
    return CloudStatus(
        health,
        "; ".join(what for what, _ in failed),
        since=min(since) if since else None,
        event=event,
        event_deadline=deadline,
    )

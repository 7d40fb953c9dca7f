"""This boot's latched XID / SXid events as the agent state keeps them: trimmed so a flood
of application XIDs never drops a fatal one, and encoded to and from JSON
(navarch.agent.runner latches them; navarch.agent.state stores them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from navarch.agent import kernel_log as kl
from navarch.report.compat import UTC
from navarch.report.health import Remedy
from navarch.report.xid import Severity, XidInfo

__all__ = ["trim_events", "event_to_json", "event_from_json"]


def trim_events(events: Sequence[kl.XidEvent], limit: int = 256) -> list[kl.XidEvent]:
    """At most ``limit`` events in their original order, never dropping a fatal one for a
    lesser one: all fatal events (the latest if they alone exceed the limit), then the
    latest of the others. Keeps latching sound when application XIDs flood a boot.
    """
    if len(events) <= limit:
        return list(events)
    fatal = [n for n, e in enumerate(events) if e.severity is Severity.FATAL][-limit:]
    rest = [n for n, e in enumerate(events) if e.severity is not Severity.FATAL]
    keep = set(fatal) | set(rest[len(rest) - (limit - len(fatal)) :] if limit > len(fatal) else [])
    return [e for n, e in enumerate(events) if n in keep]


def event_to_json(ev: kl.XidEvent, boot_id: str) -> dict[str, Any]:
    """One latched event as the agent state keeps it (``event_from_json`` reads it back)."""
    return {
        "kind": ev.kind,
        "code": ev.code,
        "pci_bus_id": ev.pci_bus_id,
        "time": _iso(ev.time) if ev.time else None,
        "uptime_s": ev.uptime_s,
        "boot_id": ev.boot_id or boot_id,
        "message": ev.message,
        "count": ev.count,
        "uuid": ev.uuid,
        "subcode": ev.subcode,
        "mnemonic": ev.info.mnemonic,
        "severity": ev.info.severity.value,
        "action": ev.info.action.value,
        "reboot_fixable": ev.info.reboot_fixable,
    }


def event_from_json(doc: Mapping[str, Any]) -> kl.XidEvent:
    """Inverse of ``event_to_json``; raises KeyError / ValueError on a malformed event."""
    info = XidInfo(
        code=int(doc["code"]),
        mnemonic=str(doc.get("mnemonic", "")),
        meaning="",
        severity=Severity(doc["severity"]),
        action=Remedy(doc["action"]),
        reboot_fixable=bool(doc.get("reboot_fixable", False)),
        kind=str(doc.get("kind", "xid")),
    )
    t = doc.get("time")
    return kl.XidEvent(
        kind=info.kind,
        code=info.code,
        pci_bus_id=str(doc["pci_bus_id"]),
        message=str(doc.get("message", "")),
        info=info,
        time=datetime.fromisoformat(t.replace("Z", "+00:00")) if t else None,
        uptime_s=doc.get("uptime_s"),
        boot_id=doc.get("boot_id"),
        uuid=doc.get("uuid"),
        subcode=doc.get("subcode"),
        count=int(doc.get("count", 1)),
    )


def _iso(dt: datetime) -> str:
    return dt.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")

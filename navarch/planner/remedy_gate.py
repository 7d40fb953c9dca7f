"""When the remediation table says to wait before a faulty node leaves service. Pure.

The repair stage asks ``gate`` before it cordons an unhealthy node for a fault: the row
of navarch.remedies that decides the fault's kind may say to report it only (``alert``),
to wait ``wait_s`` after the agent first saw it, or to wait for ``occurrences``
observations of it (the agent's consecutive checks, or distinct unhealthy reports,
whichever is more). The ladder reads the rest of the row (navarch.planner.ladder).
"""

from __future__ import annotations

from navarch.durations import format_duration_s
from navarch.health import Status
from navarch.planner.context import PoolContext
from navarch.planner.model import Lifecycle, NodeView
from navarch.remedies import row_for

__all__ = ["gate"]


def gate(ctx: PoolContext, v: NodeView) -> str | None:
    """Why unhealthy node v is not cordoned yet by its fault's remediation table row (a
    pending line), or None when nothing in the row holds it (or no row, or no fault
    key: unhealthy without a structured fault, offline, impaired)."""
    s = v.summary
    if (
        v.lifecycle is not Lifecycle.UNHEALTHY
        or v.impaired
        or s is None
        or s.status is not Status.UNHEALTHY
        or s.fault_key is None
    ):
        return None
    kind = s.fault_key.kind
    row = row_for(ctx.pool.health.remedies, kind)
    if row is None:
        return None
    where = f"health.remedies row {row.match}"
    if row.alert:
        return f"{v.node}: {kind}: alert only ({where}); not cordoned"
    seen = max(v.streak, s.consecutive)
    if seen < row.occurrences:
        return f"{v.node}: {kind} seen {seen} of {row.occurrences} times before acting ({where})"
    if row.wait_s and s.first_seen is not None:
        waited_s = (ctx.now - s.first_seen).total_seconds()
        if waited_s < row.wait_s:
            return (
                f"{v.node}: {kind} first seen {format_duration_s(waited_s)} ago; acted on "
                f"after {format_duration_s(row.wait_s)} ({where})"
            )
    return None

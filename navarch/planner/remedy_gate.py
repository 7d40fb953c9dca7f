"""When the remediation table says to wait before a faulty node leaves service. Pure.

The repair stage asks ``gate`` before it cordons an unhealthy node for a fault: the row
of navarch.fleet.remedies that decides the fault's kind may say to report it only (``alert``),
to wait ``wait_s`` after the agent first saw it, or to wait for ``occurrences``
observations of it (the agent's consecutive checks, or distinct unhealthy reports,
whichever is more). The ladder reads the rest of the row (navarch.planner.ladder).
"""

from __future__ import annotations

from collections.abc import Iterable

from navarch.fleet.durations import format_duration_s
from navarch.fleet.remedies import RemedyRow, row_for
from navarch.fleet.spec import FleetSpec, PoolSpec
from navarch.planner.context import PoolContext
from navarch.planner.model import Lifecycle, NodeView
from navarch.report.health import Status

__all__ = ["alert_only", "alert_only_nodes", "gate"]


def _faulted_row(remedies: tuple[RemedyRow, ...], v: NodeView) -> RemedyRow | None:
    """The remediation table row that decides unhealthy node v's fault, or None (not
    unhealthy by a report with a structured fault key, impaired, or no row)."""
    s = v.summary
    if (
        v.lifecycle is not Lifecycle.UNHEALTHY
        or v.impaired
        or s is None
        or s.status is not Status.UNHEALTHY
        or s.fault_key is None
    ):
        return None
    return row_for(remedies, s.fault_key.kind)


def alert_only(pool: PoolSpec, v: NodeView) -> bool:
    """Whether node v of `pool` is unhealthy only by a fault its remediation table row
    reports and never acts on (``alert``: "report only, never cordon"). Such a node gates
    nothing: the circuit breaker does not count it and it makes no topology block faulted,
    since a fault the operator chose not to act on must not hold another node's repair."""
    row = _faulted_row(pool.health.remedies, v)
    return row is not None and row.alert


def alert_only_nodes(spec: FleetSpec, views: Iterable[NodeView]) -> frozenset[str]:
    """Names of the nodes of `views` that are ``alert_only`` by their pool's table (nodes of
    a pool no longer declared have none)."""
    pools = {p.name: p for p in spec.pools}
    return frozenset(v.node for v in views if v.pool in pools and alert_only(pools[v.pool], v))


def gate(ctx: PoolContext, v: NodeView) -> str | None:
    """Why unhealthy node v is not cordoned yet by its fault's remediation table row (a
    pending line), or None when nothing in the row holds it (or no row, or no fault
    key: unhealthy without a structured fault, offline, impaired). A node in
    ctx.options.mode_held is held by the row's mode (navarch.planner.modes.row_held)."""
    row = _faulted_row(ctx.pool.health.remedies, v)
    s = v.summary
    if row is None or s is None or s.fault_key is None:
        return None
    kind = s.fault_key.kind
    where = f"health.remedies row {row.match}"
    if row.alert:
        return f"{v.node}: {kind}: alert only ({where}); not cordoned"
    if v.node in ctx.options.mode_held:
        return f"{v.node}: {kind}: held by the mode {row.mode} of {where}; see would rows"
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

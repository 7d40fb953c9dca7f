"""`navarch status` as text: counts per pool and lifecycle, the nodes that are not healthy
(every node with show_all) in aligned columns, the remediation ladder, and what else the
run found (rejected reports, orphans, duplicates, foreign instances). Reads the typed
FleetStatus (navarch.reconcile.status), beside the plan's renderer (render.py); pure.

Text from nodes (reasons, a pause's reason) is escaped for a terminal
(navarch.textsafe.terminal) where a person typed it, as before.
"""

from __future__ import annotations

from collections import Counter

from navarch.fleet.durations import format_duration_s
from navarch.fleet.modes import Mode
from navarch.inventory import Reservation
from navarch.planner.model import Lifecycle
from navarch.reconcile.status import FleetStatus, NodeStatus, PoolStatus
from navarch.report.timefmt import ts
from navarch.textsafe import counted, terminal

__all__ = ["render_status"]

STATUS_COLUMNS = (
    "POOL",
    "NODE",
    "INSTANCE",
    "ZONE",
    "TYPE",
    "LIFECYCLE",
    "HEALTH",
    "SCORE",
    "REPORT AGE",
    "REASON",
)

#: Lifecycles that serve work (the rest are "not serving" for the history hint).
_SERVING = frozenset({Lifecycle.HEALTHY, Lifecycle.DEGRADED})


def render_status(status: FleetStatus, *, show_all: bool = False, fleet_path: str = "") -> str:
    """The whole `navarch status` text (ends with a newline). fleet_path: named in the
    hint to `navarch history` for a node that is not serving."""
    rows, hidden = _rows(status, show_all=show_all)
    out = _pools(status)
    out.append("")
    out.extend(_table(rows))
    out.extend(_history_hint(status, fleet_path))
    if hidden:
        out.append(
            f"{'' if len(rows) == 1 else chr(10)}{counted(hidden, 'healthy node')} not listed "
            "(navarch status --all lists every node)"
        )
    out.extend(_ladder(status))
    out.extend(_topology(status, show_all=show_all))
    out.extend(_findings(status))
    return "\n".join(out) + "\n"


def _rows(status: FleetStatus, *, show_all: bool) -> tuple[list[tuple[str, ...]], int]:
    """The table's rows (header first) and how many healthy nodes it leaves out."""
    rows: list[tuple[str, ...]] = [STATUS_COLUMNS]
    hidden = 0
    for p in status.pools:
        for n in p.nodes:
            if not show_all and n.lifecycle is Lifecycle.HEALTHY:
                hidden += 1
                continue
            rows.append(_row(p.pool, n))
    return rows, hidden


def _row(pool: str, n: NodeStatus) -> tuple[str, ...]:
    """One node's row; health from a stale report is shown as what it was, in parentheses."""
    age = format_duration_s(n.report_age_s) if n.report_age_s is not None else "-"
    health, score = n.health or "-", n.health_score
    score_text = "-" if score is None else str(score)
    if n.health and not n.report_fresh:
        # The last accepted report no longer speaks for the node: say so, keep it
        # visible in parentheses: never "offline ... healthy 100".
        health, score_text = f"{n.lifecycle.value} (was {n.health})", f"({score})"
    reason = n.reason
    if n.would:  # what the pool's mode holds back, with the mode, on the node's own line
        reason += "; " + ", ".join(f"{terminal(h)} [mode {m}]" for h, m in n.would)
    return (
        pool,
        n.node,
        n.instance_id or "-",
        n.zone or "-",
        n.instance_type or "-",
        n.lifecycle.value,
        health,
        score_text,
        age,
        reason,
    )


def _pools(status: FleetStatus) -> list[str]:
    """The fleet line, a paused fleet's line, and one line of counts per pool."""
    out = [f"Fleet {status.fleet} (state serial {status.state_serial}, store {status.store})"]
    pz = status.paused
    if pz is not None:
        out.append(
            f"  PAUSED by {pz.by} at {ts(pz.at)}: {terminal(pz.reason)}; runs plan but "
            "act on nothing until `navarch resume FLEET`"
        )
    for p in status.pools:
        out.append(_pool_line(p))
    out.extend(_reservation_line(r) for r in status.reservations)
    return out


def _reservation_line(r: Reservation) -> str:
    """One reservation's use: reserved, running in it, and idle but billed."""
    idle = r.total - r.running
    where = " ".join(terminal(x) for x in (r.provider, r.zone, r.instance_type) if x)
    kind = "capacity block" if r.capacity_block else "reservation"
    window = f"; {ts(r.start)} to {ts(r.end)}" if r.capacity_block and r.end else ""
    return (
        f"  {kind} {terminal(r.reservation_id)} ({where}): reserved {r.total}, "
        f"running {r.running}, idle {idle}{' (billed)' if idle else ''}{window}"
    )


def _pool_line(p: PoolStatus) -> str:
    counts = Counter(n.lifecycle.value for n in p.nodes)
    by_state = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    # Nodes per zone, so a spread pool's balance (or a packed pool's zone) reads at a glance.
    zones = Counter(n.zone for n in p.nodes if n.zone)
    by_zone = ", ".join(f"{terminal(z)} {c}" for z, c in sorted(zones.items()))
    return (
        f"  pool {p.pool}: {counted(len(p.nodes), 'node')} ({by_state or 'none'}); "
        f"min {p.min}, target {p.target}, max {p.max}"
        + (f", spares {p.spares}" if p.spares else "")
        + (f"; zones {by_zone}" if by_zone else "")
        + (f"; mode {p.mode} ({_MODE_WORDS[p.mode]})" if p.mode is not Mode.FULL else "")
    )


#: What a pool line says its mode lets navarch do (navarch.fleet.modes).
_MODE_WORDS = {
    Mode.OBSERVE: "plans and notifies, acts on nothing",
    Mode.CORDON: "cordons and drains only",
    Mode.FULL: "acts fully",
}


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    """The rows in aligned columns (the last, the reason, unpadded); nothing if no node."""
    if len(rows) <= 1:
        return []
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return [
        "  ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1]
        for r in rows
    ]


def _history_hint(status: FleetStatus, fleet_path: str) -> list[str]:
    """Point at `navarch history` for the first node that is not serving, if any."""
    not_serving = [n.node for p in status.pools for n in p.nodes if n.lifecycle not in _SERVING]
    if not not_serving:
        return []
    # Everything status cannot say about the past lives in the audit log.
    return [
        f"\nWhy a node is not serving, and what navarch did to it: navarch history "
        f"{fleet_path} {not_serving[0]}"
        + (f" (or any of the {len(not_serving)} above)" if len(not_serving) > 1 else "")
    ]


def _ladder_parts(n: NodeStatus) -> list[str]:
    lad = n.ladder
    parts = []
    if lad.rung:
        parts.append(f"rung {lad.rung} for {lad.rung_fault} at {ts(lad.rung_at)}")
    if lad.faults_in_window:
        parts.append(
            f"{lad.faults_in_window} of lemon_after {lad.lemon_after} faults in lemon_window"
        )
    if lad.lemon:
        parts.append("LEMON")
    d = lad.diag
    if d is not None:
        parts.append(
            f"diag -r {d.level} ({d.why.value}) {d.state.value} at {ts(d.at)}"
            + (f": {d.detail}" if d.detail else "")
        )
    return parts


def _ladder(status: FleetStatus) -> list[str]:
    """One line per node with ladder state (a rung tried, faults in the window, a lemon, a
    diagnostic), and each pool's remembered lemon instance ids."""
    lines = []
    for p in status.pools:
        for n in p.nodes:
            parts = _ladder_parts(n)
            if parts:
                lines.append(f"  {n.node}: " + "; ".join(parts))
        if p.lemons:
            lines.append(f"  pool {p.pool} lemons (uncordon needs --force): " + ", ".join(p.lemons))
        if p.lemon_hosts:
            lines.append(f"  pool {p.pool} lemon hosts: " + ", ".join(p.lemon_hosts))
    return ["\nRemediation ladder:\n" + "\n".join(lines)] if lines else []


def _topology(status: FleetStatus, *, show_all: bool) -> list[str]:
    """One line per node of the table whose cloud says where it sits (healthy nodes only
    with --all, as the table): its topology, coarse to fine (the block first), and a
    LEMON HOST mark, shown always, when it landed on one of the pool's lemon hosts."""
    lines = [
        f"  {n.node}: {'/'.join(terminal(t) for t in n.topology) or '-'}"
        + ("  LEMON HOST (failed before; its provider could not avoid it)" if n.lemon_host else "")
        for p in status.pools
        for n in p.nodes
        if n.lemon_host or (n.topology and (show_all or n.lifecycle is not Lifecycle.HEALTHY))
    ]
    return ["\nTopology (block first, host last):\n" + "\n".join(lines)] if lines else []


def _findings(status: FleetStatus) -> list[str]:
    """Rejected reports, orphans, duplicate names and foreign instances, where any."""
    out = []
    if status.rejections:
        out.append(
            "\nRejected reports (all time): "
            + ", ".join(f"{k}={v}" for k, v in sorted(dict(status.rejections).items()))
        )
    if status.orphans:
        out.append(
            "\nOrphans (this fleet's tags, pool no longer declared; apply drains, then "
            "terminates them): "
            + ", ".join(f"{node} ({pool}, {iid})" for node, pool, _, iid, _ in status.orphans)
        )
    if status.duplicates:
        out.append(
            "\nDuplicate node names (one name, several instances): "
            + "; ".join(f"{node}: {', '.join(ids)}" for node, ids in status.duplicates)
        )
    if status.foreign:
        out.append(
            "\nForeign instances (no navarch tags for this fleet; left alone): "
            + ", ".join(iid for _, iid in status.foreign)
        )
    return out

"""`navarch report`: over a period, per fault class, what navarch saw, what it would have
done and when, next to what actually happened to each node.

It is what an operator holds against their own incident log before raising a pool's mode
(navarch.fleet.modes): a pool in ``observe`` records each action its mode held back in
the audit log as a "would" record (navarch.reconcile.executor), a pool in ``cordon`` the
terminations, launches and reboots it held back, and every pool what it did. This module
reads those records (navarch.history.read_events, the same day-indexed chunks `history`
reads), groups them by node and by the fault each answers (navarch.fleet.remedies
.fault_class: xid:79 -> gpu_lost; a kind in no class is its own group; records about no
fault, such as launches to reach the target, go under "no fault"), and closes each node's
story with what the cloud and its reports say now (its instance in the cloud's listing,
its lifecycle and reason as `navarch status` shows them).

A would record is written by every apply that plans it again, so a row says when it was
first and last planned and in how many runs. Pure apart from ``read_report``'s store read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from navarch.fleet.remedies import fault_class
from navarch.history import HistoryEvent, read_events
from navarch.report.timefmt import ts
from navarch.stores.base import ObjectStore
from navarch.textsafe import counted, terminal

__all__ = [
    "NO_FAULT",
    "FaultReport",
    "NodeNow",
    "NodeStory",
    "WouldRow",
    "build_report",
    "read_report",
    "render_report",
    "report_to_json",
]

REPORT_FORMAT_VERSION = 1
#: The group of records that answer no fault (launches to target, scale, drift).
NO_FAULT = "no fault"


@dataclass(frozen=True)
class NodeNow:
    """A node as the cloud and its reports show it at the end of the period: instance_id
    and instance_state from the cloud's listing (None: not listed: terminated or gone),
    its lifecycle and reason as `navarch status` says, and the fault its latest report
    shows ("" none)."""

    node: str
    pool: str
    instance_id: str | None
    instance_state: str | None
    lifecycle: str
    reason: str
    fault: str = ""


@dataclass(frozen=True)
class WouldRow:
    """One action a pool's mode held back for a node: action kind, the mode, when it was
    first and last planned (aware UTC), in how many runs, and the plan's reason."""

    action: str
    mode: str
    first: datetime
    last: datetime
    runs: int
    reason: str


@dataclass(frozen=True)
class DoneRow:
    """One action that ran on a node: kind, when, whether it succeeded, who asked
    (HistoryEvent.by's label, else its trigger) and why."""

    action: str
    time: datetime
    ok: bool
    by: str
    reason: str


@dataclass(frozen=True)
class NodeStory:
    """One node under one fault: the faults seen (keys as recorded, e.g. xid:79@gpu0),
    when first and last seen in a record, what was held back and what was done, and the
    node now (None when neither the cloud nor its reports were read)."""

    node: str
    pool: str
    faults: tuple[str, ...]
    first_seen: datetime
    last_seen: datetime
    would: tuple[WouldRow, ...]
    done: tuple[DoneRow, ...]
    now: NodeNow | None


@dataclass(frozen=True)
class FaultReport:
    """The report: per fault class (sorted, NO_FAULT last), its nodes' stories; modes:
    each declared pool's mode now; unobserved: why the nodes now are unknown, or ""."""

    fleet: str
    since: datetime
    until: datetime
    groups: tuple[tuple[str, tuple[NodeStory, ...]], ...]
    modes: tuple[tuple[str, str], ...]
    skipped_lines: int = 0
    unobserved: str = ""


def _group_of(fault: str | None) -> str:
    """A recorded fault key ("xid:79@gpu0") -> its class ("gpu_lost"), else its kind,
    else NO_FAULT."""
    if not fault:
        return NO_FAULT
    kind = fault.split("@", 1)[0]
    cls = fault_class(kind)
    return cls.value if cls is not None else kind


def _subject(e: HistoryEvent) -> str:
    """The node a record is about: a replacement's launch is the story of the node it
    replaces."""
    return e.replaces or e.node or f"pool {e.pool}"


def _would_rows(events: Sequence[HistoryEvent]) -> tuple[WouldRow, ...]:
    """Would records of one node, folded per (action, mode) in first-planned order."""
    rows: dict[tuple[str, str], WouldRow] = {}
    for e in events:
        if not e.would:
            continue
        key = (e.action, e.would)
        old = rows.get(key)
        runs = 1 if old is None else old.runs + 1
        first = e.time if old is None else old.first
        rows[key] = WouldRow(e.action, e.would, first, e.time, runs, e.reason)
    return tuple(rows.values())


def _done_rows(events: Sequence[HistoryEvent]) -> tuple[DoneRow, ...]:
    """Actions that ran (not would records), oldest first."""
    return tuple(
        DoneRow(
            e.action, e.time, e.ok, e.by.label() if e.by is not None else str(e.actor), e.reason
        )
        for e in events
        if not e.would
    )


def build_report(
    fleet: str,
    since: datetime,
    until: datetime,
    events: Sequence[HistoryEvent],
    now: Mapping[str, NodeNow] | None,
    modes: Sequence[tuple[str, str]] = (),
    *,
    skipped_lines: int = 0,
    unobserved: str = "",
) -> FaultReport:
    """Group `events` (audit records in [since, until], oldest first) per node and fault
    class (module docstring). A record naming no fault belongs to the fault of the node's
    latest record before it that names one (a drain after its cordon), else NO_FAULT (a
    launch before any fault). now: each
    node as the cloud and its reports show it (None: unobserved); a node whose latest
    report shows a fault no record answers (an alert-only row, a fault still counting
    toward its occurrences) gets a story of its own under that fault. Pure."""
    by_node: dict[str, list[HistoryEvent]] = {}
    for e in events:
        by_node.setdefault(_subject(e), []).append(e)
    groups: dict[str, list[NodeStory]] = {}
    for node, evs in sorted(by_node.items()):
        faults = tuple(dict.fromkeys(e.fault for e in evs if e.fault))
        buckets: dict[str, list[HistoryEvent]] = {}
        current: str | None = None  # the fault of the node's latest record naming one
        for e in evs:
            current = e.fault or current
            buckets.setdefault(_group_of(current), []).append(e)
        for group, bucket in buckets.items():
            here = tuple(f for f in faults if _group_of(f) == group)
            groups.setdefault(group, []).append(
                NodeStory(
                    node,
                    bucket[0].pool,
                    here,
                    bucket[0].time,
                    bucket[-1].time,
                    _would_rows(bucket),
                    _done_rows(bucket),
                    (now or {}).get(node),
                )
            )
    for n in (now or {}).values():
        if n.fault and n.node not in by_node:
            groups.setdefault(_group_of(n.fault), []).append(
                NodeStory(n.node, n.pool, (n.fault,), until, until, (), (), n)
            )
    order = sorted(groups, key=lambda g: (g == NO_FAULT, g))
    return FaultReport(
        fleet,
        since,
        until,
        tuple((g, tuple(sorted(groups[g], key=lambda s: s.node))) for g in order),
        tuple(modes),
        skipped_lines,
        unobserved,
    )


def read_report(
    store: ObjectStore,
    fleet: str,
    *,
    since: datetime,
    until: datetime,
    now: Mapping[str, NodeNow] | None,
    modes: Sequence[tuple[str, str]] = (),
    unobserved: str = "",
) -> FaultReport:
    """The report of `fleet` over [since, until] (aware UTC) from its audit log in
    `store`. Raises StoreError when the store cannot be listed or read."""
    events, _, _, skipped = read_events(store, fleet, since, until)
    return build_report(
        fleet, since, until, events, now, modes, skipped_lines=skipped, unobserved=unobserved
    )


def _now_text(n: NodeNow | None) -> str:
    if n is None:
        return "not observed"
    where = (
        f"instance {n.instance_id} {n.instance_state}"
        if n.instance_id
        else "no instance in the cloud's listing (terminated or gone)"
    )
    why = f" ({terminal(n.reason)})" if n.reason else ""
    return f"{n.lifecycle}{why}; {where}"


def _story_lines(s: NodeStory) -> list[str]:
    """One node's lines: faults and when, would rows, done rows, now."""
    faults = ", ".join(terminal(f) for f in s.faults) or "none recorded"
    lines = [
        f"  {terminal(s.node)} (pool {terminal(s.pool)}): fault {faults}; "
        f"first {ts(s.first_seen)}, last {ts(s.last_seen)}"
    ]
    for w in s.would:
        runs = counted(w.runs, "run")
        lines.append(
            f"    would {w.action} (mode {w.mode}): first {ts(w.first)}, last {ts(w.last)}, "
            f"{runs}; because {terminal(w.reason)}"
        )
    for d in s.done:
        outcome = "ok" if d.ok else "FAILED"
        lines.append(
            f"    did {d.action} {outcome} at {ts(d.time)} by {terminal(d.by)}; "
            f"because {terminal(d.reason)}"
        )
    if not s.would and not s.done:
        lines.append("    nothing planned or done (reported only, or not yet acted on)")
    lines.append(f"    now: {_now_text(s.now)}")
    return lines


def render_report(r: FaultReport) -> str:
    """`navarch report` as text: the period and the pools' modes, then per fault class
    each node's story."""
    lines = [f"Report of fleet {r.fleet}, {ts(r.since)} to {ts(r.until)}:"]
    if r.modes:
        lines.append("  modes now: " + ", ".join(f"pool {p} {m}" for p, m in r.modes))
    if r.unobserved:
        lines.append(f"  (the nodes now are not shown: {terminal(r.unobserved)})")
    if not r.groups:
        lines.append("  nothing seen, planned or done in this range (widen it with --since)")
    for group, stories in r.groups:
        lines.append("")
        lines.append(f"{group} ({counted(len(stories), 'node')}):")
        for s in stories:
            lines += _story_lines(s)
    if r.skipped_lines:
        lines.append(f"({counted(r.skipped_lines, 'malformed audit line')} skipped)")
    return "\n".join(lines) + "\n"


def _now_json(n: NodeNow | None) -> dict[str, Any] | None:
    if n is None:
        return None
    return {
        "instance_id": n.instance_id,
        "instance_state": n.instance_state,
        "lifecycle": n.lifecycle,
        "reason": n.reason,
        "fault": n.fault or None,
    }


def _story_json(s: NodeStory) -> dict[str, Any]:
    return {
        "node": s.node,
        "pool": s.pool,
        "faults": list(s.faults),
        "first_seen": ts(s.first_seen),
        "last_seen": ts(s.last_seen),
        "would": [
            {
                "action": w.action,
                "mode": w.mode,
                "first": ts(w.first),
                "last": ts(w.last),
                "runs": w.runs,
                "reason": w.reason,
            }
            for w in s.would
        ],
        "done": [
            {"action": d.action, "time": ts(d.time), "ok": d.ok, "by": d.by, "reason": d.reason}
            for d in s.done
        ],
        "now": _now_json(s.now),
    }


def report_to_json(r: FaultReport) -> dict[str, Any]:
    """The `navarch report --json` document (schemas/report.schema.json)."""
    return {
        "format_version": REPORT_FORMAT_VERSION,
        "fleet": r.fleet,
        "since": ts(r.since),
        "until": ts(r.until),
        "modes": dict(r.modes),
        "unobserved": r.unobserved or None,
        "skipped_lines": r.skipped_lines,
        "classes": [
            {"class": g, "nodes": [_story_json(s) for s in stories]} for g, stories in r.groups
        ],
    }

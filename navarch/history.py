"""`navarch history`: what happened to a node (or a fleet) and why, from the audit log.

The audit log (navarch.reconcile.state.AuditLog) is indexed by day: each run writes its
records as chunks `events/<fleet>/<yyyy>/<mm>/<dd>/<run-id>-<nnnn>.jsonl`, where the date
is the UTC day the run started and the run id starts with the run's UTC start time. A
query for [since, until] therefore lists only the day prefixes from the day before `since`
(a run that started before midnight may write records after it) to the day of `until`,
and reads only the chunks under them: a 24 h query on a year of chunks lists three days,
whatever the log's size (bench/history.py measures it).

Each record says what was done (action, pool, node, instance id), why (reason, the fault
key and ladder rung where the ladder chose it), how it ended (ok, detail, error), when and
in which run, how it was asked for (Trigger), who acted (navarch.actor.Actor: a person,
a CI job, an MCP client or a scheduled run) and the health report that drove it
(sequence, status, boot id). Records written before a field existed are read by field
name with defaults, so an old log still reads; a malformed line is counted, never fatal.
Every string read from a record is made plain (navarch.textsafe): a record may quote a
node, and a log written by an older navarch holds that text as the node wrote it.

The current state of each node (its Memory: phase, since when, why) closes the story.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import orjson

from navarch.actor import Actor
from navarch.planner.model import Cordon, Lifecycle, Memory, Phase, ReportSummary
from navarch.report.health import Remedy
from navarch.report.timefmt import ts
from navarch.stores.base import ObjectStore
from navarch.textsafe import counted, plain

HISTORY_FORMAT_VERSION = 1


class Trigger(enum.StrEnum):
    """How an action was asked for, as the audit log records it (field `actor`, its name
    kept for older logs); who asked is the record's `by` (navarch.actor.Actor)."""

    SCHEDULED = "scheduled"  # the plan decided by itself (whoever ran the apply: see `by`)
    REPLACE = "replace"  # `navarch apply --replace NODE` named the node
    OPERATOR = "operator"  # an operator verb: uncordon, reboot, cordon, destroy (`verb`)
    MCP = "mcp"  # a tool call of an MCP client (`navarch mcp`); `client` names it, `verb` the tool


def report_ref(summary: ReportSummary | None) -> dict[str, Any] | None:
    """The audit record's `report` field from a ReportSummary (None when there is none):
    {"sequence": int, "status": str, "boot_id": str}, the report an action was decided on."""
    if summary is None:
        return None
    return {"sequence": summary.sequence, "status": str(summary.status), "boot_id": summary.boot_id}


@dataclass(frozen=True)
class ReportRef:
    """The health report an action was decided on: its sequence, status and boot id."""

    sequence: int
    status: str
    boot_id: str


@dataclass(frozen=True)
class HistoryEvent:
    """One audit record, read defensively. time: aware UTC; key: the chunk it came from."""

    time: datetime
    run_id: str
    action: str
    pool: str
    node: str | None
    instance_id: str | None
    reason: str
    ok: bool
    detail: str
    error: str | None
    actor: Trigger
    verb: str
    report: ReportRef | None
    fault: str | None
    rung: str | None
    lemon: bool
    replaces: str | None
    key: str
    client: str | None = None  # the MCP client's name (its initialize clientInfo) for Trigger.MCP
    by: Actor | None = None  # who acted; None in a record written before the field
    host: str | None = None  # the instance's physical host, where its cloud exposes one
    topology: tuple[str, ...] = ()  # its place in the cloud's fabric, coarse to fine
    #: the mode that held the action back (navarch.planner.modes): recorded, never done;
    #: None for an action that ran
    would: str | None = None


@dataclass(frozen=True)
class NodeNow:
    """A node as the fleet's Memory holds it now: phase (what navarch is doing to it;
    Phase.NONE while it serves), since when and why."""

    node: str
    pool: str
    instance_id: str | None
    phase: Phase
    phase_at: datetime | None
    phase_reason: str
    fault: str | None
    rung: Remedy | None
    cordon: Cordon | None  # why it is out of its scheduler (NodeMemory.cordon)
    report: ReportRef | None
    #: the node's lifecycle and why, as `navarch status` shows it (the same observed
    #: state: navarch.reconcile.status.fleet_status); None when the fleet could not be
    #: observed, and the phase in Memory is all that is known
    lifecycle: Lifecycle | None = None
    why: str = ""


#: A node's lifecycle and its reason as `navarch status` shows them, by node name.
Observed = Mapping[str, tuple[Lifecycle, str]]


@dataclass(frozen=True)
class History:
    """The answer of one query: events oldest first, the nodes now, what was read.

    days: the day prefixes listed; chunks_read: the chunks fetched; skipped_lines: lines
    that were not a JSON object (counted, not fatal).
    """

    fleet: str
    node: str | None
    since: datetime
    until: datetime
    events: tuple[HistoryEvent, ...]
    nodes: tuple[NodeNow, ...]
    days: tuple[str, ...]
    chunks_read: int
    skipped_lines: int
    #: why the nodes' state now is only Memory's (the fleet could not be observed), or ""
    unobserved: str = ""


def day_prefixes(fleet: str, since: datetime, until: datetime) -> tuple[str, ...]:
    """The audit log's day prefixes a query over [since, until] must list, oldest first.

    From the UTC day before `since` (a run indexed under the day it started may write
    records after midnight) to the day of `until`; empty when since > until.
    """
    if since > until:
        return ()
    day = (since - timedelta(days=1)).date()
    last = until.date()
    out = []
    while day <= last:
        out.append(f"events/{fleet}/{day:%Y/%m/%d}/")
        day += timedelta(days=1)
    return tuple(out)


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


def _actor(r: Mapping[str, Any]) -> Trigger:
    """The record's trigger; records from before the field: an operator's mark, else scheduled."""
    try:
        return Trigger(str(r.get("actor")))
    except ValueError:
        return Trigger.OPERATOR if r.get("operator") else Trigger.SCHEDULED


def _report(value: Any) -> ReportRef | None:
    if not isinstance(value, Mapping) or not isinstance(value.get("sequence"), int):
        return None
    return ReportRef(
        value["sequence"], _text(value.get("status", "")), _text(value.get("boot_id", ""))
    )


def _text(value: Any) -> str:
    return plain(str(value))


def _opt(value: Any) -> str | None:
    return None if value is None else _text(value)


def event_from_record(r: Mapping[str, Any], key: str) -> HistoryEvent | None:
    """One audit record -> HistoryEvent, None when it has no readable time."""
    when = _parse_time(r.get("time"))
    if when is None:
        return None
    actor = _actor(r)
    verb = _text(r.get("verb") or (r.get("run_id") if actor is Trigger.OPERATOR else "") or "")
    client = r.get("client")
    return HistoryEvent(
        time=when,
        run_id=_text(r.get("run_id", "")),
        action=_text(r.get("action", "")),
        pool=_text(r.get("pool", "")),
        node=_opt(r.get("node")),
        instance_id=_opt(r.get("instance_id")),
        reason=_text(r.get("reason", "")),
        ok=bool(r.get("ok")),
        detail=_text(r.get("detail", "")),
        error=_opt(r.get("error")),
        actor=actor,
        verb=verb,
        report=_report(r.get("report")),
        fault=_opt(r.get("fault")),
        rung=_opt(r.get("rung")) or None,
        lemon=bool(r.get("lemon")),
        replaces=_opt(r.get("replaces")),
        key=key,
        client=_text(client) if client else None,
        by=Actor.from_json(r.get("by")),
        host=_opt(r.get("host")),
        topology=tuple(_text(t) for t in r.get("topology") or () if isinstance(t, str)),
        would=_opt(r.get("would")),
    )


def _about(e: HistoryEvent, node: str | None) -> bool:
    return node is None or e.node == node or e.replaces == node


def read_events(
    store: ObjectStore, fleet: str, since: datetime, until: datetime, node: str | None = None
) -> tuple[tuple[HistoryEvent, ...], tuple[str, ...], int, int]:
    """Audit records of `fleet` within [since, until] (about `node` when given, including
    the provision of its replacement) -> (events oldest first, day prefixes listed, chunks
    read, malformed lines skipped).

    Lists only day_prefixes(fleet, since, until) and fetches those chunks (get_many, in
    parallel where the store can). A chunk removed between list and get is skipped.
    Raises StoreError when the store cannot be listed or read.
    """
    days = day_prefixes(fleet, since, until)
    keys = [info.key for day in days for info in store.list(day) if info.key.endswith(".jsonl")]
    blobs = store.get_many(keys)
    events: list[HistoryEvent] = []
    skipped = 0
    needle = None if node is None else node.encode()
    for key in keys:
        blob = blobs.get(key)
        if blob is None:
            continue
        for line in blob.data.splitlines():
            if not line.strip() or (needle is not None and needle not in line):
                continue  # a record about another node cannot name this one anywhere
            try:
                r = orjson.loads(line)
            except orjson.JSONDecodeError:
                skipped += 1
                continue
            if not isinstance(r, dict):
                skipped += 1
                continue
            e = event_from_record(r, key)
            if e is None:
                skipped += 1
            elif since <= e.time <= until and _about(e, node):
                events.append(e)
    events.sort(key=lambda e: (e.time, e.key))
    return tuple(events), days, len(blobs), skipped


def nodes_now(
    memory: Memory, node: str | None = None, observed: Observed | None = None
) -> tuple[NodeNow, ...]:
    """The nodes of `memory` as NodeNow, by name; only `node` when given. observed: each
    node's lifecycle and reason as `navarch status` shows them (None: not observed)."""
    out = []
    for nm in memory.nodes:
        if node is not None and nm.node != node:
            continue
        seen = observed.get(nm.node) if observed is not None else None
        out.append(
            NodeNow(
                node=nm.node,
                pool=nm.pool,
                instance_id=nm.instance_id,
                phase=nm.phase,
                phase_at=nm.phase_at,
                phase_reason=nm.phase_reason,
                fault=nm.fault.key.format() if nm.fault is not None else None,
                rung=nm.rung,
                cordon=nm.cordon,
                report=_report(report_ref(nm.report)),
                lifecycle=seen[0] if seen else None,
                why=seen[1] if seen else "",
            )
        )
    return tuple(sorted(out, key=lambda n: n.node))


def read_history(
    store: ObjectStore,
    fleet: str,
    memory: Memory,
    *,
    since: datetime,
    until: datetime,
    node: str | None = None,
    observed: Observed | None = None,
    unobserved: str = "",
) -> History:
    """What happened in `fleet` (to `node` when given) within [since, until], aware UTC.

    store: the fleet's ObjectStore. memory: the fleet's Memory as its caller read it
    (navarch.reconcile.state.load_memory), for the nodes' state now. observed: each node's
    lifecycle and reason as `navarch status` shows them, so both say the same of a node;
    None with `unobserved` saying why when the fleet could not be observed.
    Raises StoreError (store unreachable or unreadable).
    """
    events, days, chunks, skipped = read_events(store, fleet, since, until, node)
    now = nodes_now(memory, node, observed)
    return History(fleet, node, since, until, events, now, days, chunks, skipped, unobserved)


def _ts(when: datetime | None) -> str | None:
    return ts(when) if when is not None else None


def _report_json(r: ReportRef | None) -> dict[str, Any] | None:
    return None if r is None else {"sequence": r.sequence, "status": r.status, "boot_id": r.boot_id}


def _operator_note(n: NodeNow) -> str:
    """The operator's reason when an operator's cordon holds the node ("" otherwise)."""
    return n.cordon.note if n.cordon is not None and n.cordon.is_operator else ""


def _cordon_json(c: Cordon | None) -> dict[str, Any] | None:
    """Why the node is out of its scheduler, for history --json (None: nothing holds it)."""
    if c is None:
        return None
    return {"cause": c.cause.value, "at": _ts(c.at), "by": c.by, "fault": c.fault or None}


def _phase_name(phase: Phase) -> str:
    """A phase as schemas/history.schema.json spells it: its value, and "none" for
    Phase.NONE (whose value in Memory is the empty string)."""
    return phase.value if phase is not Phase.NONE else "none"


def history_to_json(h: History) -> dict[str, Any]:
    """The `navarch history --json` document (schemas/history.schema.json)."""
    return {
        "format_version": HISTORY_FORMAT_VERSION,
        "fleet": h.fleet,
        "node": h.node,
        "since": _ts(h.since),
        "until": _ts(h.until),
        "read": {"days": list(h.days), "chunks": h.chunks_read, "skipped_lines": h.skipped_lines},
        "events": [
            {
                "time": _ts(e.time),
                "run_id": e.run_id,
                "action": e.action,
                "pool": e.pool,
                "node": e.node,
                "instance_id": e.instance_id,
                "reason": e.reason,
                "ok": e.ok,
                "detail": e.detail,
                "error": e.error,
                "actor": str(e.actor),
                "verb": e.verb or None,
                "report": _report_json(e.report),
                "fault": e.fault,
                "rung": e.rung,
                "lemon": e.lemon,
                "replaces": e.replaces,
                "client": e.client,
                "by": e.by.to_json() if e.by is not None else None,
                "host": e.host,
                "topology": list(e.topology),
                **({"would": e.would} if e.would else {}),
            }
            for e in h.events
        ],
        "nodes": [
            {
                "node": n.node,
                "pool": n.pool,
                "instance_id": n.instance_id,
                "phase": _phase_name(n.phase),
                "phase_at": _ts(n.phase_at),
                "phase_reason": n.phase_reason,
                "fault": n.fault,
                "rung": n.rung.value if n.rung is not None else None,
                "operator_cordon": _operator_note(n) or None,
                "cordon": _cordon_json(n.cordon),
                "report": _report_json(n.report),
                "lifecycle": n.lifecycle.value if n.lifecycle is not None else None,
                "lifecycle_reason": n.why,
            }
            for n in h.nodes
        ],
    }


def _who(e: HistoryEvent) -> str:
    """Who acted and through which verb: "alice@admin-1 (reboot)", "CI GitHub Actions run
    7 of o/r (alice)", "MCP client claude-code (cordon)", "scheduled run on cron-1"."""
    how = (
        f" ({e.verb})"
        if e.verb and e.actor in (Trigger.MCP, Trigger.OPERATOR)
        else " (apply --replace)"
        if e.actor is Trigger.REPLACE
        else ""
    )
    if e.by is not None:
        return e.by.label() + how
    # A record written before `by`: only how it was asked is known.
    if e.actor is Trigger.MCP:
        return f"MCP client {e.client or '(unnamed)'}{how}"
    if e.actor in (Trigger.OPERATOR, Trigger.REPLACE):
        return f"operator{how}"
    return "an apply (who: not recorded)"


def _quiet(n: NodeNow) -> bool:
    """A node the fleet-wide history leaves out of "Now": one `navarch status` hides too
    (healthy), or, unobserved, one navarch is not acting on."""
    if n.lifecycle is not None:
        return n.lifecycle is Lifecycle.HEALTHY
    return n.phase is Phase.NONE and not _operator_note(n)


def _state_now(n: NodeNow) -> str:
    """A node's state in its "Now" line: its lifecycle and why, as `navarch status` says
    them (with what navarch is doing to it, when something); unobserved, Memory's phase."""
    doing = (
        f"{n.phase} since {_ts(n.phase_at)}" + (f": {n.phase_reason}" if n.phase_reason else "")
        if n.phase is not Phase.NONE
        else ""
    )
    if n.lifecycle is None:
        return doing or "serving (navarch is not acting on it)"
    out = n.lifecycle.value + (f" ({n.why})" if n.why else "")
    return out + (f"; navarch: {doing}" if doing else "")


def render_history(h: History) -> str:
    """`navarch history` as text: one block per action, oldest first, then the nodes now."""
    # The fleet is named once: beside the node, or alone.
    what = f"node {h.node} (fleet {h.fleet})" if h.node else f"fleet {h.fleet}"
    lines = [f"History of {what}, {_ts(h.since)} to {_ts(h.until)}:"]
    if not h.events:
        lines.append("  no action recorded in this range (widen it with --since, e.g. 7d)")
    for e in h.events:
        outcome = "ok" if e.ok else f"FAILED ({e.error})" if e.error else "FAILED"
        target = e.node or f"pool {e.pool}"
        verb = e.action
        if e.would:  # held back by the pool's mode: planned, not done
            verb, outcome = f"would {e.action}", f"not done (mode {e.would})"
        lines.append(f"{_ts(e.time)}  {verb} {target}  {outcome}  by {_who(e)}, run {e.run_id}")
        if e.reason:
            lines.append(f"    # because {e.reason}")
        facts = []
        if e.report is not None:
            facts.append(f"report #{e.report.sequence} {e.report.status}")
        if e.fault:
            facts.append(f"fault {e.fault}")
        if e.rung:
            facts.append(f"rung {e.rung}")
        if e.lemon:
            facts.append("lemon")
        if e.host:
            facts.append(f"host {e.host}")
        if e.topology:
            facts.append(f"topology {'/'.join(e.topology)}")
        if facts:
            lines.append(f"    # {', '.join(facts)}")
        if e.detail:
            lines.append(f"    -> {e.detail}")
    if h.unobserved and h.nodes:
        lines.append(f"(the nodes now as navarch's state holds them: {h.unobserved})")
    for n in h.nodes:
        if h.node is None and _quiet(n):
            continue
        note = _operator_note(n)
        extra = f"; operator cordon: {note}" if note else ""
        where = f"{n.node} ({n.pool}, {n.instance_id or 'no instance'})"
        lines.append(f"Now: {where} {_state_now(n)}{extra}")
    if h.node and not h.nodes and not h.events:
        lines.append(
            f"Now: {h.node} is not in the fleet's state (was the name right? "
            "`navarch status --all` lists every node)"
        )
    if h.skipped_lines:
        lines.append(f"({counted(h.skipped_lines, 'malformed audit line')} skipped)")
    return "\n".join(lines) + "\n"

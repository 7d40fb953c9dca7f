"""A status page without a server.

One static HTML file from templates/status.html.j2 (jinja2, autoescaped, StrictUndefined,
no JavaScript): pools with min/target/max, breaker and capacity state, nodes by lifecycle
with health, report age and reason, and the recent events of the audit log. Written by
`navarch status FLEET --html FILE`, and by every apply to status/<fleet>/index.html in the
store when fleet.yaml sets `status_page: true` (S3 or GCS can serve that object as a
static page). A viewport meta tag and one fluid table per pool keep it readable on a phone.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from navarch.errors import StoreError
from navarch.fleet.durations import format_duration_s
from navarch.fleet.spec import FleetSpec
from navarch.planner.model import HaltRule, Memory, NodeView, Plan
from navarch.report.timefmt import ts
from navarch.stores.base import ObjectStore
from navarch.templating import environment
from navarch.textsafe import plain

#: Audit records shown (newest first), read from at most this many newest chunks.
RECENT_EVENTS = 25
RECENT_CHUNKS = 10


def status_key(fleet: str) -> str:
    """Object key of the fleet's status page in the store."""
    return f"status/{fleet}/index.html"


@dataclass(frozen=True)
class AuditEvent:
    """One audit-log record as the page shows it."""

    time: str
    run_id: str
    action: str
    pool: str
    node: str
    ok: bool
    detail: str
    reason: str


def recent_events(
    store: ObjectStore, fleet: str, limit: int = RECENT_EVENTS
) -> tuple[AuditEvent, ...]:
    """The newest `limit` audit records (events/<fleet>/...), newest first.

    Keys sort by date and run id (which starts with the run's UTC time), so the last
    chunks listed are the newest. A store error or a malformed line is skipped: the page
    is informational and must render anyway.
    """
    try:
        infos = store.list(f"events/{fleet}/")
    except StoreError:
        return ()
    out: list[AuditEvent] = []
    for info in reversed(infos[-RECENT_CHUNKS:]):
        try:
            lines = store.get(info.key).data.decode().splitlines()
        except (StoreError, UnicodeDecodeError):
            continue
        for line in reversed(lines):
            try:
                r = json.loads(line)
                out.append(
                    AuditEvent(
                        str(r.get("time", "")),
                        str(r.get("run_id", "")),
                        str(r.get("action", "")),
                        str(r.get("pool", "")),
                        str(r.get("node") or "-"),
                        bool(r.get("ok")),
                        str(r.get("detail", "")),
                        str(r.get("reason", "")),
                    )
                )
            except (ValueError, AttributeError):
                continue
            if len(out) >= limit:
                return tuple(out)
    return tuple(out)


@cache
def _template() -> Any:
    env = environment(
        autoescape=True,
        # Every value shown may quote a node: no control or invisible character reaches
        # the page, whatever path the text took to get here (autoescape handles HTML).
        finalize=lambda value: plain(value) if isinstance(value, str) else value,
        trim_blocks=True,
    )
    return env.get_template("status.html.j2")


def _age(age_s: float | None) -> str:
    return "-" if age_s is None else format_duration_s(age_s)


def _ladder_text(pool: Any, v: Any, pm: Any, now: datetime) -> str:
    """The remediation ladder's state of a node in a few words: the rung tried,
    faults in lemon_window, a lemon, the last diagnostics; "" when there is none."""
    h = pool.health
    count = sum((now - t).total_seconds() <= h.lemon_window_s for _, t in v.faults)
    parts = []
    if v.rung:
        parts.append(f"{v.rung} for {v.rung_fault}")
    if count:
        parts.append(f"{count}/{h.lemon_after} faults")
    if count >= h.lemon_after or (v.instance is not None and v.instance.instance_id in pm.lemons):
        parts.append("lemon")
    if v.diag is not None:
        parts.append(f"diag -r {v.diag.level} {v.diag.state.value}")
    return "; ".join(parts)


def page_context(
    spec: FleetSpec, plan: Plan, memory: Memory, now: datetime, events: Sequence[AuditEvent] = ()
) -> dict[str, Any]:
    """The template's variables: fleet, generated_at, pools (each with its nodes, counts
    by lifecycle, breaker and capacity-backoff state, halts and what its mode held back),
    rejections, events."""
    pools = []
    halts_by_pool: dict[str, list[str]] = {}
    for h in plan.halts:
        halts_by_pool.setdefault(h.pool, []).append(f"{h.rule}: {h.message}")
    for w in plan.would:  # what the pool's mode held back, with the mode on its line
        line = f"mode {w.mode}: {w.headline} (not done): {w.action.reason}"
        halts_by_pool.setdefault(w.action.pool, []).append(line)
    by_pool: dict[str, list[NodeView]] = {}  # grouped once, not a scan per pool
    for v in plan.views:
        by_pool.setdefault(v.pool, []).append(v)
    for p in spec.pools:
        views = by_pool.get(p.name, [])
        pm = memory.pool(p.name)
        backoff = [
            f"{e.zone}/{e.instance_type}{' (spot)' if e.spot else ''} until {e.until:%H:%M} UTC"
            for e in pm.exhausted
            if e.until > now
        ]
        pools.append(
            {
                "name": p.name,
                "provider": p.provider,
                "min": p.min_nodes,
                "target": p.target_nodes,
                "max": p.max_nodes,
                "spares": p.spare_nodes,
                "breaker_open": any(
                    h.rule is HaltRule.CIRCUIT_BREAKER for h in plan.halts if h.pool == p.name
                ),
                "backoff": backoff,
                "halts": halts_by_pool.get(p.name, []),
                "lifecycles": sorted(Counter(v.lifecycle.value for v in views).items()),
                "nodes": [
                    {
                        "node": v.node,
                        "lifecycle": v.lifecycle.value,
                        "health": v.summary.status if v.summary else "-",
                        "score": v.summary.health_score if v.summary else "-",
                        "instance_id": v.instance.instance_id if v.instance else "-",
                        "zone": v.instance.zone if v.instance else "-",
                        "age": _age(v.report_age_s),
                        "reason": v.reason,
                        "ladder": _ladder_text(p, v, pm, now),
                    }
                    for v in views
                ],
                "lemons": list(pm.lemons),
                "lemon_hosts": list(pm.lemon_hosts),
            }
        )
    return {
        "fleet": spec.name,
        "generated_at": ts(now),
        "state_serial": memory.serial,
        "fleet_breaker_open": any(
            h.rule is HaltRule.CIRCUIT_BREAKER and h.pool == "*" for h in plan.halts
        ),
        "fleet_halts": halts_by_pool.get("*", []),
        "pools": pools,
        "rejections": sorted(memory.rejections),
        "events": list(events),
        "pending": list(plan.pending),
    }


def render_status_page(
    spec: FleetSpec, plan: Plan, memory: Memory, now: datetime, events: Sequence[AuditEvent] = ()
) -> str:
    """The status page's HTML. plan: with views (a gather's or an apply's); memory: the
    fleet's Memory (capacity backoff, rejections). Raises jinja2.UndefinedError on a
    template bug."""
    return str(_template().render(**page_context(spec, plan, memory, now, events)))


def publish(store: ObjectStore, spec: FleetSpec, html: str) -> str:
    """Write the page to status/<fleet>/index.html (unconditional put) -> its key.
    Raises StoreError."""
    key = status_key(spec.name)
    store.put(key, html.encode())
    return key

"""observe(): derive each node's lifecycle from inventory, reports, memory and a clock.

Pure: no I/O, no clock reads, no randomness. Same inputs give the same output.
Rules (DESIGN.md "Node lifecycle" and safety rules 1-2):
- Only instances tagged for this fleet and one of its pools are nodes; the rest are foreign.
- Unhealthy counts per distinct report sequence, never per run; a new boot restarts the count.
- A fatal XID latched in a report, or a spot/maintenance notice, acts at once.
- Missing, rejected or unreadable reports make a node UNKNOWN (then STALE), never
  unhealthy, until offline_after has passed since the last accepted report.
- A node with no report at all is BOOTING until boot_timeout, then UNHEALTHY.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from navarch.durations import format_duration_s
from navarch.inventory import Instance, InstanceState
from navarch.planner.model import (
    Lifecycle,
    Memory,
    NodeMemory,
    NodeView,
    Phase,
    ReportObservation,
    ReportSummary,
)
from navarch.spec import FleetSpec, PoolSpec


@dataclass(frozen=True)
class Observed:
    """observe()'s result: views of owned nodes, foreign instances, and Memory folded with
    this run's observations (streaks, report summaries, adopted and forgotten nodes)."""

    views: tuple[NodeView, ...]
    foreign: tuple[Instance, ...]
    memory: Memory


def is_owned(inst: Instance, spec: FleetSpec) -> bool:
    """Safety rule 1: the instance carries this fleet's tags, a declared pool and a node name."""
    if inst.fleet != spec.name or not inst.node:
        return False
    try:
        pool = spec.pool(inst.pool or "")
    except KeyError:
        return False
    return inst.provider == pool.provider


def observe(
    spec: FleetSpec,
    inventory: Sequence[Instance],
    reports: Mapping[str, ReportObservation],
    memory: Memory,
    now: datetime,
    drain_checks: Mapping[str, bool] | None = None,
) -> Observed:
    """Derive NodeViews (sorted by node name) and fold observations into Memory.

    inventory: every instance the fleet's providers listed. reports: node -> observation.
    drain_checks: node -> True when its scheduler's drain check passed this run (nodes of
    pools with scheduler none are judged from their report's GPU process count instead).
    """
    drain_checks = drain_checks or {}
    owned: dict[str, Instance] = {}
    foreign: list[Instance] = []
    for inst in sorted(inventory, key=lambda i: (i.provider, i.instance_id)):
        if is_owned(inst, spec) and inst.node not in owned:
            owned[inst.node or ""] = inst
        else:
            foreign.append(inst)

    mem = memory
    # Nodes navarch remembers whose instance is gone: forget them (terminated, preempted,
    # or removed by hand). The pool's count drops and plan() provisions what is missing.
    for nm in memory.nodes:
        if nm.node not in owned:
            mem = mem.without_node(nm.node)

    rejections = dict(mem.rejections)
    views: list[NodeView] = []
    for name in sorted(owned):
        inst = owned[name]
        pool = spec.pool(inst.pool or "")
        nm = mem.node(name) or NodeMemory(node=name, pool=pool.name, first_seen_at=now)
        nm = replace(nm, instance_id=inst.instance_id)
        obs = reports.get(name)
        if obs is not None and obs.rejected and obs.version != nm.report_version:
            rejections[obs.rejected] = rejections.get(obs.rejected, 0) + 1
        nm = _fold_report(nm, obs)
        mem = mem.with_node(nm)
        views.append(_view(pool, inst, nm, obs, now, drain_checks.get(name)))

    # Names are never reused, even after a lost state: every owned node's index raises its
    # pool's next_index (a reused name would reuse a terminated node's launch id).
    for pool in spec.pools:
        prefix = f"{spec.name}-{pool.name}-"
        seen = [int(v.node[len(prefix):]) for v in views
                if v.pool == pool.name and v.node.startswith(prefix) and v.node[len(prefix):].isdigit()]
        pm = mem.pool(pool.name)
        if seen and max(seen) + 1 > pm.next_index:
            mem = mem.with_pool(replace(pm, next_index=max(seen) + 1))

    mem = replace(mem, rejections=tuple(sorted(rejections.items())))
    return Observed(views=tuple(views), foreign=tuple(foreign), memory=mem)


def _fold_report(nm: NodeMemory, obs: ReportObservation | None) -> NodeMemory:
    """Keep the newest accepted summary; count an unhealthy streak per distinct sequence."""
    if obs is None:
        return nm
    if obs.rejected:
        # Remember the version so the same bad object is counted once, keep the old summary.
        return replace(nm, report_version=obs.version)
    s = obs.summary
    if s is None:
        return nm
    if s.sequence <= nm.streak_sequence:
        return replace(nm, report_version=obs.version, report=nm.report or s)
    same_boot = nm.report is not None and nm.report.boot_id == s.boot_id
    streak = (nm.streak if same_boot else 0) + 1 if s.status == "unhealthy" else 0
    return replace(nm, report_version=obs.version, report=s, streak=streak, streak_sequence=s.sequence)


def _first_finding(s: ReportSummary) -> str:
    return s.findings[0] if s.findings else f"agent reports {s.status}"


def _view(
    pool: PoolSpec,
    inst: Instance,
    nm: NodeMemory,
    obs: ReportObservation | None,
    now: datetime,
    drain_check: bool | None,
) -> NodeView:
    h = pool.health
    s = nm.report
    age = (now - s.generated_at).total_seconds() if s else None
    rejected = obs.rejected if obs else None

    def view(lc: Lifecycle, reason: str, *, immediate: bool = False, drained: bool | None = None):
        return NodeView(
            node=nm.node, pool=pool.name, lifecycle=lc, reason=reason, instance=inst,
            summary=s, report_age_s=age, streak=nm.streak, phase_at=nm.phase_at,
            rejected=rejected, immediate=immediate, drained=drained,
        )

    if nm.phase is Phase.TERMINATING:
        return view(Lifecycle.TERMINATING, nm.phase_reason)
    if nm.phase is Phase.DRAINING:
        if pool.scheduler == "none" and "drain_check" not in pool.playbooks:
            fresh = s is not None and age is not None and age <= h.stale_after_s
            drained = bool(fresh and s.process_count == 0 and (nm.phase_at is None or s.generated_at >= nm.phase_at))
        else:
            drained = bool(drain_check)
        return view(Lifecycle.DRAINING, nm.phase_reason, drained=drained)
    if nm.phase is Phase.CORDONED:
        return view(Lifecycle.CORDONED, nm.phase_reason)

    if inst.state is InstanceState.PENDING:
        return view(Lifecycle.PROVISIONING, "instance is pending")

    if s is None:
        since = nm.first_seen_at or inst.launched_at
        up_s = (now - min(since, inst.launched_at)).total_seconds()
        if rejected:
            if up_s > h.offline_after_s:
                return view(Lifecycle.OFFLINE, f"no accepted report for {format_duration_s(up_s)} (last one rejected: {rejected})")
            return view(Lifecycle.UNKNOWN, f"report rejected: {rejected}")
        if up_s > h.boot_timeout_s:
            return view(Lifecycle.UNHEALTHY, f"no report within boot_timeout ({format_duration_s(h.boot_timeout_s)})")
        return view(Lifecycle.BOOTING, f"waiting for the first report ({format_duration_s(up_s)} since launch)")

    assert age is not None
    if age > h.offline_after_s:
        return view(Lifecycle.OFFLINE, f"no fresh report for {format_duration_s(age)} (offline_after {format_duration_s(h.offline_after_s)})")
    if s.notice_kind == "preemption" or s.notice_kind == "maintenance":
        return view(Lifecycle.PREEMPTING, f"{s.notice_kind} notice from the cloud", immediate=True)
    if age > h.stale_after_s:
        return view(Lifecycle.STALE, f"last report {format_duration_s(age)} old")
    if rejected:
        return view(Lifecycle.UNKNOWN, f"latest report rejected: {rejected}")
    if s.status == "unhealthy":
        if s.fatal:
            return view(Lifecycle.UNHEALTHY, _first_finding(s), immediate=True)
        if nm.streak >= h.unhealthy_after:
            return view(Lifecycle.UNHEALTHY, f"{_first_finding(s)} ({nm.streak} reports in a row)")
        return view(Lifecycle.DEGRADED, f"{_first_finding(s)} (unhealthy report {nm.streak} of {h.unhealthy_after})")
    if s.status == "degraded":
        return view(Lifecycle.DEGRADED, _first_finding(s))
    if s.status == "unknown":
        return view(Lifecycle.UNKNOWN, _first_finding(s))
    return view(Lifecycle.HEALTHY, "all checks pass")

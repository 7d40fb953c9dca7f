"""Active diagnostics (dcgmi diag) in the plan: scheduled ones, and the one a remedied node
may need before it returns (``return_requires_diag``). Pure.

A failed diagnostic is a fault like any other: this module says so (``Climb``), and the
ladder (navarch.planner.ladder) alone decides the rung it gets.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from navarch.fleet.durations import format_duration_s
from navarch.planner.context import PoolContext, Progress, StageResult, cordon_and_drain, iid
from navarch.planner.model import (
    Action,
    ActionKind,
    ActionReason,
    Diag,
    DiagState,
    DiagWhy,
    Fault,
    Lifecycle,
    NodeView,
)
from navarch.planner.payloads import DiagnosePayload
from navarch.report.health import FaultKey, Remedy

#: The fault a failed scheduled diagnostic is: a reboot first (DCGM's memory and PCIe
#: failures are often cured by one), then the ladder climbs as for any fault.
DIAG_FAULT_KEY = FaultKey("dcgmi diag")
DIAG_FAULT_ACTION = Remedy.REBOOT


@dataclass(frozen=True)
class Climb:
    """A failed diagnostic the ladder must answer: the fault, and the words that say why
    (put before the ladder's own reason)."""

    fault: Fault
    why: str


#: What a diagnostics step gives: an action, a line saying why the node waits, or a climb.
DiagStep = tuple[Action | None, str] | Climb


def diagnose(ctx: PoolContext, v: NodeView, level: int, why: DiagWhy, reason: str) -> Action:
    """The DIAGNOSE action that starts or collects `dcgmi diag -r level` on v."""
    return Action(
        ActionKind.DIAGNOSE,
        ctx.pool.name,
        v.node,
        reason,
        instance_id=iid(v),
        payload=DiagnosePayload(level, why),
        action_reason=ActionReason.DIAGNOSTICS,
    )


def _diag_fault(v: NodeView, key: FaultKey, action: Remedy) -> Fault:
    """The Fault a failed diagnostic is: `key` and `action` (for a diag before return, the
    remedied fault's, so the ladder climbs), on the node's latest report's boot."""
    s = v.summary
    return Fault(key, action, s.boot_id if s else "", s.sequence if s else 0)


def _what(ctx: PoolContext, level: int) -> str:
    """What the pool's diagnostics run: dcgmi diag at level, or the acceptance tests the
    pool names (diagnostics.tests), which the node's agent runs instead."""
    tests = ctx.pool.diagnostics.tests
    if tests:
        return f"acceptance tests {', '.join(tests)}"
    return f"dcgmi diag -r {level}"


def _failed(d: Diag, what: str = "") -> str:
    return f"{what}dcgmi diag -r {d.level} failed ({d.detail}); "


def _overran_s(ctx: PoolContext, d: Diag) -> float | None:
    """How long a RUNNING diagnostic has run past its level's time limit (pool diagnostics.
    time_limits), or None while within it: a hung dcgmi or a reused pid never answers."""
    if d.state is not DiagState.RUNNING or d.started_at is None:
        return None
    ran_s = (ctx.now - d.started_at).total_seconds()
    return ran_s if ran_s > ctx.pool.diagnostics.time_limit_s(d.level) else None


def return_diag(
    ctx: PoolContext, v: NodeView, level: int, healthy: str, *, late: bool = False
) -> DiagStep | None:
    """return_requires_diag: a remedied node returns only after `dcgmi diag -r level`, started
    after the remedy, passed. None when it did; else the DIAGNOSE that starts or collects it
    (it runs detached on the node: each run collects, none waits for it), the Climb a failed
    one asks for, or why the node waits (dcgmi is not installed).

    late: return_timeout has passed since the remedy. A diagnostic that runs past its
    level's time limit, or gives no verdict (unavailable, error) once late, is a Climb:
    the remedy is taken as not proven, and no node waits on a diagnostic for good.
    """
    d = v.diag
    key, action = (
        (v.fault.key, v.fault.action)
        if v.fault is not None
        else (DIAG_FAULT_KEY, DIAG_FAULT_ACTION)
    )
    if (
        d is None
        or d.why is not DiagWhy.RETURN
        or d.level < level
        or d.started_at is None
        or v.rung_at is None
        or d.started_at < v.rung_at
    ):
        if late:
            return Climb(
                _diag_fault(v, key, action),
                f"dcgmi diag -r {level} never ran before return_timeout; ",
            )
        return diagnose(
            ctx,
            v,
            level,
            DiagWhy.RETURN,
            f"{healthy}; return_requires_diag: dcgmi diag -r {level} first",
        ), ""
    if d.state is DiagState.PASS:
        return None
    overran_s = _overran_s(ctx, d)
    if overran_s is not None:
        return Climb(
            _diag_fault(v, key, action),
            f"dcgmi diag -r {d.level} still running after {format_duration_s(overran_s)} "
            f"(time limit {format_duration_s(ctx.pool.diagnostics.time_limit_s(d.level))}); ",
        )
    if d.state is DiagState.RUNNING:
        return diagnose(
            ctx,
            v,
            d.level,
            DiagWhy.RETURN,
            f"collect dcgmi diag -r {d.level} (running since {d.started_at:%H:%M} UTC)",
        ), ""
    if d.state is DiagState.FAIL:
        return Climb(_diag_fault(v, key, action), _failed(d))
    if late:
        return Climb(
            _diag_fault(v, key, action),
            f"dcgmi diag -r {d.level} gave no verdict ({d.detail}) by return_timeout; ",
        )
    if d.state is DiagState.UNAVAILABLE:
        return None, (
            f"{v.node}: cannot return: return_requires_diag {level} and {d.detail} "
            f"(the ladder climbs at return_timeout "
            f"{format_duration_s(ctx.pool.health.return_timeout_s)})"
        )
    return diagnose(
        ctx,
        v,
        level,
        DiagWhy.RETURN,
        f"dcgmi diag -r {level} again: the last run gave no verdict ({d.detail})",
    ), ""


def scheduled_diag(ctx: PoolContext, v: NodeView) -> DiagStep:
    """A node cordoned for scheduled diagnostics: once drained, diagnose it (start, then
    collect on later runs); uncordon it when they pass or give no verdict (doubt never
    acts); a failure is a Climb for the ladder. A drain that does not finish within
    drain_timeout, or a dcgmi diag running past its level's time limit, returns the node
    undiagnosed: a healthy node is never terminated for it."""
    h = ctx.pool.health
    if not v.drained:
        waited_s = (ctx.now - v.phase_at).total_seconds() if v.phase_at else 0.0
        if waited_s >= h.drain_timeout_s:
            return Action(
                ActionKind.UNCORDON,
                ctx.pool.name,
                v.node,
                f"scheduled diagnostics skipped: drain_timeout "
                f"({format_duration_s(h.drain_timeout_s)}) passed",
                instance_id=iid(v),
                action_reason=ActionReason.DIAGNOSTICS,
            ), ""
        return None, f"{v.node}: draining for scheduled diagnostics"
    d = v.diag
    level = ctx.pool.diagnostics.level
    overran_s = _overran_s(ctx, d) if d is not None else None
    if d is not None and overran_s is not None:
        return Action(
            ActionKind.UNCORDON,
            ctx.pool.name,
            v.node,
            f"scheduled diagnostics returned undiagnosed: dcgmi diag -r {d.level} "
            f"still running after {format_duration_s(overran_s)} (time limit "
            f"{format_duration_s(ctx.pool.diagnostics.time_limit_s(d.level))})",
            instance_id=iid(v),
            action_reason=ActionReason.DIAGNOSTICS,
        ), ""
    limit_s = ctx.pool.diagnostics.time_limit_s(d.level if d else level)
    if (
        d is not None
        and d.state is DiagState.DUE
        and (ctx.now - d.at).total_seconds() > h.drain_timeout_s + limit_s
    ):
        return Action(
            ActionKind.UNCORDON,
            ctx.pool.name,
            v.node,
            f"scheduled diagnostics returned undiagnosed: dcgmi diag -r {d.level} "
            f"never started within drain_timeout and its time limit "
            f"({format_duration_s(h.drain_timeout_s + limit_s)})",
            instance_id=iid(v),
            action_reason=ActionReason.DIAGNOSTICS,
        ), ""
    if d is None or d.state in (DiagState.DUE, DiagState.RUNNING):
        what = "collect" if d is not None and d.state is DiagState.RUNNING else "start"
        return diagnose(
            ctx,
            v,
            d.level if d else level,
            DiagWhy.SCHEDULED,
            f"scheduled diagnostics: {what} {_what(ctx, d.level if d else level)}",
        ), ""
    if d.state is DiagState.FAIL:
        return Climb(_diag_fault(v, DIAG_FAULT_KEY, DIAG_FAULT_ACTION), _failed(d, "scheduled "))
    verdict = "passed" if d.state is DiagState.PASS else f"gave no verdict ({d.detail})"
    return Action(
        ActionKind.UNCORDON,
        ctx.pool.name,
        v.node,
        f"scheduled dcgmi diag -r {d.level} {verdict}",
        instance_id=iid(v),
        action_reason=ActionReason.DIAGNOSTICS,
    ), ""


def diagnostics_stage(ctx: PoolContext, prog: Progress) -> StageResult:
    """Scheduled active diagnostics (pool diagnostics: {every, level}): cordon and
    drain healthy nodes whose last diagnostics (or launch) are `every` old, oldest first,
    within the disruption budget, so at most max_unavailable nodes of the pool are out at
    once (the ladder stage diagnoses and returns them). Not with the breaker open; a node
    out for diagnostics is no repair (no rate limit) and gets no replacement."""
    every_s, level = ctx.pool.diagnostics.every_s, ctx.pool.diagnostics.level
    if every_s is None or ctx.frozen:
        return StageResult(prog)

    def last(v: NodeView) -> datetime:
        if v.diag is not None:
            return v.diag.at
        return v.instance.launched_at if v.instance is not None else ctx.now

    due = sorted(
        (
            v
            for v in ctx.views
            if v.lifecycle is Lifecycle.HEALTHY
            and v.node not in prog.leaving
            and v.node not in prog.taken
            and (ctx.now - last(v)).total_seconds() >= every_s
        ),
        key=lambda v: (last(v), v.node),
    )
    actions: list[Action] = []
    pending: list[str] = []
    budget = prog.budget
    code = ActionReason.DIAGNOSTICS
    for v in due:
        if budget <= 0:
            pending.append(f"{v.node}: scheduled diagnostics wait for max_unavailable")
            continue
        budget -= 1
        why = (
            f"scheduled diagnostics (every {format_duration_s(every_s)}, {_what(ctx, level)}; "
            f"last {format_duration_s((ctx.now - last(v)).total_seconds())} ago)"
        )
        actions.extend(
            cordon_and_drain(ctx.pool.name, v, why, code, level=level, why=DiagWhy.SCHEDULED)
        )
    return StageResult(
        replace(prog, budget=budget, taken=prog.taken | {a.node for a in actions if a.node}),
        tuple(actions),
        pending=tuple(pending),
    )

"""The repair stages: nodes that leave service for a fault, and the ones already leaving.

terminate (drain finished or timed out), redrain (cordoned, never drained), stuck
(pending past provision_timeout), repair (cordon + drain what must be replaced, in
RepairRank order, within the disruption budget and the repair rate limit), impaired
(cordon only on the cloud's first impaired listing; uncordon when it clears) and watch
(what is part-way to a decision). The ladder (navarch.planner.ladder) decides what
happens to a drained node. Pure.
"""

from __future__ import annotations

import enum
from dataclasses import replace

from navarch.fleet.durations import format_duration_s
from navarch.planner.breaker import listed_impaired
from navarch.planner.context import (
    PoolContext,
    Progress,
    StageResult,
    cordon_and_drain,
    terminate_node,
)
from navarch.planner.context import iid as _iid
from navarch.planner.model import (
    LEAVING,
    SERVING,
    Acceptance,
    Action,
    ActionKind,
    ActionReason,
    Fault,
    Halt,
    HaltRule,
    Lifecycle,
    NodeView,
)
from navarch.planner.observe import fault_of
from navarch.planner.remedy_gate import gate
from navarch.planner.spares import ready_to_stand_in, serves_nothing
from navarch.planner.stockout import holds, launches_first
from navarch.report.health import FaultKey, Remedy, Status


class RepairRank(enum.IntEnum):
    """The order repair_stage takes nodes in (lower first) and whether each counts as a
    repair (toward safety.repairs_per_pool_per_hour). A preemption goes whatever the
    budget; a maintenance notice is no fault, so it waits for the budget but not for the
    rate limit; `apply --replace NODE` sits between offline and maintenance."""

    PREEMPTION = 0
    UNHEALTHY = 1
    OFFLINE = 2
    REQUESTED = 3  # `apply --replace NODE`
    MAINTENANCE = 4

    @property
    def counts_as_repair(self) -> bool:
        """True for ranks that count toward the hourly repair rate limit."""
        return self in (RepairRank.UNHEALTHY, RepairRank.OFFLINE, RepairRank.REQUESTED)


_RANK_OF = {
    Lifecycle.PREEMPTING: RepairRank.PREEMPTION,
    Lifecycle.UNHEALTHY: RepairRank.UNHEALTHY,
    Lifecycle.OFFLINE: RepairRank.OFFLINE,
    Lifecycle.MAINTENANCE: RepairRank.MAINTENANCE,
}


def terminate_stage(ctx: PoolContext, prog: Progress) -> StageResult:
    """Re-issue terminations in progress; terminate draining nodes whose drain finished or
    timed out (a breaker holds timed-out ones: their work may still be running); a node
    cordoned as a repair waits while its replacement could not launch (stockout.holds)."""
    h = ctx.pool.health
    actions: list[Action] = []
    halts: list[Halt] = []
    pending: list[str] = []
    held_nodes, first = set(prog.held), set(prog.launch_first)
    for v in ctx.views:
        if v.lifecycle is Lifecycle.TERMINATING:
            actions.append(
                terminate_node(
                    ctx.pool.name,
                    v,
                    f"terminate still in progress ({v.reason})",
                    ActionReason.TERMINATING,
                )
            )
        elif v.lifecycle is Lifecycle.DRAINING and v.node not in prog.taken:
            waited_s = (ctx.now - v.phase_at).total_seconds() if v.phase_at else 0.0
            if v.drained:
                why = "drain finished"
            elif waited_s >= h.drain_timeout_s:
                why = f"drain_timeout ({format_duration_s(h.drain_timeout_s)}) passed"
            else:
                pending.append(
                    f"{v.node}: draining for {format_duration_s(waited_s)} "
                    f"of {format_duration_s(h.drain_timeout_s)}"
                )
                continue
            if ctx.frozen and not v.drained and v.node not in ctx.options.replace:
                halts.append(
                    Halt(
                        ctx.pool.name, HaltRule.CIRCUIT_BREAKER, f"{v.node}: termination held back"
                    )
                )
                continue
            action = terminate_node(
                ctx.pool.name,
                v,
                f"{why}; {v.reason}",
                _drained_code(v),
                backoff=v.summary is None,
            )
            held = holds(ctx, prog, v, action)
            if held is not None:
                pending.append(held)
                held_nodes.add(v.node)
                continue
            if launches_first(ctx, prog, v, action):
                first.add(v.node)
            actions.append(action)
    return StageResult(
        replace(prog, held=frozenset(held_nodes), launch_first=frozenset(first)),
        tuple(actions),
        tuple(halts),
        pending=tuple(pending),
    )


def _drained_code(v: NodeView) -> ActionReason:
    """The termination's code for a draining node: a scale-down's stays SCALE_DOWN (so
    every count of scale-downs, the simulator's scale_down_terminations among them, sees it
    by its own code); else whether the drain finished or timed out."""
    if v.cordon is not None and v.cordon.scale_down:
        return ActionReason.SCALE_DOWN
    return ActionReason.DRAIN_FINISHED if v.drained else ActionReason.DRAIN_TIMEOUT


def redrain_stage(ctx: PoolContext, prog: Progress) -> StageResult:
    """Start draining nodes that were cordoned but never drained (e.g. SSH failed)."""
    return StageResult(
        prog,
        tuple(
            Action(
                ActionKind.DRAIN,
                ctx.pool.name,
                v.node,
                v.reason,
                action_reason=ActionReason.REDRAIN,
            )
            for v in ctx.views
            if v.lifecycle is Lifecycle.CORDONED and not v.impaired_cordon
        ),
    )


def impairment_cleared(v: NodeView) -> bool:
    """Whether v was cordoned on a first impaired listing that has cleared (returned now)."""
    return v.impaired_cordon and v.lifecycle is Lifecycle.CORDONED and not listed_impaired(v)


#: What the impaired stage does to a node, and the reason code it does it with.
_IMPAIRED_CODES = {
    ActionKind.CORDON: ActionReason.IMPAIRED_FIRST_SEEN,
    ActionKind.UNCORDON: ActionReason.IMPAIRMENT_CLEARED,
}


def _impaired_action(ctx: PoolContext, v: NodeView, kind: ActionKind) -> Action:
    """The impaired stage's cordon or uncordon of v, its reason the view's."""
    return Action(
        kind,
        ctx.pool.name,
        v.node,
        v.reason,
        instance_id=_iid(v),
        action_reason=_IMPAIRED_CODES[kind],
    )


def impaired_stage(ctx: PoolContext, prog: Progress) -> StageResult:
    """Cordon (only) the serving nodes the cloud lists impaired for the first time, within
    the disruption budget and never with the breaker open: no new work lands on a host
    that is likely dead while a run IMPAIRED_AFTER_S later confirms it (the repair stage
    then drains and replaces it; the count stage surges its replacement meanwhile).
    Uncordon a node so cordoned whose listing cleared before it was confirmed: one status
    check flap costs a cordon, never a termination (EC2 status checks run every minute:
    "Status checks for your instances")."""
    actions: list[Action] = []
    halts: list[Halt] = []
    pending: list[str] = []
    budget, leaving = prog.budget, list(prog.leaving)
    for v in ctx.views:
        if v.node in prog.taken:  # the ladder took it (--replace)
            continue
        if v.impaired_cordon and v.lifecycle is Lifecycle.CORDONED:
            if listed_impaired(v):
                pending.append(f"{v.node}: {v.reason}")  # out of service; a later run decides
            else:
                actions.append(_impaired_action(ctx, v, ActionKind.UNCORDON))
            continue
        if (
            v.lifecycle not in SERVING
            or not listed_impaired(v)
            or v.node in leaving
            or ctx.frozen
            or not ctx.pool.health.auto_replace
        ):
            continue
        halt = _repair_halt(ctx, v.node, budget, prog.rate_left, repair=False)
        if halt is not None:
            halts.append(halt)
            continue
        budget -= 1
        leaving.append(v.node)
        actions.append(_impaired_action(ctx, v, ActionKind.CORDON))
    return StageResult(
        replace(prog, budget=budget, leaving=tuple(leaving)),
        tuple(actions),
        tuple(halts),
        pending=tuple(pending),
    )


def stuck_stage(ctx: PoolContext, prog: Progress) -> StageResult:
    """Terminate instances pending past provision_timeout (they never served: no cordon),
    backing off their place like a capacity error so the next place is tried."""
    stuck = [v for v in ctx.views if v.lifecycle is Lifecycle.STUCK and v.instance]
    held = [v for v in stuck if ctx.frozen and v.node not in ctx.options.replace]
    if held:
        return StageResult(
            prog,
            halts=tuple(
                Halt(
                    ctx.pool.name,
                    HaltRule.CIRCUIT_BREAKER,
                    f"{v.node}: termination of a stuck instance held back",
                )
                for v in held
            ),
        )
    avoid = frozenset(
        (v.instance.provider, v.instance.zone, v.instance.instance_type, v.instance.spot)
        for v in stuck
        if v.instance
    )
    actions = tuple(
        terminate_node(ctx.pool.name, v, v.reason, ActionReason.PROVISION_TIMEOUT, backoff=True)
        for v in stuck
    )
    return StageResult(replace(prog, avoid=prog.avoid | avoid), actions)


def _repair_rank(ctx: PoolContext, v: NodeView) -> RepairRank | None:
    """The node's place in repair_stage's order, or None when it needs no replacement."""
    if v.lifecycle in _RANK_OF:
        return _RANK_OF[v.lifecycle]
    if v.node in ctx.options.replace and v.lifecycle in SERVING:
        return RepairRank.REQUESTED
    return None


_REPAIR_CODES = {
    Lifecycle.PREEMPTING: ActionReason.PREEMPTION,
    Lifecycle.OFFLINE: ActionReason.OFFLINE,
    Lifecycle.MAINTENANCE: ActionReason.MAINTENANCE,
}


#: A node that failed acceptance (navarch.planner.acceptance) is replaced as dead on arrival.
_ACCEPTANCE_CODES = {
    Acceptance.FAILED: ActionReason.ACCEPTANCE_FAILED,
    Acceptance.TIMED_OUT: ActionReason.ACCEPTANCE_TIMEOUT,
}


def _repair_code(v: NodeView, rank: RepairRank) -> ActionReason:
    """The action_reason of a repair: what made the node leave."""
    if rank is RepairRank.REQUESTED:
        return ActionReason.REPLACE_REQUESTED
    if v.impaired:
        return ActionReason.INSTANCE_IMPAIRED
    if v.acceptance in _ACCEPTANCE_CODES:
        return _ACCEPTANCE_CODES[v.acceptance]
    if v.lifecycle is Lifecycle.UNHEALTHY and v.summary is None:
        return ActionReason.BOOT_TIMEOUT
    return _REPAIR_CODES.get(v.lifecycle, ActionReason.UNHEALTHY)


def repair_stage(ctx: PoolContext, prog: Progress) -> StageResult:
    """Cordon + drain the nodes that must be replaced, within budget and rate limit.

    Order: preemption, unhealthy (fatal first), offline, requested (--replace),
    maintenance (soonest deadline first). A preemption goes whatever the budget; a
    maintenance notice is no fault: it waits for the budget but not the rate limit. A node
    named by `--replace` is the operator's explicit override of the circuit breaker and of
    auto_replace: false, for that node only (budget and rate limit still apply). A node
    that serves nothing (a warm spare, a node in acceptance: spares.serves_nothing) and a
    serving node a ready spare stands in for (spares.ready_to_stand_in; the spares stage
    promotes it) take no place of the budget: neither costs the pool capacity. A node
    the budget holds gets a pending line naming what holds it and the way out.
    """
    h = ctx.pool.health
    actions: list[Action] = []
    halts: list[Halt] = []
    pending: list[str] = []
    budget, rate_left, leaving = prog.budget, prog.rate_left, list(prog.leaving)
    free: set[str] = set()  # leaving this run without a place of the budget
    for rank, v in _ranked_repairs(ctx):
        requested = v.node in ctx.options.replace
        if not h.auto_replace and not requested:
            pending.append(f"{v.node}: {v.lifecycle.value} ({v.reason}); auto_replace is off")
            continue
        held = None if requested else gate(ctx, v)
        if held is not None:  # the remediation table's row says to wait, or only to alert
            pending.append(held)
            continue
        why = _repair_why(v, rank, requested)
        if v.lifecycle is not Lifecycle.PREEMPTING:
            if ctx.frozen and not requested:
                continue  # the circuit-breaker halt already says why
            so_far = replace(prog, leaving=tuple(leaving))
            stand_in = next(iter(ready_to_stand_in(ctx, so_far)), None)
            idle = serves_nothing(ctx, v)
            costs = not idle and stand_in is None
            halt = _repair_halt(
                ctx, v.node, budget if costs else 1, rate_left, repair=rank.counts_as_repair
            )
            if halt is not None:
                halts.append(halt)
                if halt.rule is HaltRule.DISRUPTION_BUDGET:
                    pending.append(_budget_held(ctx, v, leaving, free))
                continue
            budget -= costs
            rate_left -= rank.counts_as_repair
            if not costs:
                free.add(v.node)
            if not idle and stand_in is not None:
                why += f"; spare {stand_in} serves in its place"
        leaving.append(v.node)
        code = ActionReason.REPLACE_REQUESTED if requested else _repair_code(v, rank)
        actions.extend(
            cordon_and_drain(
                ctx.pool.name,
                v,
                why,
                code,
                repair=rank.counts_as_repair,
                fault=_repair_fault(v),
                idle=serves_nothing(ctx, v),
            )
        )
    return StageResult(
        replace(prog, budget=budget, rate_left=rate_left, leaving=tuple(leaving)),
        tuple(actions),
        tuple(halts),
        pending=tuple(pending),
    )


def _budget_held(ctx: PoolContext, v: NodeView, leaving: list[str], free: set[str]) -> str:
    """The pending line of sick node v held by the disruption budget: the nodes out of
    service that take max_unavailable's places, and the ways out."""
    out = sorted(
        {x.node for x in ctx.views if x.lifecycle in LEAVING and x.counts_against_budget}
        | {n for n in leaving if n not in free}
    )
    n = ctx.pool.health.max_unavailable_nodes(ctx.pool.target_nodes)
    return (
        f"{v.node}: {v.lifecycle.value} ({v.reason}), held: max_unavailable {n} is taken by "
        f"{', '.join(out) or 'nodes leaving this run'}; it is cordoned once one of them is "
        "back in service or gone (`navarch apply --replace NODE` for one that is silent), "
        "once a ready spare can take its place (nodes.spares), or with a larger "
        "health.max_unavailable"
    )


def _ranked_repairs(ctx: PoolContext) -> list[tuple[RepairRank, NodeView]]:
    """The nodes to replace with their rank, in the order repair_stage takes them."""
    ranked = [(r, v) for v in ctx.views if (r := _repair_rank(ctx, v)) is not None]
    ranked.sort(key=lambda rv: (rv[0], not rv[1].immediate, rv[1].deadline or ctx.now, rv[1].node))
    return ranked


def _repair_why(v: NodeView, rank: RepairRank, requested: bool) -> str:
    """A repair's reason in words, saying first when --replace asked for it."""
    if rank is RepairRank.REQUESTED:
        return "replacement requested (--replace)"
    return f"replacement requested (--replace); {v.reason}" if requested else v.reason


def _repair_halt(
    ctx: PoolContext, node: str, budget: int, rate_left: int, *, repair: bool
) -> Halt | None:
    """The disruption budget, or for a repair the repair rate limit, holding the cordon
    back, if either does."""
    pool, h = ctx.pool, ctx.pool.health
    if budget <= 0:
        return Halt(
            pool.name,
            HaltRule.DISRUPTION_BUDGET,
            f"{node} waits: max_unavailable {h.max_unavailable_nodes(pool.target_nodes)} reached",
            node=node,
        )
    if repair and rate_left <= 0:
        return Halt(
            pool.name,
            HaltRule.REPAIR_RATE_LIMIT,
            f"{node} waits: {ctx.spec.safety.repairs_per_pool_per_hour} repairs in the last hour",
            node=node,
        )
    return None


#: The fault kind of a failed acceptance: counted against the node's host like any fault, so
#: a host that fails acceptance twice is a lemon host (navarch.planner.hosts.lemon_hosts).
ACCEPTANCE_FAULT = "acceptance"


def _repair_fault(v: NodeView) -> Fault | None:
    """The fault a repair's cordon answers: an unhealthy report's, or a failed acceptance
    (ACCEPTANCE_FAULT, replaced: dead on arrival); never an impaired host's."""
    s = v.summary
    if v.acceptance is Acceptance.FAILED and s is not None:
        return Fault(FaultKey(ACCEPTANCE_FAULT), Remedy.REPLACE, s.boot_id, s.sequence)
    # A host the cloud calls impaired is replaced, not laddered: no in-place rung can
    # fix the hardware under it, and its report (if any) predates the impairment.
    if (
        v.lifecycle is Lifecycle.UNHEALTHY
        and s is not None
        and s.status is Status.UNHEALTHY
        and not v.impaired
    ):
        return fault_of(s)
    return None


def watch_stage(ctx: PoolContext, prog: Progress) -> StageResult:
    """Nothing to do yet, but the world is part-way to a decision: say so (pending)."""
    pending = tuple(
        f"{v.node}: {v.reason}"
        for v in ctx.views
        if v.lifecycle is Lifecycle.DEGRADED and v.streak > 0
    )
    return StageResult(prog, pending=pending)

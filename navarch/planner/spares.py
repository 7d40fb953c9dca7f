"""Warm spares: healthy nodes beyond a pool's target, kept cordoned from the scheduler and
promoted in the run a node leaves service for a fault. Pure.

A pool with ``nodes.spares: N`` (PoolSpec.spare_nodes) keeps up to N spares (lifecycle
SPARE; PoolMemory.spares remembers which nodes they are, so the designation survives
runs). This module alone decides the designation:

- ``spares_stage`` (a pool stage, after every stage that takes a node out of service and
  before the count stage): when fewer nodes serve than desired (a node left service for a
  fault, this run or earlier), it promotes that many spares (UNCORDON, action_reason
  SPARE_PROMOTED: the scheduler sees a healthy node at once); when more nodes serve than
  desired (healthy, degraded, or unhealthy by a fault its row only reports, which stays in
  service) and the spare set is short, it holds the newest healthy idle ones as spares
  (CORDON, action_reason SPARE: no drain, a fresh node holds no work);
- ``returning`` (called by the ladder for a node cured in place): back to service when the
  pool is short, into the spare set when the pool is at desired and the set is short
  (counting nodes still booting beyond desired, which become spares when healthy), else
  terminated as surplus at once (action_reason SCALE_DOWN): it was drained before its
  remedy, so it is never returned to service by the plan that retires it;
- ``held`` and ``not_serving`` tell the count stage which nodes are spares: they never
  count toward desired, count against max, and go first when the pool shrinks.

Why: a promoted spare is the fastest path from fault to serving (a node already booted and
tested: EC2 warm pools, ByteDance's ByteRobust); docs/design.md, Node lifecycle.
"""

from __future__ import annotations

from dataclasses import replace

from navarch.planner.context import PoolContext, Progress, StageResult, iid, terminate_node
from navarch.planner.model import (
    LEAVING,
    Acceptance,
    Action,
    ActionKind,
    ActionReason,
    Lifecycle,
    NodeView,
)
from navarch.planner.payloads import UncordonPayload
from navarch.planner.remedy_gate import alert_only

__all__ = [
    "held",
    "not_serving",
    "ready_to_stand_in",
    "returning",
    "serves_nothing",
    "spares_stage",
    "wanted",
]

#: A spare the agent's reports leave in doubt, or one booting again (a state that says so),
#: is still a spare: never promoted until SPARE (healthy), never counted as serving.
_HOLDING = frozenset(
    {
        Lifecycle.SPARE,
        Lifecycle.UNKNOWN,
        Lifecycle.STALE,
        Lifecycle.PROVISIONING,
        Lifecycle.BOOTING,
    }
)


def wanted(ctx: PoolContext, prog: Progress) -> int:
    """How many spares the pool keeps this run: nodes.spares, less what an autoscaled
    desired count above target leaves under max (spares count against max: the loader
    checks target + spares <= max, autoscaling may grow desired up to max)."""
    return max(0, min(ctx.pool.spare_nodes, ctx.pool.max_nodes - prog.desired))


def not_serving(ctx: PoolContext, prog: Progress) -> frozenset[str]:
    """Names of the pool's nodes that are spares after this run's decisions so far
    (PoolMemory.spares, less those promoted this run, plus those made spares this run),
    whatever their lifecycle: none of them counts toward desired."""
    return frozenset(ctx.pm.spares).difference(prog.promoted).union(prog.spared)


def held(ctx: PoolContext, prog: Progress) -> list[NodeView]:
    """The spares the pool holds after this run's decisions so far, in node-name order:
    spares (PoolMemory.spares) that are SPARE, in doubt (unknown, stale) or booting, not
    promoted this run, and nodes made spares this run. A spare that turned unhealthy, offline or preempted is not held: it
    is repaired like any node, and the set is refilled meanwhile."""
    spared = set(prog.spared)
    return [
        v
        for v in ctx.views
        if v.node in spared
        or (
            v.node not in prog.promoted
            and (v.lifecycle is Lifecycle.SPARE or v.node in ctx.pm.spares)
            and v.lifecycle in _HOLDING
        )
    ]


#: Acceptance verdicts of a node that has not served since its boot.
_JUDGED = frozenset({Acceptance.RUNNING, Acceptance.FAILED, Acceptance.TIMED_OUT})


def serves_nothing(ctx: PoolContext, v: NodeView) -> bool:
    """Whether v serves no work: a warm spare (PoolMemory.spares, whatever its health), a
    node in acceptance (cordoned for it, or judged by acceptance this run), or one that left
    service while it was either (Cordon.serves_nothing). Its leaving takes no place of
    the serving nodes' disruption budget: max_unavailable bounds the work a pool loses at
    once, and such a node holds none (docs/design.md, Safety rules, rule 3)."""
    return (
        v.node in ctx.pm.spares
        or (v.cordon is not None and v.cordon.serves_nothing)
        or v.lifecycle is Lifecycle.ACCEPTANCE
        or v.acceptance in _JUDGED
    )


def ready_to_stand_in(ctx: PoolContext, prog: Progress) -> list[str]:
    """The SPARE nodes the next serving node to leave this run may count on, in the order
    spares_stage promotes them: held spares that are healthy, less those a shortage
    already calls for (fewer nodes serve than desired); none while more nodes serve than
    desired (one leaving makes no shortage, so no spare is promoted). A serving node's
    cordon that one of them stands in for costs no capacity, so the disruption budget does
    not hold it."""
    short = prog.desired - len(_serving(ctx, prog))
    if short < 0:
        return []
    return [v.node for v in held(ctx, prog) if v.lifecycle is Lifecycle.SPARE][short:]


def _out_for_fault(v: NodeView, prog: Progress) -> bool:
    """Whether v left service (this run or earlier) and is not on its way back this run:
    cordoned, draining, remediating or terminating, other than for scheduled diagnostics
    (back within the hour) or by an operator (not a fault navarch saw)."""
    if v.node in prog.returned:
        return False
    if v.node in prog.leaving:
        return True
    return (
        v.lifecycle in LEAVING
        and v.lifecycle is not Lifecycle.OPERATOR_CORDONED
        and not (v.cordon is not None and v.cordon.diagnostics)
    )


#: Nodes on their way to serve but not serving yet: a spare stands in for a node that left
#: until its replacement has booted (and passed acceptance), then the replacement refills the set.
_NOT_YET = frozenset({Lifecycle.PROVISIONING, Lifecycle.BOOTING, Lifecycle.ACCEPTANCE})


def _serving(ctx: PoolContext, prog: Progress) -> list[NodeView]:
    """Nodes serving (spares, and nodes still provisioning, booting or in acceptance, excepted)."""
    spares = not_serving(ctx, prog)
    return [
        v
        for v in ctx.views
        if v.node not in spares
        and v.lifecycle not in (Lifecycle.STUCK, Lifecycle.SPARE, *_NOT_YET)
        and not _out_for_fault(v, prog)
    ]


def _left(ctx: PoolContext, prog: Progress) -> list[str]:
    """The nodes out of service a promotion stands in for: this run's first, then earlier
    ones by name (the names history shows)."""
    earlier = sorted(v.node for v in ctx.views if _out_for_fault(v, prog))
    return list(dict.fromkeys([*prog.leaving, *earlier]))


def spares_stage(ctx: PoolContext, prog: Progress) -> StageResult:
    """Promote spares into a short pool, or hold surplus healthy idle nodes as spares.

    Promotion goes whatever the circuit breaker (an uncordon only adds capacity); holding
    a new spare is a cordon, so an open breaker holds it back. A pool with no spares
    declared and none held plans nothing here.
    """
    spares = held(ctx, prog)
    if ctx.pool.spare_nodes <= 0 and not spares:
        return StageResult(prog)
    serving = _serving(ctx, prog)
    short = prog.desired - len(serving)
    if short > 0:
        return _promote(ctx, prog, [v for v in spares if v.lifecycle is Lifecycle.SPARE], short)
    room = wanted(ctx, prog) - len(spares)
    ready = [
        v
        for v in serving
        if v.lifecycle is Lifecycle.HEALTHY
        and v.node not in prog.taken
        and v.drift is None
        and v.summary is not None
        and not v.summary.process_count
    ]
    # A node unhealthy by a fault its row only reports stays in service for good, so it
    # counts as serving here as it does in `short`: else the set stays short while it lasts.
    surplus = sum(
        v.lifecycle in (Lifecycle.HEALTHY, Lifecycle.DEGRADED) or alert_only(ctx.pool, v)
        for v in serving
    )
    n = min(room, surplus - prog.desired, len(ready))
    if n <= 0 or ctx.frozen:
        return StageResult(prog)
    # The newest go first (node names end in a zero-padded index): a fresh node has no
    # work and nobody expects it yet.
    chosen = sorted(ready, key=lambda v: (len(v.node), v.node), reverse=True)[:n]
    actions = tuple(
        Action(
            ActionKind.CORDON,
            ctx.pool.name,
            v.node,
            f"held as a warm spare ({len(spares) + i} of {ctx.pool.spare_nodes} spares; "
            f"{len(serving) - i} of {prog.desired} desired nodes serve without it)",
            instance_id=iid(v),
            action_reason=ActionReason.SPARE,
        )
        for i, v in enumerate(chosen, start=1)
    )
    spared = prog.spared + tuple(v.node for v in chosen)
    return StageResult(replace(prog, spared=spared), actions)


def _promote(ctx: PoolContext, prog: Progress, ready: list[NodeView], short: int) -> StageResult:
    """Uncordon up to `short` SPARE nodes, each named as serving in place of a node out."""
    left = _left(ctx, prog)
    actions: list[Action] = []
    for i, v in enumerate(ready[:short]):
        instead = left[i] if i < len(left) else None
        why = (
            f"promoted to serve in place of {instead}"
            if instead
            else f"promoted to serve: {prog.desired - short + i} of {prog.desired} "
            "desired nodes serve"
        )
        actions.append(
            Action(
                ActionKind.UNCORDON,
                ctx.pool.name,
                v.node,
                why,
                instance_id=iid(v),
                payload=UncordonPayload(replaces=instead),
                action_reason=ActionReason.SPARE_PROMOTED,
            )
        )
    promoted = prog.promoted + tuple(a.node for a in actions if a.node is not None)
    return StageResult(replace(prog, promoted=promoted), tuple(actions))


def returning(
    ctx: PoolContext, prog: Progress, v: NodeView, uncordon: Action
) -> tuple[Action, Progress]:
    """Where node v, which the ladder cured in place, goes instead of `uncordon` (its
    RECOVERED uncordon), and the Progress after it.

    Back to service (the uncordon, v in Progress.returned) when fewer nodes serve than
    desired or a circuit breaker is open; else into the spare set (a CORDON with
    action_reason SPARE: it is already cordoned and drained) when the set has room beyond
    the nodes still booting past desired; else terminated as surplus (action_reason
    SCALE_DOWN): a surge replacement serves in its place, and the once-faulty node is the
    one that goes (docs/design.md, Node lifecycle). Never both uncordons and retires a node.
    """
    serving = len(_serving(ctx, prog))
    room = wanted(ctx, prog) - len(held(ctx, prog))
    if serving < prog.desired or ctx.frozen:
        return uncordon, replace(prog, returned=prog.returned + (v.node,))
    state = f"{serving} of {prog.desired} desired nodes serve without it"
    if serving - prog.desired < room:
        return Action(
            ActionKind.CORDON,
            ctx.pool.name,
            v.node,
            f"{uncordon.reason}; held as a warm spare ({state})",
            instance_id=iid(v),
            action_reason=ActionReason.SPARE,
        ), replace(prog, spared=prog.spared + (v.node,))
    return terminate_node(
        ctx.pool.name,
        v,
        f"{uncordon.reason}; scale down: surplus once cured ({state}), the once-faulty node goes",
        ActionReason.SCALE_DOWN,
    ), replace(prog, leaving=prog.leaving + (v.node,))

"""No node lost to a stockout: a faulty node's termination waits for its replacement. Pure.

When a pool's replacement launch failed on capacity (a place of the pool is remembered in
capacity backoff: PoolMemory.exhausted, kept until a launch there succeeds), terminating
a node that left service for a fault would leave the pool a node short for as long as
the stockout lasts (40-44 h in a 2-day stockout of every place for a replace-only pool).
So the termination is held: the node stays cordoned (out of the scheduler, counted
against max_unavailable like any node out of service) and, where its ladder still has an
in-place rung it has not tried for this fault within ladder_window, it is remedied in
place (navarch.planner.ladder); it is terminated once a replacement exists, i.e. the pool
has its desired count of nodes in service or on their way without it (``replacement_ready``),
or it comes back cured.

Which terminations are held (``holds``): those that answer a fault (the ladder's
replace, lemon and remedy-timeout rungs; the terminate stage's drain finished or timed
out for a node cordoned as a repair). Never held: `--replace NODE` in the same run (the
operator named it), `navarch destroy` (nothing will replace it), preemptions and
maintenance (the cloud takes the node anyway), scale down, drift, orphans, duplicates,
stuck instances, and a node that never reported (boot_timeout: it never served).

While a node is held the count stage launches its replacement beside it whenever a place
is open (under replacement: after-terminate too, whose replacement would otherwise wait
for a termination that waits for it).

Launch first (``launches_first``, replacement: after-terminate): such a pool would learn
of a stockout only from a launch tried after the termination, so the first faulty node of
an unannounced stockout would be lost. Its fault-answering termination, when the
replacement does not exist yet, goes with the replacement's launch in the same run: the
count stage launches it in the node's slot and ``link_launch_first`` makes the
termination wait for it (Action.after), so the executor terminates the node only once the
launch took. A launch that found no place with room (capacity, placement) leaves the node
cordoned, and the place in backoff makes the next runs hold it (``holds``); one the cloud
refused for quota is after-terminate's own case (no room above the running nodes), so the
termination goes on and the replacement follows it, as before.
"""

from __future__ import annotations

from dataclasses import replace

from navarch.fleet.spec import Replacement
from navarch.planner.context import PoolContext, Progress, StageResult
from navarch.planner.model import LEAVING, Action, ActionKind, ActionReason, Lifecycle, NodeView
from navarch.planner.payloads import TerminatePayload
from navarch.textsafe import counted

__all__ = [
    "HELD_REASONS",
    "hold_reason",
    "holds",
    "launches_first",
    "link_launch_first",
    "replacement_ready",
]

#: The termination reasons that answer a fault, and so wait for a replacement.
HELD_REASONS = frozenset(
    {
        ActionReason.REMEDY,
        ActionReason.LEMON,
        ActionReason.REMEDY_TIMEOUT,
        ActionReason.DRAIN_FINISHED,
        ActionReason.DRAIN_TIMEOUT,
        ActionReason.OFFLINE,
    }
)


def replacement_ready(ctx: PoolContext, prog: Progress, node: str) -> bool:
    """Whether `node`'s replacement exists: without it the pool still has its desired count
    of nodes in service or on their way (ready, booting, in acceptance, or sick but not yet
    taken out), none leaving this run. Other sick nodes count: a rule that waited for every
    node to be ready would hold the max_unavailable slots those nodes need to be repaired,
    and the pool would never get there."""
    gone = LEAVING | {Lifecycle.STUCK}
    present = sum(
        v.lifecycle not in gone and v.node != node and v.node not in prog.leaving for v in ctx.views
    )
    return present >= prog.desired


def hold_reason(ctx: PoolContext, prog: Progress, v: NodeView) -> str | None:
    """Why node v, out of service for a fault, is not terminated this run, or None.

    Held when a place of the pool is in capacity backoff or its last launch failed there
    (PoolMemory.exhausted) and v's replacement does not exist yet
    (``replacement_ready``). The line names the soonest place to reopen. Never raises.
    """
    exhausted = ctx.pm.exhausted
    if not exhausted or replacement_ready(ctx, prog, v.node):
        return None
    open_at = [e.until for e in exhausted if e.until > ctx.now]
    where = (
        f"every place it tried is out of capacity until {min(open_at):%H:%M} UTC"
        if open_at and len(open_at) == len(exhausted)
        else f"{counted(len(exhausted), 'place')} failed to launch it on capacity"
    )
    return (
        f"{v.node}: held cordoned, not terminated: its replacement could not launch "
        f"({where}); terminated once {prog.desired} nodes serve without it"
    )


def holds(ctx: PoolContext, prog: Progress, v: NodeView, action: Action) -> str | None:
    """``hold_reason`` for a termination that answers a fault (module docstring), None
    for any other action or termination."""
    return hold_reason(ctx, prog, v) if _answers_fault(ctx, v, action) else None


def launches_first(ctx: PoolContext, prog: Progress, v: NodeView, action: Action) -> bool:
    """Whether this termination, not held (``holds``), waits in the run for its
    replacement's launch: a termination that answers a fault (a drained node's only with
    its fault recorded), in a pool with replacement: after-terminate, whose replacement
    does not exist yet (module docstring). Such a replacement launches in the node's slot,
    so the pool has one instance above max until the node is gone, as under a hold."""
    # A drift's cordon is a repair too, but a drifted node serves until it goes: only a
    # fault loses capacity that a failed launch would not give back.
    drained = action.action_reason in (ActionReason.DRAIN_FINISHED, ActionReason.DRAIN_TIMEOUT)
    return (
        ctx.pool.health.replacement is Replacement.AFTER_TERMINATE
        and _answers_fault(ctx, v, action)
        and (v.fault is not None or not drained)
        and not replacement_ready(ctx, prog, v.node)
    )


def link_launch_first(result: StageResult) -> StageResult:
    """The pool's result with each launch-first termination (Progress.launch_first) set to
    run after the provision that replaces its node (Action.after); a termination whose
    replacement this run does not launch (no room, the launch cap) is left as it is."""
    first = result.progress.launch_first
    if not first:
        return result
    by_replaced = {
        a.replaces: a.node
        for a in result.actions
        if a.kind is ActionKind.PROVISION and a.replaces in first and a.node
    }
    actions = tuple(
        replace(a, payload=replace(a.carries(TerminatePayload), after=by_replaced[a.node]))
        if a.kind is ActionKind.TERMINATE and a.node in by_replaced
        else a
        for a in result.actions
    )
    return replace(result, actions=actions)


def _answers_fault(ctx: PoolContext, v: NodeView, action: Action) -> bool:
    """Whether `action` is a termination that answers v's fault (module docstring)."""
    if (
        action.kind is not ActionKind.TERMINATE
        or action.action_reason not in HELD_REASONS
        or v.node in ctx.options.replace
        or ctx.options.destroy
        # A node that never reported never served: holding it keeps no capacity, and it
        # would hold a max_unavailable slot its own replacement may need.
        or v.summary is None
    ):
        return False
    return action.action_reason not in (
        ActionReason.DRAIN_FINISHED,
        ActionReason.DRAIN_TIMEOUT,
    ) or bool((v.cordon is not None and v.cordon.repair) or v.fault is not None)

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
"""

from __future__ import annotations

from navarch.planner.context import PoolContext, Progress
from navarch.planner.model import LEAVING, Action, ActionKind, ActionReason, Lifecycle, NodeView
from navarch.wording import counted

__all__ = ["HELD_REASONS", "hold_reason", "holds", "replacement_ready"]

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
    of nodes in service or on their way (ready, booting, burning in, or sick but not yet
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
    if (
        action.kind is not ActionKind.TERMINATE
        or action.action_reason not in HELD_REASONS
        or v.node in ctx.options.replace
        or ctx.options.destroy
        # A node that never reported never served: holding it keeps no capacity, and it
        # would hold a max_unavailable slot its own replacement may need.
        or v.summary is None
    ):
        return None
    if action.action_reason in (ActionReason.DRAIN_FINISHED, ActionReason.DRAIN_TIMEOUT) and not (
        (v.cordon is not None and v.cordon.repair) or v.fault is not None
    ):
        return None
    return hold_reason(ctx, prog, v)

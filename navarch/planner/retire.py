"""The retire stages: nodes that leave for good because their pool did.

orphan_stage (nodes whose pool left fleet.yaml, drained and terminated with the pool's
remembered settings and budget, behind the orphan guard), duplicate_stage (one node name
on two instances), and `navarch destroy`'s stages (destroy_stage, force_destroy_stage).
A removed pool's remembered settings are navarch.planner.retired's. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from operator import attrgetter

from navarch.fleet.durations import format_duration_s
from navarch.fleet.spec import FleetSpec
from navarch.planner.context import (
    PlanOptions,
    PoolContext,
    Progress,
    StageResult,
    cordon_and_drain,
    run_stages,
    terminate_node,
)
from navarch.planner.model import (
    LEAVING,
    Action,
    ActionKind,
    ActionReason,
    Halt,
    HaltRule,
    Lifecycle,
    Memory,
    NodeView,
    PoolMemory,
)
from navarch.planner.observe import Duplicate
from navarch.planner.repair import redrain_stage, terminate_stage
from navarch.planner.retired import UNKNOWN, retired_pool
from navarch.textsafe import counted


def orphan_stage(
    spec: FleetSpec,
    views: Sequence[NodeView],
    memory: Memory,
    now: datetime,
    options: PlanOptions,
    *,
    frozen: bool,
) -> StageResult:
    """Retire the nodes whose pool left fleet.yaml the way any node leaves service.

    Per removed pool (in name order), with the settings navarch recorded while the pool was
    declared (PoolMemory.settings; unknown: navarch.planner.retired.UNKNOWN, scheduler none):
    terminate what finished draining or passed drain_timeout (terminate_stage), drain what
    was cordoned but not drained (redrain_stage), then cordon + drain the rest within the
    pool's remembered max_unavailable (retire_stage). frozen: the fleet circuit breaker is
    open (no new cordon, no termination at drain_timeout). `destroy` lifts the budget and
    the breaker; `destroy --force` terminates at once (force_destroy_stage).

    The orphan guard (a typo must not retire a fleet): when the orphans of pools whose
    retirement has not started (PoolMemory.retiring_since) outnumber
    safety.max_orphan_terminations, none of those pools is touched and a safety halt says
    how to go on; a retirement once started (by a run the guard let through, or with
    --allow-destroy) continues in later runs without the flag.
    """
    orphans = [v for v in views if v.orphan and options.includes(v.pool)]
    if not orphans:
        return StageResult(Progress(0, 0, 0))
    by_pool: dict[str, list[NodeView]] = {}
    for v in orphans:
        by_pool.setdefault(v.pool, []).append(v)
    out, held = _orphan_guard(spec, len(views), memory, options, by_pool)
    for name in sorted(set(by_pool) - held):
        pviews = tuple(sorted(by_pool[name], key=attrgetter("node")))
        r = _retire_pool(spec, name, pviews, memory.pool(name), now, options, frozen=frozen)
        out = out.then(r, out.progress)
    return out


def _orphan_guard(
    spec: FleetSpec,
    fleet_nodes: int,
    memory: Memory,
    options: PlanOptions,
    by_pool: dict[str, list[NodeView]],
) -> tuple[StageResult, frozenset[str]]:
    """The orphan guard: whether the removed pools not yet retiring hold more orphans than
    the limit allows; its halt and pending, and the pools it holds back."""
    new = sorted(p for p in by_pool if memory.pool(p).retiring_since is None)
    count = sum(len(by_pool[p]) for p in new)
    limit = spec.safety.orphan_limit(fleet_nodes)
    if count <= limit or options.allow_destroy or options.destroy:
        return StageResult(Progress(0, 0, 0)), frozenset()
    halt = Halt(
        "*",
        HaltRule.ORPHAN_GUARD,
        f"{counted(count, 'orphan node')} of removed "
        f"{'pool' if len(new) == 1 else 'pools'} {', '.join(new)} would be "
        f"drained and terminated, more than the limit of {limit}; if the pools were "
        "removed on purpose run apply with --allow-destroy (or raise "
        "safety.max_orphan_terminations), else restore them in fleet.yaml",
    )
    pending = tuple(f"{v.node}: {v.reason}" for p in new for v in by_pool[p])
    return StageResult(Progress(0, 0, 0), halts=(halt,), pending=pending), frozenset(new)


def _retire_pool(
    spec: FleetSpec,
    name: str,
    pviews: tuple[NodeView, ...],
    pm: PoolMemory,
    now: datetime,
    options: PlanOptions,
    *,
    frozen: bool,
) -> StageResult:
    """One removed pool's orphans through the retirement stages, with the settings and
    budget navarch remembers for it (a note when it remembers none)."""
    settings = pm.settings or UNKNOWN
    ctx = PoolContext(
        spec,
        retired_pool(name, pm.settings),
        pviews,
        pm,
        now,
        frozen and not options.destroy,
        options,
        0,
    )
    notes: tuple[str, ...] = ()
    if pm.settings is None and not options.force:
        notes = (
            f"orphans of removed pool {name}: its scheduler settings are not in "
            "navarch's state (written before navarch kept them), so they are drained "
            "as with scheduler none: terminated once a fresh report shows no GPU "
            f"processes, or after drain_timeout ({format_duration_s(settings.drain_timeout_s)})",
        )
    unavailable = sum(v.lifecycle in LEAVING for v in pviews)
    budget = len(pviews) if options.destroy else settings.max_unavailable - unavailable
    stages = (
        (force_destroy_stage,)
        if options.destroy and options.force
        else (terminate_stage, redrain_stage, retire_stage)
    )
    return run_stages(ctx, stages, StageResult(Progress(0, budget, 0), notes=notes))


def retire_stage(ctx: PoolContext, prog: Progress) -> StageResult:
    """Orphans of a removed pool still in service: cordon + drain them within the budget
    (the pool's remembered max_unavailable); the terminate stage finishes each as its drain
    finishes or drain_timeout passes. One the ladder already drained and remedied is
    terminated. An open circuit breaker holds new cordons (its halt says why)."""
    pool = ctx.pool
    actions: list[Action] = []
    waiting: list[str] = []
    budget, leaving = prog.budget, list(prog.leaving)
    for v in ctx.views:
        if v.lifecycle is Lifecycle.REMEDIATING:  # drained already
            actions.append(
                terminate_node(pool.name, v, f"{v.reason}; drained already", ActionReason.ORPHAN)
            )
            continue
        if v.lifecycle is not Lifecycle.ORPHAN or ctx.frozen:
            continue
        if budget <= 0:
            waiting.append(v.node)
            continue
        budget -= 1
        leaving.append(v.node)
        actions.extend(
            cordon_and_drain(
                pool.name,
                v,
                f"orphan: {v.reason}; draining before terminate",
                ActionReason.ORPHAN,
            )
        )
    halts = (
        (
            Halt(
                pool.name,
                HaltRule.DISRUPTION_BUDGET,
                f"{counted(len(waiting), 'orphan')} of removed pool {pool.name} wait "
                f"({', '.join(waiting)}): max_unavailable {pool.health.max_unavailable} "
                "out of service at once",
            ),
        )
        if waiting
        else ()
    )
    return StageResult(replace(prog, budget=budget, leaving=tuple(leaving)), tuple(actions), halts)


def duplicate_stage(duplicates: Sequence[Duplicate]) -> StageResult:
    """A node name carried by two instances: terminate the extra Memory does not know;
    when Memory knows neither, stop for a human (nothing on that name is touched)."""
    actions: list[Action] = []
    halts: list[Halt] = []
    for d in duplicates:
        ids = ", ".join(i.instance_id for i in d.instances)
        if d.extra is None:
            halts.append(
                Halt(
                    d.pool,
                    HaltRule.DUPLICATE_NODE,
                    f"{d.node} is carried by instances {ids} and navarch's state knows "
                    "none of them: nothing is done to this node name; terminate the "
                    "wrong instance by hand",
                )
            )
            continue
        actions.append(
            Action(
                ActionKind.TERMINATE,
                d.pool,
                d.node,
                f"duplicate: instance {d.extra.instance_id} also carries "
                f"navarch-node={d.node} (instances {ids}; the node is the one in "
                "navarch's state)",
                instance_id=d.extra.instance_id,
                action_reason=ActionReason.DUPLICATE,
            )
        )
    return StageResult(Progress(0, 0, 0), tuple(actions), tuple(halts))


# --- pool stages --------------------------------------------------------------------------


def destroy_stage(ctx: PoolContext, prog: Progress) -> StageResult:
    """`navarch destroy`: cordon + drain every node still serving (no budget, no breaker:
    a human asked for it); the terminate stage finishes them as drains complete."""
    why = "destroy: navarch destroy was asked to remove the pool"
    actions: list[Action] = []
    for v in ctx.views:
        if v.lifecycle is Lifecycle.REMEDIATING:  # drained already
            actions.append(terminate_node(ctx.pool.name, v, why, ActionReason.DESTROY))
            continue
        if v.lifecycle in LEAVING and v.lifecycle is not Lifecycle.OPERATOR_CORDONED:
            continue
        actions.extend(cordon_and_drain(ctx.pool.name, v, why, ActionReason.DESTROY))
    return StageResult(prog, tuple(actions))


def force_destroy_stage(ctx: PoolContext, prog: Progress) -> StageResult:
    """`navarch destroy --force`: terminate every node now, drained or not."""
    return StageResult(
        prog,
        tuple(
            terminate_node(
                ctx.pool.name,
                v,
                "destroy --force: terminated without waiting for a drain",
                ActionReason.DESTROY,
            )
            for v in ctx.views
        ),
    )

"""Acceptance in the scheduler: a node in acceptance is cordoned while its suite loads the GPUs,
uncordoned when it passed, and its multi-node NCCL test is started. Pure.

navarch.planner.acceptance decides where each node's acceptance stands (the view's lifecycle
ACCEPTANCE, its ``acceptance`` verdict and the ``peer`` it waits on); this stage turns that into
the scheduler's actions, after the spares stage (which may hold a passed node as a spare):

- a ACCEPTANCE node not yet cordoned for it (Cordon.acceptance) is cordoned
  (action_reason ACCEPTANCE): a Slurm node is IDLE as soon as slurmd registers, and a job
  that lands on it while ``dcgmi diag`` or ``all_reduce_perf`` runs is slowed and slows
  the test. A node back from an in-place remedy is already cordoned (its phase) and is
  the ladder's;
- a node cordoned for acceptance that now serves (healthy or degraded: passed) is
  uncordoned (ACCEPTANCE_PASSED), unless the spares stage holds it as a spare this run (its
  spare cordon keeps it out of the scheduler). A failed uncordon leaves the flag, so the
  next run plans it again;
- a ACCEPTANCE node whose single-node suite passed and that waits on a known-good peer
  (NodeView.peer, chosen by navarch.planner.acceptance.choose_peer) gets an NCCL_PEER action
  (ACCEPTANCE_PEER): the executor runs the pair through the pool's Slurm head node and
  records the result where the next run's verdict reads it (NodeMemory.peer_test);
- nodes that reported no acceptance run by their deadline (Acceptance.NO_RUN: the agent
  config or image lacks acceptance) stay held, and the pool gets one
  HaltRule.NO_ACCEPTANCE_RUN halt naming them, which is notified: a person fixes the
  image, no replacement would (a new node boots the same image).

Only pools whose cordon reaches a scheduler (scheduler slurm or kubernetes, or a cordon
playbook of the pool's own) or that keep warm spares are cordoned: with scheduler none
and no spares nothing would take work off the node, and the lifecycle already keeps it
from counting as serving. A pool with spares records the cordon even with scheduler none
(whatever places work reads it from navarch): a node that took work while in acceptance is
busy when it passes, and the spares stage holds only idle nodes, so the spare set would
never refill. An open circuit
breaker holds the acceptance cordon back, as every new cordon (docs/design.md, Safety rules, rule 4);
the uncordon and the peer test only add capacity or knowledge and go whatever the breaker.

A finding that holds nodes in acceptance (Acceptance.HELD: a setting or version drift of the
image, a declared version no serving node has, a suspect baseline) is one
HaltRule.ACCEPTANCE_HELD halt per pool and finding, notified; a serving node whose own figure
was refused as implausible is a note.
"""

from __future__ import annotations

from dataclasses import replace

from navarch.fleet.spec import PoolSpec, Scheduler
from navarch.planner.context import PoolContext, Progress, StageResult, iid
from navarch.planner.model import (
    READY,
    Acceptance,
    Action,
    ActionKind,
    ActionReason,
    Halt,
    HaltRule,
    Lifecycle,
)
from navarch.planner.payloads import PeerPayload
from navarch.planner.spares import not_serving

__all__ = ["acceptance_stage", "cordons_in_scheduler", "held_findings"]


def cordons_in_scheduler(pool: PoolSpec) -> bool:
    """Whether a cordon of the pool's node reaches a scheduler: scheduler slurm or
    kubernetes, or a cordon playbook of the pool's own."""
    return pool.scheduler is not Scheduler.NONE or "cordon" in pool.playbooks


def acceptance_stage(ctx: PoolContext, prog: Progress) -> StageResult:
    """Cordon nodes in acceptance, uncordon passed ones, start due multi-node NCCL tests
    (module docstring). Nodes an earlier stage acted on this run are left to it."""
    if ctx.pool.acceptance is None:
        return StageResult(prog)
    spares = not_serving(ctx, prog)
    busy = prog.taken | set(prog.leaving)
    in_scheduler = cordons_in_scheduler(ctx.pool) or ctx.pool.spare_nodes > 0
    actions: list[Action] = []
    for v in ctx.views:
        if v.node in busy or v.orphan:
            continue
        accepting = v.cordon is not None and v.cordon.acceptance
        if v.lifecycle is Lifecycle.ACCEPTANCE and in_scheduler and not accepting:
            if not ctx.frozen:
                actions.append(
                    Action(
                        ActionKind.CORDON,
                        ctx.pool.name,
                        v.node,
                        f"in acceptance: kept from the scheduler while the acceptance suite "
                        f"runs ({v.reason})",
                        instance_id=iid(v),
                        action_reason=ActionReason.ACCEPTANCE,
                    )
                )
        elif accepting and v.lifecycle in READY and v.node not in spares:
            actions.append(
                Action(
                    ActionKind.UNCORDON,
                    ctx.pool.name,
                    v.node,
                    f"acceptance passed: returned to the scheduler ({v.reason})",
                    instance_id=iid(v),
                    action_reason=ActionReason.ACCEPTANCE_PASSED,
                )
            )
        if v.lifecycle is Lifecycle.ACCEPTANCE and v.peer:
            actions.append(
                Action(
                    ActionKind.NCCL_PEER,
                    ctx.pool.name,
                    v.node,
                    f"multi-node NCCL all-reduce with the known-good {v.peer}",
                    instance_id=iid(v),
                    payload=PeerPayload(v.peer),
                    action_reason=ActionReason.ACCEPTANCE_PEER,
                )
            )
    taken = prog.taken | {a.node for a in actions if a.node is not None}
    halts, notes = held_findings(ctx)
    halts += no_run_halt(ctx)
    return StageResult(replace(prog, taken=frozenset(taken)), tuple(actions), halts, notes)


def held_findings(ctx: PoolContext) -> tuple[tuple[Halt, ...], tuple[str, ...]]:
    """(one HaltRule.ACCEPTANCE_HELD halt per distinct finding that holds nodes in acceptance of
    the pool, naming them; one note per serving node flagged for an implausible figure).
    A finding about the image or the pool's baseline is the pool's, so it is told once,
    not once per node (navarch.planner.acceptance decides both)."""
    held: dict[str, list[str]] = {}
    notes: list[str] = []
    for v in ctx.views:
        if v.acceptance is Acceptance.HELD and v.finding:
            held.setdefault(v.finding, []).append(v.node)
        elif v.finding and v.lifecycle in READY:
            notes.append(f"{v.node}: {v.finding}")
    halts = tuple(
        Halt(ctx.pool.name, HaltRule.ACCEPTANCE_HELD, f"{finding} (held: {', '.join(nodes)})")
        for finding, nodes in sorted(held.items())
    )
    return halts, tuple(notes)


def no_run_halt(ctx: PoolContext) -> tuple[Halt, ...]:
    """The pool's HaltRule.NO_ACCEPTANCE_RUN halt when any of its nodes reported no
    acceptance run by its deadline (Acceptance.NO_RUN), naming up to 3 of them; () otherwise.
    One per pool, so a notification sink gets it once while it lasts
    (navarch.notify.events.plan_conditions)."""
    nodes = sorted(v.node for v in ctx.views if v.acceptance is Acceptance.NO_RUN)
    if not nodes:
        return ()
    named = ", ".join(nodes[:3]) + (f" and {len(nodes) - 3} more" if len(nodes) > 3 else "")
    return (
        Halt(
            ctx.pool.name,
            HaltRule.NO_ACCEPTANCE_RUN,
            f"no acceptance run from {named} by deadline: the agent config/image lacks "
            "acceptance; held in acceptance, not replaced; give the image an agent that runs the "
            "pool's acceptance suite, then `navarch apply --replace NODE`",
        ),
    )

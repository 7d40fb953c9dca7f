"""Capacity Blocks for ML: a pool bought as a block launches only inside it. Pure.

A pool whose `aws:` section says `market: capacity-block` with the block's reservation id
(`capacity_reservation: cr-...`) has nodes only while the block runs:

- before the block starts (or while its reservation is not listed): desired is 0 and the
  plan says when the block starts; nothing launches outside it;
- while its lookup failed (PlanOptions.reservations_unknown): the pool holds as it is,
  no launch and no node leaving for the block;
- from its start: desired as declared, at most the block's size;
- from `drain_timeout` before EC2 begins terminating the block's instances (30 minutes
  before its end: BLOCK_TERMINATION_LEAD_S) every node is cordoned and drained, whatever
  the disruption budget (the cloud takes them all at that time, like a spot preemption),
  with the reason naming the block's end; nothing new launches.

The block's start and end come from DescribeCapacityReservations, read by the reconcile
run (navarch.inventory.reservations_of) into PlanOptions.reservations; `now` is the
run's clock, so a simulated clock drives it in tests.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from navarch.fleet.spec import PoolSpec
from navarch.inventory import BLOCK_TERMINATION_LEAD_S, Reservation
from navarch.planner.context import PoolContext, Progress, StageResult, cordon_and_drain
from navarch.planner.model import LEAVING, Action, ActionReason

__all__ = ["block_id", "block_stage", "drain_from"]


def block_id(pool: PoolSpec) -> str | None:
    """The Capacity Block reservation id of the pool's first placement that launches into
    one (aws market: capacity-block), or None."""
    for pl in pool.placed():
        if pl.options.get("market") == "capacity-block":
            rid = pl.options.get("capacity_reservation")
            return str(rid) if rid else None
    return None


def drain_from(block: Reservation, drain_timeout_s: int) -> datetime | None:
    """When the pool's nodes start to leave: drain_timeout before EC2 begins terminating
    the block's instances (its end less BLOCK_TERMINATION_LEAD_S); None without an end."""
    if block.end is None:
        return None
    return block.end - timedelta(seconds=BLOCK_TERMINATION_LEAD_S + drain_timeout_s)


def block_stage(ctx: PoolContext, prog: Progress) -> StageResult:
    """Clamp desired to the block's window and drain the pool before the block ends (see
    the module docstring). A pool without a Capacity Block is left as it is."""
    rid = block_id(ctx.pool)
    if rid is None:
        return StageResult(prog)
    block = ctx.options.reservations.get(rid)
    if block is None and rid in ctx.options.reservations_unknown:
        # The lookup failed this run: the block may well be running, so nothing leaves
        # for it, and nothing launches that it could not hold.
        present = sum(1 for v in ctx.views if v.lifecycle not in LEAVING)
        return StageResult(
            replace(prog, desired=min(prog.desired, present)),
            pending=(
                f"Capacity Block {rid} is unknown this run (its lookup failed): the pool "
                "holds as it is",
            ),
        )
    if block is None:
        return StageResult(
            replace(prog, desired=0),
            pending=(
                f"Capacity Block {rid} is not listed (DescribeCapacityReservations): "
                "nothing launches outside it",
            ),
        )
    if block.start is not None and ctx.now < block.start:
        return StageResult(
            replace(prog, desired=0),
            pending=(
                f"Capacity Block {rid} starts at {block.start:%Y-%m-%d %H:%M} UTC: launches wait for it",
            ),
        )
    leave_at = drain_from(block, ctx.pool.health.drain_timeout_s)
    if leave_at is None or ctx.now < leave_at:
        return StageResult(replace(prog, desired=min(prog.desired, block.total)))
    assert block.end is not None
    why = (
        f"Capacity Block {rid} ends at {block.end:%H:%M} UTC and EC2 terminates its "
        f"instances from {block.end - timedelta(seconds=BLOCK_TERMINATION_LEAD_S):%H:%M}: "
        "drained before"
    )
    actions: list[Action] = []
    leaving = list(prog.leaving)
    for v in ctx.views:
        if v.lifecycle in LEAVING or v.node in prog.leaving or v.node in prog.taken:
            continue
        actions.extend(cordon_and_drain(ctx.pool.name, v, why, ActionReason.CAPACITY_BLOCK_END))
        leaving.append(v.node)
    # The whole pool leaves at once, as in a spot preemption: the cloud takes every node
    # at the same time, so the disruption budget cannot pace it; nothing else leaves now.
    return StageResult(
        replace(prog, desired=0, budget=0, leaving=tuple(leaving)),
        tuple(actions),
        pending=() if actions else (why,),
    )

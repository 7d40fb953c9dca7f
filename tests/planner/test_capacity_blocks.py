"""A Capacity Block pool on a simulated clock: nothing launches before the block starts,
the pool fills at its start, and every node is cordoned and drained before EC2 reclaims
the block (30 minutes before its end), with the reason saying so. observe() and plan()
run as `navarch apply` does, the block's window given as DescribeCapacityReservations
reports it (PlanOptions.reservations), each plan applied by the ladder properties' world."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import builders
from test_ladder_properties import FLEET, World

from navarch.inventory import InstanceState, Reservation
from navarch.planner.context import PlanOptions
from navarch.planner.model import ActionKind, ActionReason, Plan
from navarch.planner.observe import observe
from navarch.planner.plan import plan

BLOCK = "cr-0123456789abcdef0"
START = builders.BASE_NOW + timedelta(hours=1)
END = START + timedelta(days=1)


def _spec(market: str = "capacity-block"):  # noqa: ANN202 - a FleetSpec
    pool = builders.pool_doc(
        target=2,
        max_nodes=3,
        zones=("us-east-1a",),
        instance_types=("p5.48xlarge",),
        provider="ec2",
        health={"drain_timeout": "30m"},
    )
    pool["aws"] = {"ami": "ami-12c6146b", "capacity_reservation": BLOCK, "market": market}
    doc = builders.fleet_doc(FLEET, {"a": pool})
    doc["providers"] = {"ec2": {"type": "aws", "region": "us-east-1"}}
    return builders.fleet_from_dict(doc)


def _run(
    world: World, reservations: dict[str, Reservation], unknown: frozenset[str] = frozenset()
) -> Plan:
    """One run at world.now with these reservations (unknown: ids whose lookup failed);
    the plan is applied to the world."""
    for n in world.nodes.values():  # launched nodes come up (on EC2) between runs
        n.instance = replace(n.instance, state=InstanceState.RUNNING, provider="ec2")
    reports = {k: r for k in world.nodes if (r := world.report(k)) is not None}
    inventory = tuple(n.instance for n in world.nodes.values())
    observed = observe(world.spec, inventory, reports, world.memory, world.now)
    p = plan(
        world.spec,
        observed.views,
        observed.memory,
        world.now,
        PlanOptions(reservations=reservations, reservations_unknown=unknown),
    )
    world.memory = observed.memory
    for a in p.actions:
        world.apply(a)
    return p


def test_a_capacity_block_pool_launches_at_the_block_start_and_drains_before_its_end() -> None:
    block = Reservation(
        "ec2", BLOCK, "p5.48xlarge", "us-east-1a", 2, 2, START, END, True, "scheduled"
    )
    world = World(
        _spec(), builders.BASE_NOW, {}, builders.memory(FLEET, [], [builders.pool_memory("a")])
    )
    before = _run(world, {BLOCK: block})
    assert not before.actions
    assert any(f"Capacity Block {BLOCK} starts at" in p for p in before.pending), before.pending

    world.now = START
    at_start = _run(world, {BLOCK: block})
    launched = [a for a in at_start.actions if a.kind is ActionKind.PROVISION]
    assert len(launched) == 2 and world.nodes

    world.now = END - timedelta(hours=2)  # well inside the block: nothing changes
    assert not _run(world, {BLOCK: block}).actions

    # drain_timeout (30m) before EC2 starts terminating (30m before the end).
    world.now = END - timedelta(minutes=60)
    at_end = _run(world, {BLOCK: block})
    cordons = [a for a in at_end.actions if a.kind is ActionKind.CORDON]
    assert sorted(a.node for a in cordons) == sorted(world.nodes)
    assert {a.action_reason for a in cordons} == {ActionReason.CAPACITY_BLOCK_END}
    assert f"Capacity Block {BLOCK} ends at" in cordons[0].reason
    assert not [a for a in at_end.actions if a.kind is ActionKind.PROVISION]


def test_a_capacity_block_pool_never_launches_when_its_block_is_not_listed() -> None:
    world = World(_spec(), START, {}, builders.memory(FLEET, [], [builders.pool_memory("a")]))
    p = _run(world, {})
    assert not p.actions
    assert any("is not listed" in line for line in p.pending)


def test_a_capacity_block_pool_never_launches_beyond_the_blocks_size_or_after_its_end() -> None:
    small = Reservation("ec2", BLOCK, "p5.48xlarge", "us-east-1a", 1, 1, START, END, True, "active")
    world = World(_spec(), START, {}, builders.memory(FLEET, [], [builders.pool_memory("a")]))
    launched = [a for a in _run(world, {BLOCK: small}).actions if a.kind is ActionKind.PROVISION]
    assert len(launched) == 1  # target 2, but the block holds one instance

    over = replace(small, available=1, state="expired")
    world = World(
        _spec(),
        END + timedelta(hours=1),
        {},
        builders.memory(FLEET, [], [builders.pool_memory("a")]),
    )
    after = _run(world, {BLOCK: over})
    assert not [a for a in after.actions if a.kind is ActionKind.PROVISION]
    assert any(f"Capacity Block {BLOCK} ends at" in p for p in after.pending), after.pending


def test_a_capacity_block_whose_lookup_failed_holds_the_pool_and_terminates_no_node() -> None:
    block = Reservation("ec2", BLOCK, "p5.48xlarge", "us-east-1a", 2, 2, START, END, True, "active")
    world = World(_spec(), START, {}, builders.memory(FLEET, [], [builders.pool_memory("a")]))
    _run(world, {BLOCK: block})
    nodes = set(world.nodes)
    assert len(nodes) == 2
    # DescribeCapacityReservations failed or was denied this run: the block is unknown,
    # not absent, so nothing leaves for it and nothing launches.
    held = _run(world, {}, frozenset({BLOCK}))
    assert not held.actions, held.actions
    assert set(world.nodes) == nodes
    assert any(f"Capacity Block {BLOCK} is unknown this run" in p for p in held.pending)

"""Hypothesis properties of where nodes sit (navarch.planner.hosts), over the random
worlds of test_properties with every owned instance put in one of two racks of a
simulated zone (topology (zone, rack, host)) and small block_fault thresholds: a node a block_fault halt names is never
rebooted, GPU-reset or terminated unless an operator asked for it; a provision never asks
for a block other than its replaced node's; and one rack's faults never hold another's."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st
from test_properties import PROPERTY, World, worlds

from navarch.planner.model import ActionKind, ActionReason, HaltRule
from navarch.planner.payloads import ProvisionPayload

_HELD = {ActionKind.REBOOT, ActionKind.RESET_GPU, ActionKind.TERMINATE}
BLOCK_FAULT_WINDOWS = st.sampled_from((600, 86400))


@st.composite
def racked_worlds(draw: st.DrawFn) -> World:
    world = draw(worlds())
    racked = tuple(
        replace(
            inst,
            host_id=f"h-{inst.instance_id}",
            topology=("z", f"rack-{draw(st.integers(0, 1))}", f"h-{inst.instance_id}"),
        )
        for inst in world.inventory
    )
    # Small thresholds and a wide window, so that a rack fault is common in small pools.
    pools = tuple(
        replace(
            pool,
            health=replace(
                pool.health,
                block_fault_after=draw(st.integers(2, 3)),
                block_fault_window_s=draw(BLOCK_FAULT_WINDOWS),
            ),
        )
        for pool in world.spec.pools
    )
    return replace(world, inventory=racked, spec=replace(world.spec, pools=pools))


def _named(message: str) -> tuple[str, set[str]]:
    """(block, nodes) a block_fault halt names: "... in block B: N nodes failed within
    W min (n1, n2, n3); ..."."""
    block = message.split("in block ", 1)[1].split(": ", 1)[0]
    nodes = message.split(" min (", 1)[1].split(");", 1)[0]
    return block, set(nodes.split(", "))


@PROPERTY
@given(racked_worlds())
def test_a_faulted_rack_is_never_remedied_node_by_node(world: World) -> None:
    observed, p = world.run()
    blocks = {v.node: v.instance.block for v in observed.views if v.instance is not None}
    for h in p.halts:
        if h.rule is not HaltRule.BLOCK_FAULT:
            continue
        block, nodes = _named(h.message)
        assert len(nodes) >= world.spec.pool(h.pool).health.block_fault_after, h.message
        assert {blocks[n] for n in nodes} == {block}, h.message
        for a in p.actions:
            if a.kind in _HELD and a.node in nodes:
                assert a.action_reason is ActionReason.REPLACE_REQUESTED, (a, h.message)
    for a in p.actions:
        if isinstance(a.payload, ProvisionPayload) and a.payload.block:
            assert a.replaces is not None and blocks.get(a.replaces) == a.payload.block, a

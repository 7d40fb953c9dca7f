"""Where a node physically sits: lemon hosts, topology blocks, hardware hand-back. Pure.

Three decisions live here, each in one place:
- hardware faults (``is_hardware``: navarch.fleet.remedies.hands_back): a node terminated for one of
  these has its host handed back to the cloud (Action.hand_back), where the provider can
  (Capability.REPORT_FAULTY_HOST);
- where a replacement asks to land (``launch_wish``): never on a lemon host (one the
  pool's nodes failed on LEMON_HOST_FAULTS times, PoolMemory.host_faults, or one a lemon
  was replaced from, PoolMemory.lemon_hosts), and, for a pool with ``topology:
  same_block``, in the topology block (Instance.block) of the node it replaces, or, once
  that node is gone, the block its vacancy recorded (navarch.planner.vacancies);
- rack or switch faults (``hold_block_faults``): when block_fault_after nodes of one block
  fail within block_fault_window and something beyond their own reports vouches for it
  (the cloud lists an instance of the block impaired, or more than block_fault_after
  nodes failed), the node-level ladder stops for the block (no reboot, GPU reset or
  termination of its nodes; they stay cordoned) for BLOCK_FAULT_HOLD_S, and a
  HaltRule.BLOCK_FAULT halt reports the block once, not N GPU faults.

Hosts and blocks come from the providers (Instance.host_id, Instance.topology); a cloud
that reports neither leaves all three inert.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from navarch.capabilities import Capability
from navarch.fleet.durations import format_duration_s
from navarch.fleet.remedies import hands_back
from navarch.fleet.spec import TopologyMatch
from navarch.planner.context import PoolContext, StageResult
from navarch.planner.model import (
    LEAVING,
    Action,
    ActionKind,
    ActionReason,
    Fault,
    Halt,
    HaltRule,
    Lifecycle,
    NodeView,
    PoolMemory,
)
from navarch.planner.payloads import ProvisionPayload, TerminatePayload
from navarch.planner.remedy_gate import alert_only
from navarch.textsafe import counted

#: Faults on one physical host before it is a lemon host that replacements avoid: the
#: second failure on a host that was replaced once is the host's, not the instance's.
LEMON_HOST_FAULTS = 2


def is_hardware(fault: Fault | None) -> bool:
    """Whether a node answering `fault` by replacement should hand its host back.

    The remediation table's rule (navarch.fleet.remedies.hands_back, with its sources).
    """
    return fault is not None and hands_back(fault.key.kind, fault.action)


def lemon_hosts(pm: PoolMemory) -> tuple[str, ...]:
    """The pool's lemon hosts, sorted: hosts with LEMON_HOST_FAULTS or more faults in
    PoolMemory.host_faults (kept for the pool's lemon_window, bounded in number by the
    executor), and hosts a lemon node was replaced from (PoolMemory.lemon_hosts)."""
    counts = Counter(host for host, _, _ in pm.host_faults)
    return tuple(
        sorted({h for h, n in counts.items() if n >= LEMON_HOST_FAULTS} | set(pm.lemon_hosts))
    )


def launch_wish(
    ctx: PoolContext,
    replaces: str | None,
    avoid: tuple[str, ...] | None = None,
    faulted: Collection[str] | None = None,
) -> tuple[tuple[str, ...], str, str]:
    """Where a provision of the pool asks to land -> (avoid_hosts, block, note).

    avoid_hosts: the pool's lemon hosts (``lemon_hosts``); block: with ``topology:
    same_block``, the block of the node replaced ("" otherwise, for a scale-up, or when
    that block has a rack or switch fault); note: why a same_block wish cannot be met
    ("" when it can, or nothing was asked): the replaced node has no reported block, or no
    provider of the pool can place by block (Capability.PLACE_BY_HOST). avoid and faulted:
    ``lemon_hosts(ctx.pm)`` and ``faulted_blocks(ctx)`` when the caller has them already
    (a plan asks once per pool, not once per provision).
    """
    avoid = lemon_hosts(ctx.pm) if avoid is None else avoid
    if ctx.pool.topology is not TopologyMatch.SAME_BLOCK or replaces is None:
        return avoid, "", ""
    old = next((v for v in ctx.views if v.node == replaces), None)
    block = old.instance.block if old is not None and old.instance is not None else ""
    if old is None:  # terminated already (after-terminate): where it sat was recorded
        block = next((v.block for v in ctx.pm.vacancies if v.node == replaces), "")
    if not block:
        return avoid, "", f"same_block: {replaces} has no reported topology block"
    if block in (faulted_blocks(ctx) if faulted is None else faulted):
        return avoid, "", f"same_block: block {block} has a rack or switch fault"
    providers = sorted({pl.provider for pl in ctx.pool.placed()})
    if not any(ctx.options.can(p, Capability.PLACE_BY_HOST) for p in providers):
        return (
            avoid,
            "",
            f"same_block: provider {', '.join(providers)} cannot place by block {block}",
        )
    return avoid, block, ""


def _failed_at(ctx: PoolContext, v: NodeView) -> datetime | None:
    """When node v last failed, if it is out of service for it: its newest recorded fault
    while it leaves service, or now while it is unhealthy or offline; None otherwise, and
    for a node unhealthy only by a fault its remediation table reports and never acts on
    (remedy_gate.alert_only: it gates nothing)."""
    if v.lifecycle in (Lifecycle.UNHEALTHY, Lifecycle.OFFLINE):
        return None if alert_only(ctx.pool, v) else ctx.now
    if v.lifecycle in LEAVING and v.lifecycle is not Lifecycle.OPERATOR_CORDONED and v.faults:
        return max(t for _, t in v.faults)
    return None


#: How long a rack or switch fault holds the node-level ladder of its block, from the
#: block's first failure in the window: time for the person the halt notifies to look at
#: the rack; after it the ladder resumes node by node, so a block halt made on false
#: reports costs the block's repairs at most this long.
BLOCK_FAULT_HOLD_S = 3600


@dataclass(frozen=True)
class BlockFault:
    """block_fault_after or more nodes of one topology block failed within one
    block_fault_window. nodes: the block's failed nodes, sorted; since: the first failure
    of that window; evidence: what vouches for a fault of the block beyond the nodes' own
    reports, in words ("" for none: it holds nothing); lapsed: BLOCK_FAULT_HOLD_S passed
    since `since`."""

    block: str
    nodes: tuple[str, ...]
    since: datetime
    evidence: str
    lapsed: bool

    @property
    def holds(self) -> bool:
        """Whether it stops the ladder for the block this run."""
        return bool(self.evidence) and not self.lapsed


def _evidence(ctx: PoolContext, block: str, failed: int) -> str:
    """What vouches for a fault of `block` beyond its nodes' own reports, or "": the cloud
    lists one of its instances impaired (its own status check), or more of its nodes failed
    than block_fault_after (what a node says about itself never decides another's fate, so
    block_fault_after nodes alone, compromised or broken, cannot halt their rack-mates)."""
    impaired = sorted(
        v.node
        for v in ctx.views
        if v.instance is not None and v.instance.block == block and v.instance.cloud_status.impaired
    )
    if impaired:
        return f"the cloud lists {', '.join(impaired)} impaired"
    if failed > ctx.pool.health.block_fault_after:
        return f"more than block_fault_after {ctx.pool.health.block_fault_after} nodes failed"
    return ""


def block_faults(ctx: PoolContext) -> tuple[BlockFault, ...]:
    """The pool's blocks where block_fault_after of the nodes, each still out of service for
    its fault, failed within one block_fault_window of each other, in block order; the
    newest such window of a block that still holds wins. A block holds (BlockFault.holds)
    with independent evidence (``_evidence``) for BLOCK_FAULT_HOLD_S from its first failure;
    it holds until enough nodes are back in service or replaced (a human's call), or the
    hold lapses."""
    h = ctx.pool.health
    by_block: dict[str, list[tuple[datetime, str]]] = {}
    for v in ctx.views:
        block = v.instance.block if v.instance is not None else ""
        at = _failed_at(ctx, v) if block else None
        if at is not None:
            by_block.setdefault(block, []).append((at, v.node))
    out: list[BlockFault] = []
    for block, failed in sorted(by_block.items()):
        failed.sort()
        nodes = tuple(sorted(n for _, n in failed))
        found: BlockFault | None = None
        for i in range(len(failed)):
            inside = [
                t
                for t, _ in failed[i:]
                if (t - failed[i][0]).total_seconds() <= h.block_fault_window_s
            ]
            if len(inside) < h.block_fault_after:
                continue
            since = failed[i][0]
            lapsed = (ctx.now - since).total_seconds() > BLOCK_FAULT_HOLD_S
            found = BlockFault(block, nodes, since, _evidence(ctx, block, len(inside)), lapsed)
            if found.holds:
                break
        if found is not None:
            out.append(found)
    return tuple(out)


def faulted_blocks(ctx: PoolContext) -> dict[str, tuple[str, ...]]:
    """Blocks whose rack or switch fault holds the ladder this run (``block_faults``,
    BlockFault.holds) -> their failed nodes (sorted)."""
    return {f.block: f.nodes for f in block_faults(ctx) if f.holds}


#: What the ladder may no longer do to a node of a faulted block: remedy it in place or
#: terminate it (a cordon and drain still keep work off it).
_HELD = frozenset({ActionKind.REBOOT, ActionKind.RESET_GPU, ActionKind.TERMINATE})


def _unheld(ctx: PoolContext, f: BlockFault) -> str:
    """The note for a block fault that holds nothing: no independent evidence, or lapsed."""
    what = (
        f"pool {ctx.pool.name}: block {f.block}: {counted(len(f.nodes), 'node')} failed "
        f"within {ctx.pool.health.block_fault_window_s // 60} min ({', '.join(f.nodes)})"
    )
    if not f.evidence:
        return (
            f"{what} by their own reports only: the ladder goes on node by node (a rack or "
            "switch fault needs the cloud's impaired listing or more than block_fault_after "
            "nodes)"
        )
    return (
        f"{what}; its rack or switch fault hold lapsed {format_duration_s(BLOCK_FAULT_HOLD_S)} "
        f"after its first failure at {f.since:%H:%M} UTC: the ladder resumes node by node"
    )


def hold_block_faults(
    ctx: PoolContext,
    result: StageResult,
    faults: Sequence[BlockFault] | None = None,
) -> StageResult:
    """`result` (the pool's stages folded) with the ladder stopped in faulted blocks.

    Drops reboots, GPU resets and terminations of the failed nodes of each block whose
    fault holds (``block_faults``, BlockFault.holds) unless an operator asked for them
    (`apply --replace`), and adds one HaltRule.BLOCK_FAULT halt per block naming it, its
    nodes, the evidence and when the hold lapses (a halt is notified: block_fault). A
    block fault that holds nothing is a note. Everything else stands. faults:
    ``block_faults(ctx)`` when the caller has it already.
    """
    found = block_faults(ctx) if faults is None else faults
    notes = tuple(_unheld(ctx, f) for f in found if not f.holds)
    held_nodes = {n for f in found if f.holds for n in f.nodes}
    actions = tuple(
        a
        for a in result.actions
        if not (
            a.kind in _HELD
            and a.node in held_nodes
            and a.action_reason is not ActionReason.REPLACE_REQUESTED
        )
    )
    h = ctx.pool.health
    halts = tuple(
        Halt(
            ctx.pool.name,
            HaltRule.BLOCK_FAULT,
            f"rack or switch fault in block {f.block}: {counted(len(f.nodes), 'node')} failed "
            f"within {h.block_fault_window_s // 60} min ({', '.join(f.nodes)}); {f.evidence}; "
            "the ladder stops for the block and its nodes stay cordoned until "
            f"{f.since + timedelta(seconds=BLOCK_FAULT_HOLD_S):%H:%M} UTC: check the rack "
            "and its switch, then `navarch uncordon` or `apply --replace` them",
        )
        for f in found
        if f.holds
    )
    return replace(result, actions=actions, halts=result.halts + halts, notes=result.notes + notes)


def with_hosts(ctx: PoolContext, result: StageResult) -> StageResult:
    """The pool's folded stage result with this module's decisions applied: each
    provision carries its launch wish (``launch_wish``, said in its reason too; a wish
    that cannot be met is a plan note), each termination for a hardware fault is marked hand_back
    (``is_hardware`` of its fault, or of the fault its node was cordoned for), and the
    ladder is held in faulted blocks (``hold_block_faults``)."""
    # A termination after a drain carries no fault of its own: the node's cordon recorded
    # the fault it left service for (and cleared it for a cordon of any other reason).
    faults: dict[str | None, Fault | None] = {v.node: v.fault for v in ctx.views}
    found = block_faults(ctx)
    avoid, faulted = lemon_hosts(ctx.pm), {f.block: f.nodes for f in found if f.holds}
    actions: list[Action] = []
    notes: list[str] = []
    for a in result.actions:
        p = a.payload
        if isinstance(p, ProvisionPayload):
            avoid_hosts, block, note = launch_wish(ctx, p.replaces, avoid, faulted)
            wish = ([f"in block {block}"] if block else []) + (
                [f"off lemon hosts {', '.join(avoid_hosts)}"] if avoid_hosts else []
            )
            a = replace(
                a,
                payload=replace(p, avoid_hosts=avoid_hosts, block=block),
                reason=a.reason + (f"; {' and '.join(wish)}" if wish else ""),
            )
            if note:
                notes.append(f"pool {ctx.pool.name}: {a.node} launches anywhere: {note}")
        elif isinstance(p, TerminatePayload):
            fault = p.fault or faults.get(a.node)
            if is_hardware(fault):
                a = replace(a, payload=replace(p, hand_back=True, fault=fault))
        actions.append(a)
    marked = replace(result, actions=tuple(actions), notes=result.notes + tuple(notes))
    return hold_block_faults(ctx, marked, found)

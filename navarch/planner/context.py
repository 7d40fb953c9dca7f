"""What every stage of the planner reads and returns: the run's options, one pool's
context, the progress earlier stages made, and a stage's result. Pure data."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from navarch.capabilities import Capability
from navarch.fleet.spec import FleetSpec, PoolSpec
from navarch.inventory import Reservation
from navarch.planner.model import (
    Action,
    ActionKind,
    ActionReason,
    DiagWhy,
    Fault,
    Halt,
    NodeView,
    PoolMemory,
)
from navarch.planner.payloads import CordonPayload, TerminatePayload


@dataclass(frozen=True)
class PlanOptions:
    """What one run is asked for beyond converging (CLI flags, Terraform's analogues).

    pools: only these pools and their orphans (`--pool`, Terraform -target); None: all.
    replace: nodes to replace through the usual surge/cordon/drain path (`--replace`).
    destroy: `navarch destroy`: every node of the chosen pools (and orphans) leaves.
    force: with destroy, terminate without waiting for drains.
    allow_destroy: lift the orphan guard for this run (`--allow-destroy`).
    allow_launches: this run may provision up to this many nodes even past
    safety.max_launches_per_run (`--allow-launches N`); 0: the cap holds.
    capabilities: what each provider can do, by fleet.yaml provider name, read by the
    caller from the opened providers (navarch.providers.base.capabilities_of); a provider
    not named here is asked for nothing beyond list, provision and terminate.
    reservations: the reservations the pools name, by id (navarch.inventory);
    reservations_unknown: those whose lookup failed this run.
    """

    pools: frozenset[str] | None = None
    replace: frozenset[str] = frozenset()
    destroy: bool = False
    force: bool = False
    allow_destroy: bool = False
    allow_launches: int = 0
    capabilities: Mapping[str, Capability] = field(default_factory=dict, hash=False)
    #: the reservations the pools name, by id, as their clouds report them
    #: (navarch.inventory.reservations_of); read by Capacity Block pools
    reservations: Mapping[str, Reservation] = field(default_factory=dict, hash=False)
    #: reservation ids whose lookup failed or was denied this run: neither listed nor
    #: known absent, so a Capacity Block pool holds as it is (navarch.planner.blocks)
    reservations_unknown: frozenset[str] = frozenset()
    #: nodes whose cordon their fault's remediation row's mode holds back in a pool that
    #: would allow it; set by plan() itself (navarch.planner.modes.row_held)
    mode_held: frozenset[str] = frozenset()

    def includes(self, pool: str) -> bool:
        return self.pools is None or pool in self.pools

    def can(self, provider: str, capability: Capability) -> bool:
        """Whether the provider of that fleet.yaml name declared `capability`."""
        return capability in self.capabilities.get(provider, Capability.NONE)


@dataclass(frozen=True)
class PoolContext:
    """What every stage of one pool reads. views: the pool's nodes by name; frozen: a
    circuit breaker (pool or fleet) is open; last_index: the highest node index used."""

    spec: FleetSpec
    pool: PoolSpec
    views: tuple[NodeView, ...]
    pm: PoolMemory
    now: datetime
    frozen: bool
    options: PlanOptions
    last_index: int


@dataclass(frozen=True)
class Progress:
    """What earlier stages of a pool's pipeline decided or used up.

    budget: nodes that may still leave service; rate_left: repairs that may still start;
    leaving: nodes this run cordons, whose replacements count provisions (in order);
    surge_for: (node, why) drifted nodes wanting a replacement before they leave;
    avoid: places this run found bad (a stuck instance's), skipped by provisioning.
    """

    desired: int
    budget: int
    rate_left: int
    leaving: tuple[str, ...] = ()
    surge_for: tuple[tuple[str, str], ...] = ()
    avoid: frozenset[tuple[str, str, str, bool]] = frozenset()
    taken: frozenset[str] = frozenset()  # nodes an earlier stage already acted on
    #: nodes out of service for a fault whose termination waits for a replacement that
    #: could not launch (navarch.planner.stockout): not present, their replacement wanted
    held: frozenset[str] = frozenset()
    #: nodes out of service for a fault terminated this run only once their replacement
    #: launched (replacement: after-terminate; navarch.planner.stockout.launches_first)
    launch_first: frozenset[str] = frozenset()
    # Warm spares (navarch.planner.spares): nodes made spares this run (cordoned from the
    # scheduler), spares promoted this run, and nodes the ladder returned to service.
    spared: tuple[str, ...] = ()
    promoted: tuple[str, ...] = ()
    returned: tuple[str, ...] = ()


@dataclass(frozen=True)
class StageResult:
    progress: Progress
    actions: tuple[Action, ...] = ()
    halts: tuple[Halt, ...] = ()
    notes: tuple[str, ...] = ()
    pending: tuple[str, ...] = ()

    def then(self, later: StageResult, progress: Progress | None = None) -> StageResult:
        """This result followed by `later`: their actions, halts, notes and pending in
        order, with `progress` (default: later's, the stage that ran last)."""
        return StageResult(
            later.progress if progress is None else progress,
            self.actions + later.actions,
            self.halts + later.halts,
            self.notes + later.notes,
            self.pending + later.pending,
        )


Stage = Callable[[PoolContext, Progress], StageResult]


def run_stages(ctx: PoolContext, stages: Sequence[Stage], start: StageResult) -> StageResult:
    """Run stages in order from `start`, folding their results into one StageResult."""
    out = start
    for stage in stages:
        out = out.then(stage(ctx, out.progress))
    return out


def iid(v: NodeView) -> str | None:
    """The node's instance id (None when the instance is unknown)."""
    return v.instance.instance_id if v.instance else None


def cordon_then_drain(cordon: Action) -> tuple[Action, Action]:
    """A cordon and the drain that always follows it: same pool, node, reason, instance and
    reason code (a node taken out of service is cordoned first so no new work lands, then
    drained)."""
    drain = Action(
        ActionKind.DRAIN,
        cordon.pool,
        cordon.node,
        cordon.reason,
        instance_id=cordon.instance_id,
        action_reason=cordon.action_reason,
    )
    return cordon, drain


def cordon_and_drain(
    pool: str,
    v: NodeView,
    reason: str,
    code: ActionReason,
    *,
    repair: bool = False,
    fault: Fault | None = None,
    level: int | None = None,
    why: DiagWhy | None = None,
    idle: bool = False,
) -> tuple[Action, Action]:
    """Take node v of pool out of service: its cordon (reason in words, code the
    action_reason, the node's instance id) and the drain that follows (cordon_then_drain).

    repair: the cordon starts a repair (counts toward repairs_per_pool_per_hour); fault: the
    fault it answers (recorded in Memory); level, why: a scheduled dcgmi diag's level and
    DiagWhy; idle: the node serves nothing (CordonPayload.idle).
    """
    return cordon_then_drain(
        Action(
            ActionKind.CORDON,
            pool,
            v.node,
            reason,
            instance_id=iid(v),
            payload=CordonPayload(repair, fault, level, why, idle),
            action_reason=code,
        )
    )


def terminate_node(
    pool: str,
    v: NodeView,
    reason: str,
    code: ActionReason,
    *,
    lemon: bool = False,
    fault: Fault | None = None,
    backoff: bool = False,
) -> Action:
    """The termination of node v of pool: reason in words, code the action_reason, the
    node's instance id. lemon: its instance id is remembered as a lemon's; fault: the fault
    it answers; backoff: back off the instance's place (it never came up)."""
    return Action(
        ActionKind.TERMINATE,
        pool,
        v.node,
        reason,
        instance_id=iid(v),
        payload=TerminatePayload(backoff=backoff, lemon=lemon, fault=fault),
        action_reason=code,
    )

"""plan(): the actions that bring each pool to its desired state, within the safety rules.

Pure: no I/O, no clock reads, no randomness; same inputs give the same plan, byte for byte.

A fleet's plan is made in two layers of named stages, each a pure function:
- fleet stages: the circuit breaker over the whole fleet, orphans (nodes whose pool left
  fleet.yaml: cordoned, drained and terminated with the pool's remembered settings and
  budget, behind the guard against mass termination), duplicate node names;
- pool stages, per pool in name order (POOL_STAGES): scale (desired count), ladder
  (navarch.planner.ladder: reset, reboot, return to service or replace drained and
  remedied nodes; operator cordons), silence (navarch.planner.silence: nodes cordoned
  because their reports fell silent return when they report again and are terminated only
  on independent evidence), terminate (nodes whose drain finished or timed out),
  redrain (cordoned, never drained), stuck (pending past provision_timeout), repair
  (cordon + drain what must be replaced), impaired (cordon only on the cloud's first
  impaired listing; uncordon when it clears), watch (what is part-way to a decision),
  diagnostics (navarch.planner.diagnostics: cordon + drain nodes due for scheduled dcgmi
  diag, within the budget; the ladder stage diagnoses and returns them), drift (in-place
  tag updates and rolling replacement), count (provision up to desired, or scale down).
  `navarch destroy` swaps in its own.
A stage (navarch.planner.context) reads a PoolContext (never changed) and the Progress earlier stages made (budget
left, nodes leaving, replacements wanted) and returns a StageResult: its actions, the
halts and notes it adds, the differences it leaves for later (pending), the new Progress.

Safety rules enforced here (DESIGN.md "Safety rules"):
 1. only owned nodes (observe() already split off foreign instances) are ever acted on;
 2. doubt never terminates: UNKNOWN/STALE nodes are left alone until OFFLINE, and are
    never picked for scale-down; an OFFLINE node is cordoned and replaced, but never
    terminated on its silence alone (navarch.planner.silence);
 3. disruption budget: cordoned + draining + terminating <= max_unavailable per pool
    (spot preemptions excepted: those nodes go anyway);
 4. circuit breaker: a pool (or the fleet) whose unhealthy+offline share reaches the
    threshold, with at least 2 such nodes, gets no new cordon, no scale-down, no rolling
    replacement and no termination on drain_timeout; a node already cordoned whose drain
    finished (its work is gone, its replacement already surged) is still terminated;
 5. repair rate limit: at most repairs_per_pool_per_hour repairs (replacements of sick,
    drifted or requested nodes) started per pool per hour;
 6. provisioning tries places in the pool's fallback order, skipping exhausted ones.
 7. launches per run: at most safety.max_launches_per_run provisions, the rest held back
    with a safety halt (navarch.planner.launches).
A node is only terminated after it was cordoned and drained (or drain_timeout passed),
except duplicates, stuck instances and `destroy --force`. A node is only rebooted or
GPU-reset after it was cordoned and its drain finished (never on drain_timeout), and never
while its latest report shows GPU processes; it is only returned to service automatically
after return_after healthy reports made after the remedy (a boot other than its fault's,
or for a GPU reset reports made after it) and, with return_requires_diag, a dcgmi diag
started after the remedy that passed. A node an operator
cordoned is never drained, terminated or uncordoned by a plan unless the operator names it
in `--replace`. Every lifecycle out of service has a deadline and a next step (drain_timeout,
boot_timeout, return_timeout, the diagnostics time limits: docs/health-policy.md "No node
stuck out of service"), so no node holds the disruption budget for good. Under surge_on:
replace a node the ladder remedies in place gets no surge replacement.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from functools import lru_cache
from operator import attrgetter

from navarch.durations import format_duration_s
from navarch.health import Status
from navarch.planner.context import (
    PlanOptions,
    PoolContext,
    Progress,
    Stage,
    StageResult,
    cordon_and_drain,
    terminate_node,
)
from navarch.planner.context import iid as _iid
from navarch.planner.diagnostics import diagnostics_stage
from navarch.planner.ladder import in_place, ladder_stage
from navarch.planner.launches import cap_launches
from navarch.planner.model import (
    LEAVING,
    READY,
    SERVING,
    Action,
    ActionKind,
    ActionReason,
    DiagState,
    DiagWhy,
    Fault,
    Halt,
    HaltRule,
    Lifecycle,
    Memory,
    NodeView,
    Place,
    Plan,
    PoolMemory,
)
from navarch.planner.observe import Duplicate, fault_of
from navarch.planner.pause import hold_all
from navarch.planner.retired import UNKNOWN, retired_pool
from navarch.planner.silence import silence_stage
from navarch.spec import FleetSpec, PoolSpec, Replacement, SurgeOn, UpdateStrategy
from navarch.wording import counted

HOUR_S = 3600
_REPLACE_ORDER = {
    Lifecycle.PREEMPTING: 0,
    Lifecycle.UNHEALTHY: 1,
    Lifecycle.OFFLINE: 2,
    Lifecycle.MAINTENANCE: 4,
}
_REQUESTED = 3  # `apply --replace NODE`, between offline and maintenance
# Providers whose instances' tags/labels can be changed in place (EC2 CreateTags, GCE
# setLabels, ARM tags PATCH, the local provider's machine file); others replace the node.
TAG_UPDATABLE = frozenset({"local", "aws", "gcp", "azure"})


def node_name(fleet: str, pool: str, index: int) -> str:
    """The node name for a pool's index-th node: <fleet>-<pool>-<nnnn> (GCP-label safe)."""
    return f"{fleet}-{pool}-{index:04d}"


@lru_cache(maxsize=65536)
def _index_of(fleet: str, pool: str, name: str) -> int:
    """The index in a node name (<fleet>-<pool>-<nnnn>), 0 for a name not of that form.
    Remembered: plan() asks twice for every node every run."""
    prefix = f"{fleet}-{pool}-"
    tail = name[len(prefix) :] if name.startswith(prefix) else ""
    return int(tail) if tail.isdigit() else 0


def _failed_return_diag(v: NodeView) -> bool:
    """A remedied node whose diagnostics after the remedy failed: sick, for the breaker (a
    DCGM broken fleet-wide fails them all, and would otherwise replace node after node)."""
    d = v.diag
    return (
        d is not None
        and d.why is DiagWhy.RETURN
        and d.state is DiagState.FAIL
        and v.rung_at is not None
        and d.started_at is not None
        and d.started_at >= v.rung_at
    )


#: What the breaker counts. Stale nodes count although they are never acted on: when the
#: store or the network fails, reports age together, spread over one heartbeat, and the
#: first of them pass offline_after while most are still only stale; counting only the
#: offline ones let a run cordon (and later terminate) healthy nodes before the breaker saw
#: the outage. Instances the cloud lists impaired count too, from their first listing: a
#: cloud's own outage must open the breaker before the first-sight cordons spend the budget.
_BREAKER_COUNTS = (Lifecycle.UNHEALTHY, Lifecycle.OFFLINE, Lifecycle.STALE)


def _breaker_tripped(views: Sequence[NodeView], pct: float) -> tuple[bool, int, int]:
    active = [v for v in views if v.lifecycle is not Lifecycle.TERMINATING and not v.orphan]
    sick = sum(
        v.lifecycle in _BREAKER_COUNTS or _failed_return_diag(v) or _listed_impaired(v)
        for v in active
    )
    total = len(active)
    return (sick >= 2 and total > 0 and sick * 100 >= pct * total), sick, total


def _sick_words(views: Sequence[NodeView]) -> str:
    """What the breaker counted, for its halt message."""
    failing = sum(
        _failed_return_diag(v)
        for v in views
        if v.lifecycle is not Lifecycle.TERMINATING and not v.orphan
    )
    impaired = sum(
        _listed_impaired(v) and v.lifecycle not in _BREAKER_COUNTS
        for v in views
        if v.lifecycle is not Lifecycle.TERMINATING and not v.orphan
    )
    notes = [f"{failing} failing their return diagnostics"] if failing else []
    notes += [f"{impaired} more listed impaired by the cloud"] if impaired else []
    return "unhealthy, stale or offline" + (f" ({'; '.join(notes)})" if notes else "")


def desired_count(
    pool: PoolSpec, views: Sequence[NodeView], pm: PoolMemory, now: datetime
) -> tuple[int, str | None]:
    """The pool's desired node count and, when autoscaling changes it, the reason.

    Reactive autoscaling on the mean reported GPU utilisation of healthy/degraded nodes:
    one node up above scale_up_at, one down below scale_down_at, at most once per cooldown.
    Returns (desired clamped to [min, max], reason or None).
    """
    base = pool.target_nodes
    if pm.desired is not None and pm.desired_from_target == pool.target_nodes:
        base = pm.desired
    base = min(max(base, pool.min_nodes), pool.max_nodes)
    a = pool.autoscaling
    if not a.enabled:
        return pool.target_nodes, None
    if pm.scaled_at is not None and (now - pm.scaled_at).total_seconds() < a.cooldown_s:
        return base, None
    utils = [
        v.summary.utilization_pct
        for v in views
        if v.lifecycle in READY and v.summary is not None and v.summary.utilization_pct is not None
    ]
    if not utils:
        return base, None
    mean = sum(utils) / len(utils)
    if mean > a.scale_up_at_pct and base < pool.max_nodes:
        return base + 1, f"mean GPU utilisation {mean:.0f}% > scale_up_at {a.scale_up_at_pct:.0f}%"
    if mean < a.scale_down_at_pct and base > pool.min_nodes:
        return (
            base - 1,
            f"mean GPU utilisation {mean:.0f}% < scale_down_at {a.scale_down_at_pct:.0f}%",
        )
    return base, None


PlaceKey = tuple[str, str, str, bool]  # (provider, zone, instance_type, spot)


def _blocked(pool: PoolSpec, pm: PoolMemory, now: datetime) -> dict[PlaceKey, datetime]:
    """Places in capacity backoff -> until when."""
    return {
        (e.provider, e.zone, e.instance_type, e.spot): e.until
        for e in pm.exhausted
        if e.until > now
    }


def open_places(
    pool: PoolSpec, pm: PoolMemory, now: datetime, avoid: frozenset[PlaceKey] = frozenset()
) -> tuple[Place, ...]:
    """The pool's places in launch order (zone, type, then placement: PoolSpec.
    launch_places), without those in capacity backoff or avoided. A Place names its
    provider only when the pool has several placements."""
    blocked = set(_blocked(pool, pm, now)) | avoid
    multi = len(pool.placed()) > 1
    return tuple(
        Place(p.zone, p.instance_type, p.spot, attempt, p.provider if multi else "", p.placement)
        for attempt, p in enumerate(pool.launch_places())
        if (p.provider, p.zone, p.instance_type, p.spot) not in blocked
    )


def placement_note(pool: PoolSpec, pm: PoolMemory, now: datetime, first: Place) -> str:
    """Why a provision skips placements tried before `first`, e.g. "aws: all places
    exhausted until 14:20" ("" when `first` is in the first placement in launch order)."""
    blocked = _blocked(pool, pm, now)
    placed = pool.placed()
    skipped: list[int] = []  # placements met before `first`, once each, in launch order
    for p in pool.launch_places():
        if p.placement == first.placement:
            break
        if p.placement not in skipped:
            skipped.append(p.placement)
    notes: list[str] = []
    for i in skipped:
        pl = placed[i]
        keys = [(pl.provider, z, t, s) for z, t, s in pl.places()]
        untils = [blocked[k] for k in keys if k in blocked]
        if untils:
            scope = "all places" if len(untils) == len(keys) else Place.count(len(untils))
            notes.append(f"{pl.label()}: {scope} exhausted until {min(untils):%H:%M}")
    return "; ".join(notes)


# --- the plan -----------------------------------------------------------------------------


def plan(
    spec: FleetSpec,
    views: Sequence[NodeView],
    memory: Memory,
    now: datetime,
    options: PlanOptions | None = None,
    duplicates: Sequence[Duplicate] = (),
) -> Plan:
    """Compute the Plan for one run.

    views: observe()'s NodeViews; memory: observe()'s folded Memory; now: aware UTC;
    options: the run's flags (PlanOptions); duplicates: observe()'s duplicate node names.
    Returns a Plan whose actions are in execution order, whose halts say which safety rule
    held what back and whose pending lines name every difference from fleet.yaml this run
    leaves (so a plan is "No changes" only when the world matches). A paused fleet
    (memory.pause, `navarch pause`) gets the same plan with every action held
    (navarch.planner.pause.hold_all). Never raises for any combination of valid inputs.
    Cost: O(N log N) in the number of nodes.
    """
    options = options or PlanOptions()
    fleet = _fleet_stages(spec, views, memory, now, options, duplicates)
    by_pool: dict[str, list[NodeView]] = {}
    for v in views:
        by_pool.setdefault(v.pool, []).append(v)
    last_index: dict[str, int] = {}
    for nm in memory.nodes:
        last_index[nm.pool] = max(
            last_index.get(nm.pool, 0), _index_of(spec.name, nm.pool, nm.node)
        )
    results: list[StageResult] = [fleet]
    for pool in sorted(spec.pools, key=lambda p: p.name):
        if not options.includes(pool.name):
            continue
        pviews = tuple(sorted(by_pool.get(pool.name, ()), key=lambda v: v.node))
        pm = memory.pool(pool.name)
        top = max(
            [pm.next_index - 1, last_index.get(pool.name, 0)]
            + [_index_of(spec.name, pool.name, v.node) for v in pviews]
        )
        results.append(
            _plan_pool(
                spec,
                pool,
                pviews,
                pm,
                now,
                options,
                top,
                any(h.rule is HaltRule.CIRCUIT_BREAKER for h in fleet.halts),
            )
        )
    blocked = {d.node for d in duplicates}
    actions = tuple(
        a for r in results for a in r.actions if a.node not in blocked or a in fleet.actions
    )
    actions, capped = cap_launches(actions, spec.safety.max_launches_per_run)
    halts = tuple(h for r in results for h in r.halts) + capped
    out = Plan(
        fleet=spec.name,
        created_at=now,
        actions=actions,
        halts=halts,
        notes=tuple(n for r in results for n in r.notes),
        pending=tuple(p for r in results for p in r.pending),
        state_serial=memory.serial,
        views=tuple(views),
    )
    out = hold_all(out, memory.pause)  # a paused fleet: planned, reported, acted on by no one
    return replace(out, observation_fingerprint=observation_fingerprint(views, out.halts))


def observation_fingerprint(views: Sequence[NodeView], halts: Sequence[Halt]) -> str:
    """A digest of what the plan was made from beyond inventory and state: each node's
    lifecycle, accepted report sequence, rejection and drift, and the halts. `apply PLAN`
    refuses a saved plan whose fingerprint no longer matches (a node recovered, a breaker
    opened). 16 hex characters."""
    lines = [
        f"{v.node}|{v.lifecycle.value}|{v.summary.sequence if v.summary else None}|"
        f"{v.rejected}|{v.drift}|{v.tags_drift}\n"
        for v in sorted(views, key=attrgetter("node"))
    ]
    lines.extend(f"halt|{x.pool}|{x.rule}\n" for x in halts)
    return hashlib.sha256("".join(lines).encode()).hexdigest()[:16]


def _plan_pool(
    spec: FleetSpec,
    pool: PoolSpec,
    views: tuple[NodeView, ...],
    pm: PoolMemory,
    now: datetime,
    options: PlanOptions,
    last_index: int,
    fleet_tripped: bool,
) -> StageResult:
    """Run the pool's stages in order, folding their results into one StageResult."""
    h = pool.health
    halts: list[Halt] = []
    tripped, sick, total = _breaker_tripped(views, spec.safety.circuit_breaker_pct)
    if tripped and not options.destroy:
        halts.append(
            Halt(
                pool.name,
                HaltRule.CIRCUIT_BREAKER,
                f"{sick} of {total} nodes are {_sick_words(views)} "
                f"(>= {spec.safety.circuit_breaker_pct:g}%): no new cordon or termination in "
                "this pool; a mass failure is more often a broken agent, network or store",
            )
        )
    frozen = (tripped or fleet_tripped) and not options.destroy
    ctx = PoolContext(spec, pool, views, pm, now, frozen, options, last_index)
    unavailable = sum(v.lifecycle in LEAVING for v in views)
    recent = [r for r in pm.repairs if (now - r).total_seconds() < HOUR_S]
    progress = Progress(
        desired=pool.target_nodes,
        budget=h.max_unavailable_nodes(pool.target_nodes) - unavailable,
        rate_left=spec.safety.repairs_per_pool_per_hour - len(recent),
    )
    stages = DESTROY_STAGES if options.destroy else POOL_STAGES
    if options.destroy and options.force:
        stages = (force_destroy_stage,)
    return _run_stages(ctx, stages, StageResult(progress, halts=tuple(halts)))


def _run_stages(ctx: PoolContext, stages: Sequence[Stage], start: StageResult) -> StageResult:
    """Run stages in order from `start`, folding their results into one StageResult."""
    out = start
    for stage in stages:
        out = out.then(stage(ctx, out.progress))
    return out


# --- fleet stages -------------------------------------------------------------------------


def _fleet_stages(
    spec: FleetSpec,
    views: Sequence[NodeView],
    memory: Memory,
    now: datetime,
    options: PlanOptions,
    duplicates: Sequence[Duplicate],
) -> StageResult:
    """Fleet circuit breaker, orphans, duplicate node names."""
    halts: list[Halt] = []
    tripped, sick, total = _breaker_tripped(views, spec.safety.fleet_circuit_breaker_pct)
    if tripped and not options.destroy:
        halts.append(
            Halt(
                "*",
                HaltRule.CIRCUIT_BREAKER,
                f"{sick} of {total} nodes in the fleet are {_sick_words(views)} "
                f"(>= {spec.safety.fleet_circuit_breaker_pct:g}%): no new cordon or "
                "termination anywhere; check the agents, the store and the network first",
            )
        )
    orphans = orphan_stage(
        spec, views, memory, now, options, frozen=tripped and not options.destroy
    )
    dups = duplicate_stage(duplicates)
    none = Progress(0, 0, 0)
    return StageResult(none, halts=tuple(halts)).then(orphans, none).then(dups, none)


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
    return _run_stages(ctx, stages, StageResult(Progress(0, budget, 0), notes=notes))


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


def scale_stage(ctx: PoolContext, prog: Progress) -> StageResult:
    """Desired count: the target, or autoscaling's (a SCALE action records a change)."""
    desired, reason = desired_count(ctx.pool, ctx.views, ctx.pm, ctx.now)
    actions = (
        ()
        if reason is None
        else (
            Action(
                ActionKind.SCALE,
                ctx.pool.name,
                None,
                reason,
                desired=desired,
                action_reason=(
                    ActionReason.SCALE_UP if "scale_up_at" in reason else ActionReason.SCALE_DOWN
                ),
            ),
        )
    )
    return StageResult(replace(prog, desired=desired), actions)


def terminate_stage(ctx: PoolContext, prog: Progress) -> StageResult:
    """Re-issue terminations in progress; terminate draining nodes whose drain finished or
    timed out (a breaker holds timed-out ones: their work may still be running)."""
    h = ctx.pool.health
    actions: list[Action] = []
    halts: list[Halt] = []
    pending: list[str] = []
    for v in ctx.views:
        if v.lifecycle is Lifecycle.TERMINATING:
            actions.append(
                terminate_node(
                    ctx.pool.name,
                    v,
                    f"terminate still in progress ({v.reason})",
                    ActionReason.TERMINATING,
                )
            )
        elif v.lifecycle is Lifecycle.DRAINING and v.node not in prog.taken:
            waited_s = (ctx.now - v.phase_at).total_seconds() if v.phase_at else 0.0
            if v.drained:
                why = "drain finished"
            elif waited_s >= h.drain_timeout_s:
                why = f"drain_timeout ({format_duration_s(h.drain_timeout_s)}) passed"
            else:
                pending.append(
                    f"{v.node}: draining for {format_duration_s(waited_s)} "
                    f"of {format_duration_s(h.drain_timeout_s)}"
                )
                continue
            if ctx.frozen and not v.drained and v.node not in ctx.options.replace:
                halts.append(
                    Halt(
                        ctx.pool.name, HaltRule.CIRCUIT_BREAKER, f"{v.node}: termination held back"
                    )
                )
                continue
            actions.append(
                terminate_node(
                    ctx.pool.name,
                    v,
                    f"{why}; {v.reason}",
                    ActionReason.DRAIN_FINISHED if v.drained else ActionReason.DRAIN_TIMEOUT,
                    backoff=v.summary is None,
                )
            )
    return StageResult(prog, tuple(actions), tuple(halts), pending=tuple(pending))


def redrain_stage(ctx: PoolContext, prog: Progress) -> StageResult:
    """Start draining nodes that were cordoned but never drained (e.g. SSH failed)."""
    return StageResult(
        prog,
        tuple(
            Action(
                ActionKind.DRAIN,
                ctx.pool.name,
                v.node,
                v.reason,
                action_reason=ActionReason.REDRAIN,
            )
            for v in ctx.views
            if v.lifecycle is Lifecycle.CORDONED and not v.impaired_cordon
        ),
    )


def _listed_impaired(v: NodeView) -> bool:
    """Whether the cloud lists v's instance impaired on this run."""
    return v.instance is not None and v.instance.cloud_status.impaired


def _impairment_cleared(v: NodeView) -> bool:
    """Whether v was cordoned on a first impaired listing that has cleared (returned now)."""
    return v.impaired_cordon and v.lifecycle is Lifecycle.CORDONED and not _listed_impaired(v)


#: What the impaired stage does to a node, and the reason code it does it with.
_IMPAIRED_CODES = {
    ActionKind.CORDON: ActionReason.IMPAIRED_FIRST_SEEN,
    ActionKind.UNCORDON: ActionReason.IMPAIRMENT_CLEARED,
}


def _impaired_action(ctx: PoolContext, v: NodeView, kind: ActionKind) -> Action:
    """The impaired stage's cordon or uncordon of v, its reason the view's."""
    return Action(
        kind,
        ctx.pool.name,
        v.node,
        v.reason,
        instance_id=_iid(v),
        action_reason=_IMPAIRED_CODES[kind],
    )


def impaired_stage(ctx: PoolContext, prog: Progress) -> StageResult:
    """Cordon (only) the serving nodes the cloud lists impaired for the first time, within
    the disruption budget and never with the breaker open: no new work lands on a host
    that is likely dead while a run IMPAIRED_AFTER_S later confirms it (the repair stage
    then drains and replaces it; the count stage surges its replacement meanwhile).
    Uncordon a node so cordoned whose listing cleared before it was confirmed: one status
    check flap costs a cordon, never a termination (EC2 status checks run every minute:
    "Status checks for your instances")."""
    actions: list[Action] = []
    halts: list[Halt] = []
    pending: list[str] = []
    budget, leaving = prog.budget, list(prog.leaving)
    for v in ctx.views:
        if v.node in prog.taken:  # the ladder took it (--replace)
            continue
        if v.impaired_cordon and v.lifecycle is Lifecycle.CORDONED:
            if _listed_impaired(v):
                pending.append(f"{v.node}: {v.reason}")  # out of service; a later run decides
            else:
                actions.append(_impaired_action(ctx, v, ActionKind.UNCORDON))
            continue
        if (
            v.lifecycle not in SERVING
            or not _listed_impaired(v)
            or v.node in leaving
            or ctx.frozen
            or not ctx.pool.health.auto_replace
        ):
            continue
        halt = _repair_halt(ctx, v.node, budget, prog.rate_left, repair=False)
        if halt is not None:
            halts.append(halt)
            continue
        budget -= 1
        leaving.append(v.node)
        actions.append(_impaired_action(ctx, v, ActionKind.CORDON))
    return StageResult(
        replace(prog, budget=budget, leaving=tuple(leaving)),
        tuple(actions),
        tuple(halts),
        pending=tuple(pending),
    )


def stuck_stage(ctx: PoolContext, prog: Progress) -> StageResult:
    """Terminate instances pending past provision_timeout (they never served: no cordon),
    backing off their place like a capacity error so the next place is tried."""
    stuck = [v for v in ctx.views if v.lifecycle is Lifecycle.STUCK and v.instance]
    held = [v for v in stuck if ctx.frozen and v.node not in ctx.options.replace]
    if held:
        return StageResult(
            prog,
            halts=tuple(
                Halt(
                    ctx.pool.name,
                    HaltRule.CIRCUIT_BREAKER,
                    f"{v.node}: termination of a stuck instance held back",
                )
                for v in held
            ),
        )
    avoid = frozenset(
        (v.instance.provider, v.instance.zone, v.instance.instance_type, v.instance.spot)
        for v in stuck
        if v.instance
    )
    actions = tuple(
        terminate_node(ctx.pool.name, v, v.reason, ActionReason.PROVISION_TIMEOUT, backoff=True)
        for v in stuck
    )
    return StageResult(replace(prog, avoid=prog.avoid | avoid), actions)


def _repair_rank(ctx: PoolContext, v: NodeView) -> int | None:
    if v.lifecycle in _REPLACE_ORDER:
        return _REPLACE_ORDER[v.lifecycle]
    if v.node in ctx.options.replace and v.lifecycle in SERVING:
        return _REQUESTED
    return None


_REPAIR_CODES = {
    Lifecycle.PREEMPTING: ActionReason.PREEMPTION,
    Lifecycle.OFFLINE: ActionReason.OFFLINE,
    Lifecycle.MAINTENANCE: ActionReason.MAINTENANCE,
}


def _repair_code(v: NodeView, rank: int) -> ActionReason:
    """The action_reason of a repair: what made the node leave."""
    if rank == _REQUESTED:
        return ActionReason.REPLACE_REQUESTED
    if v.impaired:
        return ActionReason.INSTANCE_IMPAIRED
    if v.lifecycle is Lifecycle.UNHEALTHY and v.summary is None:
        return ActionReason.BOOT_TIMEOUT
    return _REPAIR_CODES.get(v.lifecycle, ActionReason.UNHEALTHY)


def repair_stage(ctx: PoolContext, prog: Progress) -> StageResult:
    """Cordon + drain the nodes that must be replaced, within budget and rate limit.

    Order: preemption, unhealthy (fatal first), offline, requested (--replace),
    maintenance (soonest deadline first). A preemption goes whatever the budget; a
    maintenance notice is no fault: it waits for the budget but not the rate limit. A node
    named by `--replace` is the operator's explicit override of the circuit breaker and of
    auto_replace: false, for that node only (budget and rate limit still apply).
    """
    h, pool = ctx.pool.health, ctx.pool
    actions: list[Action] = []
    halts: list[Halt] = []
    pending: list[str] = []
    budget, rate_left, leaving = prog.budget, prog.rate_left, list(prog.leaving)
    for rank, v in _ranked_repairs(ctx):
        repair = rank in (1, 2, _REQUESTED)
        requested = v.node in ctx.options.replace
        if not h.auto_replace and not requested:
            pending.append(f"{v.node}: {v.lifecycle.value} ({v.reason}); auto_replace is off")
            continue
        if v.lifecycle is not Lifecycle.PREEMPTING:
            if ctx.frozen and not requested:
                continue  # the circuit-breaker halt already says why
            halt = _repair_halt(ctx, v.node, budget, rate_left, repair=repair)
            if halt is not None:
                halts.append(halt)
                continue
            budget -= 1
            rate_left -= repair
        leaving.append(v.node)
        code = ActionReason.REPLACE_REQUESTED if requested else _repair_code(v, rank)
        actions.extend(
            cordon_and_drain(
                pool.name,
                v,
                _repair_why(v, rank, requested),
                code,
                repair=repair,
                fault=_repair_fault(v),
            )
        )
    return StageResult(
        replace(prog, budget=budget, rate_left=rate_left, leaving=tuple(leaving)),
        tuple(actions),
        tuple(halts),
        pending=tuple(pending),
    )


def _ranked_repairs(ctx: PoolContext) -> list[tuple[int, NodeView]]:
    """The nodes to replace with their rank, in the order repair_stage takes them."""
    ranked = [(r, v) for v in ctx.views if (r := _repair_rank(ctx, v)) is not None]
    ranked.sort(key=lambda rv: (rv[0], not rv[1].immediate, rv[1].deadline or ctx.now, rv[1].node))
    return ranked


def _repair_why(v: NodeView, rank: int, requested: bool) -> str:
    """A repair's reason in words, saying first when --replace asked for it."""
    if rank == _REQUESTED:
        return "replacement requested (--replace)"
    return f"replacement requested (--replace); {v.reason}" if requested else v.reason


def _repair_halt(
    ctx: PoolContext, node: str, budget: int, rate_left: int, *, repair: bool
) -> Halt | None:
    """The disruption budget, or for a repair the repair rate limit, holding the cordon
    back, if either does."""
    pool, h = ctx.pool, ctx.pool.health
    if budget <= 0:
        return Halt(
            pool.name,
            HaltRule.DISRUPTION_BUDGET,
            f"{node} waits: max_unavailable {h.max_unavailable_nodes(pool.target_nodes)} reached",
        )
    if repair and rate_left <= 0:
        return Halt(
            pool.name,
            HaltRule.REPAIR_RATE_LIMIT,
            f"{node} waits: {ctx.spec.safety.repairs_per_pool_per_hour} repairs in the last hour",
        )
    return None


def _repair_fault(v: NodeView) -> Fault | None:
    """The fault a repair's cordon answers: an unhealthy report's, never an impaired host's."""
    s = v.summary
    # A host the cloud calls impaired is replaced, not laddered: no in-place rung can
    # fix the hardware under it, and its report (if any) predates the impairment.
    if (
        v.lifecycle is Lifecycle.UNHEALTHY
        and s is not None
        and s.status is Status.UNHEALTHY
        and not v.impaired
    ):
        return fault_of(s)
    return None


def watch_stage(ctx: PoolContext, prog: Progress) -> StageResult:
    """Nothing to do yet, but the world is part-way to a decision: say so (pending)."""
    pending = tuple(
        f"{v.node}: {v.reason}"
        for v in ctx.views
        if v.lifecycle is Lifecycle.DEGRADED and v.streak > 0
    )
    return StageResult(prog, pending=pending)


def drift_stage(ctx: PoolContext, prog: Progress) -> StageResult:
    """Labels changed: update tags in place where the cloud can. Anything else a node was
    launched with that the pool no longer declares: rolling, surge-first replacement
    (EC2 Auto Scaling instance refresh, Kubernetes RollingUpdate), or a note under
    update.strategy on-replace (Kubernetes OnDelete)."""
    pool = ctx.pool
    actions: list[Action] = []
    drifted: list[tuple[NodeView, str]] = []
    for v in ctx.views:
        if v.lifecycle not in SERVING or v.node in prog.leaving:
            continue
        why = v.drift
        ptype = _provider_type(ctx, v)
        if v.tags_drift and ptype in TAG_UPDATABLE and v.instance is not None:
            labels = ", ".join(f"{k}={val}" for k, val in v.tags_drift)
            actions.append(
                Action(
                    ActionKind.UPDATE_TAGS,
                    pool.name,
                    v.node,
                    f"labels changed ({labels})",
                    instance_id=_iid(v),
                    tags=v.tags_drift,
                    action_reason=ActionReason.DRIFT,
                )
            )
        elif v.tags_drift:
            labels = ", ".join(k for k, _ in v.tags_drift)
            why = "; ".join(
                filter(
                    None, [why, f"labels changed ({labels}); {ptype} cannot update tags in place"]
                )
            )
        if why:
            drifted.append((v, why))
    if not drifted:
        return StageResult(prog, tuple(actions))
    if pool.update_strategy is UpdateStrategy.ON_REPLACE:
        return StageResult(
            prog,
            tuple(actions),
            pending=tuple(
                f"{v.node} drifts ({why}); update strategy on-replace leaves it until it is "
                "replaced for another reason"
                for v, why in drifted
            ),
        )
    r = _roll(ctx, prog, drifted)
    return replace(r, actions=tuple(actions) + r.actions)


def _provider_type(ctx: PoolContext, v: NodeView) -> str:
    """The type (aws, gcp, ...) of the provider the node runs on (the pool's first when
    the instance is unknown or its provider undeclared)."""
    name = v.instance.provider if v.instance is not None else ctx.pool.provider
    return str(ctx.spec.providers.get(name, {}).get("type", ctx.pool.placed()[0].provider_type))


_ROLL_ORDER = {
    Lifecycle.UNKNOWN: 0,
    Lifecycle.STALE: 0,
    Lifecycle.PROVISIONING: 1,
    Lifecycle.BOOTING: 1,
    Lifecycle.MAINTENANCE: 1,
    Lifecycle.DEGRADED: 2,
    Lifecycle.HEALTHY: 3,
}


def _roll(ctx: PoolContext, prog: Progress, drifted: list[tuple[NodeView, str]]) -> StageResult:
    """Retire drifted nodes while ready capacity stays at desired; ask count for surge
    replacements of the ones that cannot leave yet. Doubtful and not-yet-serving nodes go
    first (they carry no work), then the oldest."""
    h, pool = ctx.pool.health, ctx.pool
    if ctx.frozen:
        return StageResult(
            prog,
            pending=tuple(
                f"{v.node} drifts ({why}); rolling replacement held by the circuit breaker"
                for v, why in drifted
            ),
        )
    order = sorted(
        drifted,
        key=lambda d: (
            _ROLL_ORDER.get(d[0].lifecycle, 9),
            d[0].instance.launched_at if d[0].instance else ctx.now,
            d[0].node,
        ),
    )
    names = {v.node for v, _ in drifted}
    present = _present(ctx, prog)
    surplus = sum(v.lifecycle in READY for v in present) - prog.desired
    in_flight = sum(
        v.lifecycle in (Lifecycle.PROVISIONING, Lifecycle.BOOTING)
        for v in present
        if v.node not in names
    )
    can_surge = h.replacement is Replacement.SURGE and pool.max_nodes + h.max_surge > prog.desired
    actions: list[Action] = []
    halts: list[Halt] = []
    pending: list[str] = []
    budget, rate_left, leaving, surge_for = prog.budget, prog.rate_left, list(prog.leaving), []
    for v, why in order:
        ready = v.lifecycle in READY
        if ready and surplus <= 0 and can_surge:
            if in_flight > 0:
                in_flight -= 1
                pending.append(
                    f"{v.node} drifts ({why}); waits for its replacement to report healthy"
                )
            else:
                surge_for.append((v.node, why))
            continue
        if budget <= 0 or rate_left <= 0:
            rule = HaltRule.DISRUPTION_BUDGET if budget <= 0 else HaltRule.REPAIR_RATE_LIMIT
            halts.append(
                Halt(
                    pool.name,
                    rule,
                    f"{v.node} drifts ({why}) and waits: "
                    + ("max_unavailable reached" if budget <= 0 else "repair rate limit"),
                )
            )
            continue
        budget, rate_left, surplus = budget - 1, rate_left - 1, surplus - ready
        leaving.append(v.node)
        actions.extend(
            cordon_and_drain(pool.name, v, f"drift: {why}", ActionReason.DRIFT, repair=True)
        )
    progress = replace(
        prog,
        budget=budget,
        rate_left=rate_left,
        leaving=tuple(leaving),
        surge_for=prog.surge_for + tuple(surge_for),
    )
    return StageResult(progress, tuple(actions), tuple(halts), pending=tuple(pending))


def _present(ctx: PoolContext, prog: Progress) -> list[NodeView]:
    """Nodes that count toward desired: all but those leaving, stuck, or cordoned this run
    (a sick node held back by the budget still counts: no replacement before its cordon;
    an operator's cordon counts too, a rebooted node under after-terminate, and one
    uncordoned this run because the cloud's impaired listing cleared)."""
    # Waited for, not replaced: a node an operator cordoned (usually for a while, and a GPU
    # node is dear), and under replacement after-terminate a rebooted node.
    kept = {Lifecycle.OPERATOR_CORDONED}
    h = ctx.pool.health
    if h.replacement is Replacement.AFTER_TERMINATE:
        kept.add(Lifecycle.REMEDIATING)
    # surge_on: replace: a node the ladder will reset or reboot is waited for, like one out
    # for diagnostics; a surge machine per reboot costs more than the minutes it saves.
    waited = h.replacement is Replacement.SURGE and h.surge_on is SurgeOn.REPLACE
    return [
        v
        for v in ctx.views
        if (
            v.lifecycle not in LEAVING
            or v.lifecycle in kept
            or v.diag_cordon
            or _impairment_cleared(v)
            or (waited and in_place(ctx, v))
        )
        # a stuck instance leaves this run, unless the breaker holds its termination
        and not (v.lifecycle is Lifecycle.STUCK and not ctx.frozen)
        and (
            v.node not in prog.leaving
            or (waited and v.lifecycle is Lifecycle.UNHEALTHY and in_place(ctx, v))
        )
    ]


def count_stage(ctx: PoolContext, prog: Progress) -> StageResult:
    """Provision up to desired (plus surge replacements drift asked for), or scale down."""
    present = _present(ctx, prog)
    need = prog.desired - len(present)
    if need > 0 or prog.surge_for:
        return _provision(ctx, prog, present, max(need, 0))
    # Drifted nodes under a rolling update leave through the drift stage, which retires
    # surplus ready nodes first: counting them here too would report each twice.
    rolling = (
        sum(v.drift is not None for v in present)
        if ctx.pool.update_strategy is UpdateStrategy.ROLLING
        else 0
    )
    if need + rolling < 0:
        return _scale_down(ctx, prog, present, -(need + rolling))
    return StageResult(prog)


def _provision(ctx: PoolContext, prog: Progress, present: list[NodeView], need: int) -> StageResult:
    h, pool = ctx.pool.health, ctx.pool
    # A stuck instance stops counting once this run terminates it (the breaker holds that).
    gone = (Lifecycle.TERMINATING,) if ctx.frozen else (Lifecycle.TERMINATING, Lifecycle.STUCK)
    existing = [v for v in ctx.views if v.lifecycle not in gone]
    surge = h.max_surge if h.replacement is Replacement.SURGE else 0
    # surge: replacements may exist beside the nodes they replace (up to max + surge);
    # after-terminate: a replacement waits until the node it replaces is gone.
    room = pool.max_nodes + surge - len(existing)
    if h.replacement is Replacement.AFTER_TERMINATE:
        room = prog.desired - len(existing)
    count = min(need, max(room, 0))
    surges = prog.surge_for[: max(room - count, 0)]
    halts: list[Halt] = []
    pending: list[str] = []
    if count < need:
        halts.append(
            Halt(
                pool.name,
                HaltRule.MAX_NODES,
                f"{counted(need - count, 'node')} wait for nodes being replaced to terminate "
                f"(max {pool.max_nodes}, surge {surge})",
            )
        )
    pending += [
        f"{n} drifts ({why}); its replacement waits for room (max {pool.max_nodes} "
        f"+ max_surge {surge})"
        for n, why in prog.surge_for[len(surges) :]
    ]
    places = open_places(pool, ctx.pm, ctx.now, prog.avoid)
    if count + len(surges) > 0 and not places:
        soonest = min((e.until for e in ctx.pm.exhausted if e.until > ctx.now), default=ctx.now)
        halts.append(
            Halt(
                pool.name,
                HaltRule.CAPACITY,
                f"every place is out of capacity until {soonest:%H:%M} UTC",
            )
        )
        return StageResult(prog, halts=tuple(halts), pending=tuple(pending))
    present_names = {v.node for v in present}
    replaced = [
        n
        for n in dict.fromkeys(
            list(prog.leaving) + sorted(v.node for v in ctx.views if v.lifecycle in LEAVING)
        )
        if n not in present_names
    ]
    jobs: list[tuple[str | None, str]] = []
    for i in range(count):
        replaces = replaced[i] if i < len(replaced) else None
        jobs.append(
            (
                replaces,
                f"replaces {replaces}"
                if replaces
                else f"{len(present) + i} of {prog.desired} nodes present",
            )
        )
    jobs += [(n, f"replaces {n} (drift: {why})") for n, why in surges]
    note = placement_note(pool, ctx.pm, ctx.now, places[0]) if places else ""
    if note:
        jobs = [(replaces, f"{why}; {note}") for replaces, why in jobs]
    actions = tuple(
        Action(
            ActionKind.PROVISION,
            pool.name,
            node_name(ctx.spec.name, pool.name, ctx.last_index + i),
            why,
            places=places,
            replaces=replaces,
            action_reason=ActionReason.REPLACEMENT if replaces else ActionReason.SCALE_UP,
        )
        for i, (replaces, why) in enumerate(jobs, start=1)
    )
    return StageResult(prog, actions, tuple(halts), pending=tuple(pending))


def _scale_down(
    ctx: PoolContext, prog: Progress, present: list[NodeView], excess: int
) -> StageResult:
    """Cordon + drain `excess` nodes: idle ready nodes only (drifted first, then one with a
    fault within lemon_window, so a surge's fresh replacement stays and the once-faulty
    node goes, then healthy before degraded, least utilised, newest); never a doubtful one, and
    never below desired ready nodes. A pool with nodes failing (unhealthy, offline, or
    part-way to unhealthy_after) does not shrink: removing a good node then could trip
    the circuit breaker and stop the repairs."""
    pool = ctx.pool
    held = _scale_down_held(ctx, prog, excess)
    if held is not None:
        return held
    ready = [v for v in present if v.lifecycle in READY]
    n = min(excess, len(ready) - prog.desired)
    pending: list[str] = []
    if n < excess:
        pending.append(
            f"scale down by {excess - n} waits: only {len(ready)} of {len(present)} "
            "nodes are ready (navarch never scales down a node it is in doubt about)"
        )
    actions: list[Action] = []
    halts: list[Halt] = []
    budget, leaving = prog.budget, list(prog.leaving)
    why = f"scale down: {len(present)} nodes present, {prog.desired} desired"
    for v in _scale_down_order(ctx, ready)[: max(n, 0)]:
        if budget <= 0:
            halts.append(
                Halt(
                    pool.name,
                    HaltRule.DISRUPTION_BUDGET,
                    f"scale down of {v.node} waits for max_unavailable",
                )
            )
            break
        budget -= 1
        leaving.append(v.node)
        actions.extend(cordon_and_drain(pool.name, v, why, ActionReason.SCALE_DOWN))
    return StageResult(
        replace(prog, budget=budget, leaving=tuple(leaving)),
        tuple(actions),
        tuple(halts),
        pending=tuple(pending),
    )


def _scale_down_held(ctx: PoolContext, prog: Progress, excess: int) -> StageResult | None:
    """What holds a scale-down back: an open circuit breaker or failing nodes; else None."""
    if ctx.frozen:
        return StageResult(
            prog,
            halts=(
                Halt(ctx.pool.name, HaltRule.CIRCUIT_BREAKER, f"scale down by {excess} held back"),
            ),
        )
    failing = [
        v.node
        for v in ctx.views
        if v.lifecycle in (Lifecycle.UNHEALTHY, Lifecycle.OFFLINE)
        or (v.lifecycle is Lifecycle.DEGRADED and v.streak > 0)
    ]
    if failing:
        return StageResult(
            prog, pending=(f"scale down by {excess} waits while {', '.join(failing)} fail(s)",)
        )
    return None


def _scale_down_order(ctx: PoolContext, ready: list[NodeView]) -> list[NodeView]:
    """Ready nodes in the order they leave: drifted, recently faulted, degraded, least
    utilised, newest first."""
    lemon_window_s = ctx.pool.health.lemon_window_s

    def util(v: NodeView) -> float:
        s = v.summary
        return s.utilization_pct if s and s.utilization_pct is not None else 0.0

    def faulted(v: NodeView) -> bool:
        return any((ctx.now - t).total_seconds() <= lemon_window_s for _, t in v.faults)

    return sorted(
        ready,
        key=lambda v: (
            v.drift is None,
            not faulted(v),
            v.lifecycle is not Lifecycle.HEALTHY,
            util(v),
            -_index_of(ctx.spec.name, ctx.pool.name, v.node),
        ),
    )


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


POOL_STAGES: tuple[Stage, ...] = (
    scale_stage,
    ladder_stage,
    silence_stage,
    terminate_stage,
    redrain_stage,
    stuck_stage,
    repair_stage,
    impaired_stage,
    watch_stage,
    diagnostics_stage,
    drift_stage,
    count_stage,
)
DESTROY_STAGES: tuple[Stage, ...] = (terminate_stage, redrain_stage, destroy_stage)

"""The capacity stages: how many nodes a pool wants and where new ones launch.

scale_stage (the desired count: the target, or autoscaling's), count_stage (provision up
to desired, with surge replacements the repair and drift stages asked for, or scale down
idle ready nodes), and the place order provisioning tries (open_places, skipping places
in capacity backoff: docs/design.md, Safety rules, rule 6). Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from functools import lru_cache

from navarch.fleet.spec import PoolSpec, Replacement, SurgeOn, UpdateStrategy
from navarch.planner.context import PoolContext, Progress, StageResult, cordon_and_drain
from navarch.planner.groups import group_of
from navarch.planner.ladder import in_place
from navarch.planner.model import (
    LEAVING,
    READY,
    Action,
    ActionKind,
    ActionReason,
    Halt,
    HaltRule,
    Lifecycle,
    NodeView,
    Place,
    PoolMemory,
)
from navarch.planner.payloads import ProvisionPayload, ScalePayload
from navarch.planner.repair import impairment_cleared
from navarch.planner.spares import held, wanted
from navarch.planner.vacancies import open_vacancies
from navarch.planner.zones import plan_places, rebalance_order, take_for_scale_down, zone_of
from navarch.textsafe import counted


def node_name(fleet: str, pool: str, index: int) -> str:
    """The node name for a pool's index-th node: <fleet>-<pool>-<nnnn> (GCP-label safe)."""
    return f"{fleet}-{pool}-{index:04d}"


@lru_cache(maxsize=65536)
def index_of(fleet: str, pool: str, name: str) -> int:
    """The index in a node name (<fleet>-<pool>-<nnnn>), 0 for a name not of that form.
    Remembered: plan() asks twice for every node every run."""
    prefix = f"{fleet}-{pool}-"
    tail = name[len(prefix) :] if name.startswith(prefix) else ""
    return int(tail) if tail.isdigit() else 0


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
                payload=ScalePayload(desired),
                action_reason=(
                    ActionReason.SCALE_UP if "scale_up_at" in reason else ActionReason.SCALE_DOWN
                ),
            ),
        )
    )
    return StageResult(replace(prog, desired=desired), actions)


def present_nodes(ctx: PoolContext, prog: Progress) -> list[NodeView]:
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
    # Warm spares held never count toward desired; a sick one counts until its cordon, as
    # any sick node does (no replacement before the cordon).
    spares = {v.node for v in held(ctx, prog)}
    return [
        v
        for v in ctx.views
        if v.node not in spares
        and (
            v.lifecycle not in LEAVING
            or v.lifecycle in kept
            or (v.cordon is not None and v.cordon.diagnostics)
            or impairment_cleared(v)
            or v.node in prog.returned  # the ladder returns it to service this run
            or (waited and in_place(ctx, v))
        )
        # a stuck instance leaves this run, unless the breaker holds its termination
        and not (v.lifecycle is Lifecycle.STUCK and not ctx.frozen)
        # held for a stockout, or waiting for its replacement's launch: not one itself
        and v.node not in prog.held
        and v.node not in prog.launch_first
        and (
            v.node not in prog.leaving
            or (waited and v.lifecycle is Lifecycle.UNHEALTHY and in_place(ctx, v))
        )
    ]


def count_stage(ctx: PoolContext, prog: Progress) -> StageResult:
    """Provision up to desired and the pool's warm spares (plus surge replacements drift
    asked for), or scale down (spares first)."""
    present = present_nodes(ctx, prog)
    spares = held(ctx, prog)
    need = prog.desired - len(present) + wanted(ctx, prog) - len(spares)
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
        return _scale_down(ctx, prog, present, -(need + rolling), spares)
    if need == 0 and rolling == 0:
        return _rebalance(ctx, prog, present)
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
        room = prog.desired + wanted(ctx, prog) - len(existing)
    # A node held for a stockout, or terminated only once its replacement launched, leaves
    # after that replacement exists: it launches beside it, in its slot
    # (navarch.planner.stockout).
    room += sum(v.node in prog.held or v.node in prog.launch_first for v in existing)
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
                f"every place is out of capacity until {soonest:%H:%M} UTC" + _group_note(pool),
            )
        )
        return StageResult(prog, halts=tuple(halts), pending=tuple(pending))
    replaced = _owed_replacements(ctx, prog, present)
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
    orders = _zone_orders(ctx, places, present, [r for r, _ in jobs], prog.launch_first)
    actions = tuple(
        Action(
            ActionKind.PROVISION,
            pool.name,
            node_name(ctx.spec.name, pool.name, ctx.last_index + i),
            why,
            payload=ProvisionPayload(order, replaces),
            action_reason=ActionReason.REPLACEMENT if replaces else ActionReason.SCALE_UP,
        )
        for i, ((replaces, why), order) in enumerate(zip(jobs, orders, strict=True), start=1)
    )
    return StageResult(prog, actions, tuple(halts), pending=tuple(pending))


def _owed_replacements(ctx: PoolContext, prog: Progress, present: list[NodeView]) -> list[str]:
    """The nodes this run's launches replace, in order: those leaving (this run's first,
    then earlier runs'), then those already terminated whose replacement is still owed
    (after-terminate), so their replacements land where they sat (navarch.planner.vacancies)."""
    present_names = {v.node for v in present}
    leaving = list(prog.leaving) + sorted(v.node for v in ctx.views if v.lifecycle in LEAVING)
    replaced = [n for n in dict.fromkeys(leaving) if n not in present_names]
    replaced += [v.node for v in open_vacancies(ctx.pm, ctx.now, {v.node for v in ctx.views})]
    return replaced


def _group_note(pool: PoolSpec) -> str:
    """What a capacity halt adds for a pool launching into placement groups: the group
    may be what has no room ("" without one; navarch.planner.groups)."""
    groups = "; ".join(g for pl in pool.placed() if (g := group_of(pl)))
    return f"; launches go into {groups}: the group may be what has no room" if groups else ""


def _rebalance(ctx: PoolContext, prog: Progress, present: list[NodeView]) -> StageResult:
    """One extra node into the emptiest zone of a spread pool whose zones differ by more
    than one (navarch.planner.zones.rebalance_order), only while the pool is settled: every
    node ready, none leaving, no breaker, and room within max_nodes plus max_surge."""
    pool, h = ctx.pool, ctx.pool.health
    surge = h.max_surge if h.replacement is Replacement.SURGE else 0
    settled = (
        not ctx.frozen
        and not prog.leaving
        and all(v.lifecycle in READY for v in present)
        and len(ctx.views) == len(present)
        and len(present) + 1 <= pool.max_nodes + surge
    )
    found = rebalance_order(pool, open_places(pool, ctx.pm, ctx.now, prog.avoid), present)
    if not settled or found is None:
        return StageResult(prog)
    order, why = found
    action = Action(
        ActionKind.PROVISION,
        pool.name,
        node_name(ctx.spec.name, pool.name, ctx.last_index + 1),
        why,
        payload=ProvisionPayload(order),
        action_reason=ActionReason.ZONE_REBALANCE,
    )
    return StageResult(prog, (action,))


def _zone_orders(
    ctx: PoolContext,
    places: tuple[Place, ...],
    present: list[NodeView],
    replaces: list[str | None],
    unpinned: frozenset[str] = frozenset(),
) -> tuple[tuple[Place, ...], ...]:
    """Each provision's place order (navarch.planner.zones): a replacement tries its node's
    zone first, except for a node the ladder remedies in place, which will come back: it
    still counts in its zone (whether or not this run replaces it), and its surge
    replacement goes where the pool is thinnest; and except for the nodes in `unpinned`
    (terminated once their replacement launched: one launched for the same node by an
    earlier run may already sit in that zone), whose replacement goes where the pool is
    thinnest too."""
    by_name = {v.node: v for v in ctx.views}
    staying = {v.node for v in present}
    back = {v.node: v for v in ctx.views if v.node not in staying and in_place(ctx, v)}
    gone = {v.node: (v.provider, v.zone) for v in ctx.pm.vacancies}
    prefers = [
        (zone_of(by_name.get(r)) or gone.get(r))
        if r and r not in back and r not in unpinned
        else None
        for r in replaces
    ]
    return plan_places(ctx.pool, places, [*present, *back.values()], prefers)


def _scale_down(
    ctx: PoolContext,
    prog: Progress,
    present: list[NodeView],
    excess: int,
    spares: Sequence[NodeView] = (),
) -> StageResult:
    """Cordon + drain `excess` nodes: warm spares first (they serve nothing), then idle
    ready nodes only (drifted first, then one with a
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
    n = min(excess, len(ready) - prog.desired + len(spares))
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
    take = max(n, 0)
    for v in list(spares)[:take] + _scale_down_order(
        ctx, ready, present, max(take - len(spares), 0)
    ):
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


def _scale_down_order(
    ctx: PoolContext, ready: list[NodeView], present: list[NodeView], n: int
) -> list[NodeView]:
    """The n ready nodes that leave first: drifted, then from the fullest zone
    (navarch.planner.zones), recently faulted, degraded, least utilised, newest."""
    lemon_window_s = ctx.pool.health.lemon_window_s

    def util(v: NodeView) -> float:
        s = v.summary
        return s.utilization_pct if s and s.utilization_pct is not None else 0.0

    def faulted(v: NodeView) -> bool:
        return any((ctx.now - t).total_seconds() <= lemon_window_s for _, t in v.faults)

    ordered = sorted(
        ready,
        key=lambda v: (
            v.drift is None,
            not faulted(v),
            v.lifecycle is not Lifecycle.HEALTHY,
            util(v),
            -index_of(ctx.spec.name, ctx.pool.name, v.node),
        ),
    )
    # Zone balance outranks a recent fault: a surge replacement sits in its faulty node's
    # zone, so that zone is the fullest and its once-faulty node still leaves first.
    return take_for_scale_down(ctx.pool, ordered, present, lambda v: v.drift is None, n)

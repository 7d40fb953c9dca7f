"""plan(): the actions that bring each pool to its desired state, within the safety rules.

Pure: no I/O, no clock reads, no randomness; same inputs give the same plan, byte for byte.
Order of actions: per pool (sorted by name): scale, terminate, drain, cordon (+ drain),
provision. Safety rules enforced here (DESIGN.md "Safety rules"):
 1. only owned nodes (observe() already split off foreign instances) are ever acted on;
 2. doubt never terminates: UNKNOWN/STALE nodes are left alone until OFFLINE;
 3. disruption budget: cordoned + draining + terminating <= max_unavailable per pool;
 4. circuit breaker: a pool (or the fleet) whose unhealthy+offline share reaches the
    threshold, with at least 2 such nodes, gets no new cordon, no scale-down, and no
    termination on drain_timeout; a node already cordoned whose drain finished (its work
    is gone, its replacement already surged) is still terminated;
 5. repair rate limit: at most repairs_per_pool_per_hour repairs started per pool per hour;
 6. provisioning tries places in the pool's fallback order, skipping exhausted ones.
A node is only terminated after it was cordoned and drained (or drain_timeout passed).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from navarch.durations import format_duration_s
from navarch.planner.model import (
    LEAVING,
    SERVING,
    Action,
    ActionKind,
    Halt,
    Lifecycle,
    Memory,
    NodeView,
    Place,
    Plan,
    PoolMemory,
)
from navarch.spec import FleetSpec, PoolSpec

HOUR_S = 3600
_REPLACE_ORDER = {Lifecycle.PREEMPTING: 0, Lifecycle.UNHEALTHY: 1, Lifecycle.OFFLINE: 2}


def node_name(fleet: str, pool: str, index: int) -> str:
    """The node name for a pool's index-th node: <fleet>-<pool>-<nnnn> (GCP-label safe)."""
    return f"{fleet}-{pool}-{index:04d}"


def _index_of(fleet: str, pool: str, name: str) -> int:
    prefix = f"{fleet}-{pool}-"
    tail = name[len(prefix):] if name.startswith(prefix) else ""
    return int(tail) if tail.isdigit() else 0


def _sick(views: Sequence[NodeView]) -> int:
    return sum(v.lifecycle in (Lifecycle.UNHEALTHY, Lifecycle.OFFLINE) for v in views)


def _breaker_tripped(views: Sequence[NodeView], pct: float) -> tuple[bool, int, int]:
    active = [v for v in views if v.lifecycle is not Lifecycle.TERMINATING]
    sick = _sick(active)
    total = len(active)
    return (sick >= 2 and total > 0 and sick * 100 >= pct * total), sick, total


def desired_count(pool: PoolSpec, views: Sequence[NodeView], pm: PoolMemory, now: datetime
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
        v.summary.utilization_pct for v in views
        if v.lifecycle in (Lifecycle.HEALTHY, Lifecycle.DEGRADED)
        and v.summary is not None and v.summary.utilization_pct is not None
    ]
    if not utils:
        return base, None
    mean = sum(utils) / len(utils)
    if mean > a.scale_up_at_pct and base < pool.max_nodes:
        return base + 1, f"mean GPU utilisation {mean:.0f}% > scale_up_at {a.scale_up_at_pct:.0f}%"
    if mean < a.scale_down_at_pct and base > pool.min_nodes:
        return base - 1, f"mean GPU utilisation {mean:.0f}% < scale_down_at {a.scale_down_at_pct:.0f}%"
    return base, None


def open_places(pool: PoolSpec, pm: PoolMemory, now: datetime) -> tuple[Place, ...]:
    """The pool's places in fallback order, without those still in capacity backoff."""
    blocked = {(e.zone, e.instance_type, e.spot) for e in pm.exhausted if e.until > now}
    return tuple(
        Place(zone, itype, spot, attempt)
        for attempt, (zone, itype, spot) in enumerate(pool.places())
        if (zone, itype, spot) not in blocked
    )


def plan(spec: FleetSpec, views: Sequence[NodeView], memory: Memory, now: datetime) -> Plan:
    """Compute the Plan for one run.

    views: observe()'s NodeViews; memory: observe()'s folded Memory; now: aware UTC.
    Returns a Plan whose actions are in execution order and whose halts say which safety
    rule held what back. Never raises for any combination of valid inputs.
    """
    actions: list[Action] = []
    halts: list[Halt] = []
    notes: list[str] = []

    fleet_tripped, fleet_sick, fleet_total = _breaker_tripped(
        views, spec.safety.fleet_circuit_breaker_pct
    )
    if fleet_tripped:
        halts.append(Halt("*", "circuit_breaker",
                          f"{fleet_sick} of {fleet_total} nodes in the fleet are unhealthy or offline "
                          f"(>= {spec.safety.fleet_circuit_breaker_pct:g}%): no new cordon or termination "
                          "anywhere; check the agents, the store and the network first"))

    for pool in sorted(spec.pools, key=lambda p: p.name):
        pviews = sorted((v for v in views if v.pool == pool.name), key=lambda v: v.node)
        pa, ph, pn = _plan_pool(spec, pool, pviews, memory.pool(pool.name), memory, now, fleet_tripped)
        actions += pa
        halts += ph
        notes += pn
    return Plan(fleet=spec.name, created_at=now, actions=tuple(actions), halts=tuple(halts),
                notes=tuple(notes), state_serial=memory.serial, views=tuple(views))


def _plan_pool(spec: FleetSpec, pool: PoolSpec, views: list[NodeView], pm: PoolMemory,
               memory: Memory, now: datetime, fleet_tripped: bool
               ) -> tuple[list[Action], list[Halt], list[str]]:
    h = pool.health
    actions: list[Action] = []
    halts: list[Halt] = []
    notes: list[str] = []

    tripped, sick, total = _breaker_tripped(views, spec.safety.circuit_breaker_pct)
    if tripped:
        halts.append(Halt(pool.name, "circuit_breaker",
                          f"{sick} of {total} nodes are unhealthy or offline "
                          f"(>= {spec.safety.circuit_breaker_pct:g}%): no new cordon or termination in "
                          "this pool; a mass failure is more often a broken agent, network or store"))
    frozen = tripped or fleet_tripped

    # 0. Autoscaling.
    desired, scale_reason = desired_count(pool, views, pm, now)
    if scale_reason is not None:
        actions.append(Action(ActionKind.SCALE, pool.name, None, scale_reason, desired=desired))

    # 1. Terminate: re-issue for TERMINATING; finish DRAINING nodes that drained or timed out.
    for v in views:
        if v.lifecycle is Lifecycle.TERMINATING:
            actions.append(Action(ActionKind.TERMINATE, pool.name, v.node,
                                  f"terminate still in progress ({v.reason})",
                                  instance_id=v.instance.instance_id if v.instance else None))
        elif v.lifecycle is Lifecycle.DRAINING:
            waited_s = (now - v.phase_at).total_seconds() if v.phase_at else 0.0
            if v.drained:
                why = "drain finished"
            elif waited_s >= h.drain_timeout_s:
                why = f"drain_timeout ({format_duration_s(h.drain_timeout_s)}) passed"
            else:
                notes.append(f"{v.node}: draining for {format_duration_s(waited_s)} "
                             f"of {format_duration_s(h.drain_timeout_s)}")
                continue
            if frozen and not v.drained:
                halts.append(Halt(pool.name, "circuit_breaker", f"{v.node}: termination held back"))
                continue
            actions.append(Action(ActionKind.TERMINATE, pool.name, v.node, f"{why}; {v.reason}",
                                  instance_id=v.instance.instance_id if v.instance else None))

    # 2. Start draining nodes that were cordoned but never drained (e.g. SSH failed).
    for v in views:
        if v.lifecycle is Lifecycle.CORDONED:
            actions.append(Action(ActionKind.DRAIN, pool.name, v.node, v.reason))

    # 3. Cordon + drain the nodes that need replacing, within budget and rate limit.
    unavailable = sum(v.lifecycle in LEAVING for v in views)
    budget = h.max_unavailable_nodes(pool.target_nodes) - unavailable
    recent = [r for r in pm.repairs if (now - r).total_seconds() < HOUR_S]
    rate_left = spec.safety.repairs_per_pool_per_hour - len(recent)
    candidates = sorted(
        (v for v in views if v.lifecycle in _REPLACE_ORDER),
        key=lambda v: (_REPLACE_ORDER[v.lifecycle], not v.immediate, v.node),
    )
    leaving_now: set[str] = set()
    for v in candidates:
        preempting = v.lifecycle is Lifecycle.PREEMPTING
        if not h.auto_replace:
            notes.append(f"{v.node}: {v.lifecycle.value} ({v.reason}); auto_replace is off")
            continue
        if not preempting:
            if frozen:
                continue  # the circuit-breaker halt above already says why
            if budget <= 0:
                halts.append(Halt(pool.name, "disruption_budget",
                                  f"{v.node} waits: max_unavailable "
                                  f"{h.max_unavailable_nodes(pool.target_nodes)} reached"))
                continue
            if rate_left <= 0:
                halts.append(Halt(pool.name, "repair_rate_limit",
                                  f"{v.node} waits: {spec.safety.repairs_per_pool_per_hour} repairs "
                                  "in the last hour"))
                continue
            budget -= 1
            rate_left -= 1
        leaving_now.add(v.node)
        iid = v.instance.instance_id if v.instance else None
        actions.append(Action(ActionKind.CORDON, pool.name, v.node, v.reason,
                              instance_id=iid, repair=not preempting))
        actions.append(Action(ActionKind.DRAIN, pool.name, v.node, v.reason, instance_id=iid))

    # 4. Count: provision up to desired, or scale down (cordon + drain) above it.
    present = [v for v in views if v.lifecycle not in LEAVING and v.node not in leaving_now]
    existing = [v for v in views if v.lifecycle is not Lifecycle.TERMINATING]
    need = desired - len(present)
    if need > 0:
        surge = h.max_surge if h.replacement == "surge" else 0
        # surge: replacements may exist beside the nodes they replace (up to max + surge);
        # after-terminate: a replacement waits until the node it replaces is gone.
        room = pool.max_nodes + surge - len(existing)
        if h.replacement == "after-terminate":
            room = desired - len(existing)
        count = min(need, max(room, 0))
        if count < need:
            halts.append(Halt(pool.name, "max_nodes",
                              f"{need - count} node(s) wait for nodes being replaced to terminate "
                              f"(max {pool.max_nodes}, surge {surge})"))
        places = open_places(pool, pm, now)
        if count > 0 and not places:
            soonest = min((e.until for e in pm.exhausted if e.until > now), default=now)
            halts.append(Halt(pool.name, "capacity",
                              f"every place is out of capacity until {soonest:%H:%M} UTC"))
            count = 0
        replaced = sorted(leaving_now) + sorted(v.node for v in views if v.lifecycle in LEAVING)
        index = max([pm.next_index - 1] + [_index_of(spec.name, pool.name, n.node)
                                           for n in memory.nodes if n.pool == pool.name]
                    + [_index_of(spec.name, pool.name, v.node) for v in views])
        for i in range(count):
            index += 1
            name = node_name(spec.name, pool.name, index)
            replaces = replaced[i] if i < len(replaced) else None
            why = (f"replaces {replaces}" if replaces
                   else f"{len(present) + i} of {desired} nodes present")
            actions.append(Action(ActionKind.PROVISION, pool.name, name, why,
                                  places=places, replaces=replaces))
    elif need < 0:
        if frozen:
            halts.append(Halt(pool.name, "circuit_breaker", f"scale down by {-need} held back"))
        else:
            # Doubtful nodes first, then the least utilised, newest first.
            order = {Lifecycle.UNKNOWN: 0, Lifecycle.STALE: 0, Lifecycle.BOOTING: 1,
                     Lifecycle.PROVISIONING: 1, Lifecycle.DEGRADED: 2, Lifecycle.HEALTHY: 3}

            def util(v: NodeView) -> float:
                s = v.summary
                return s.utilization_pct if s and s.utilization_pct is not None else 0.0

            victims = sorted((v for v in present if v.lifecycle in SERVING),
                             key=lambda v: (order.get(v.lifecycle, 9), util(v),
                                            -_index_of(spec.name, pool.name, v.node)))
            for v in victims[: -need]:
                if budget <= 0:
                    halts.append(Halt(pool.name, "disruption_budget",
                                      f"scale down of {v.node} waits for max_unavailable"))
                    break
                budget -= 1
                why = f"scale down: {len(present)} nodes present, {desired} desired"
                iid = v.instance.instance_id if v.instance else None
                actions.append(Action(ActionKind.CORDON, pool.name, v.node, why, instance_id=iid))
                actions.append(Action(ActionKind.DRAIN, pool.name, v.node, why, instance_id=iid))
    return actions, halts, notes


"""The drift stage: a node launched from settings the pool no longer declares.

Labels are updated in place where the node's provider declares Capability.UPDATE_TAGS
(PlanOptions.capabilities); anything else (type, zone, image, capacity, launch options,
labels a provider cannot update) is a rolling, surge-first replacement within the same
budget, or a pending line under update.strategy on-replace. Pure.
"""

from __future__ import annotations

from dataclasses import replace

from navarch.capabilities import Capability
from navarch.fleet.spec import Replacement, UpdateStrategy
from navarch.planner.capacity import present_nodes
from navarch.planner.context import PoolContext, Progress, StageResult, cordon_and_drain
from navarch.planner.context import iid as _iid
from navarch.planner.model import (
    READY,
    SERVING,
    Action,
    ActionKind,
    ActionReason,
    Halt,
    HaltRule,
    Lifecycle,
    NodeView,
)
from navarch.planner.payloads import TagsPayload


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
        if v.tags_drift and _can_update_tags(ctx, v) and v.instance is not None:
            labels = ", ".join(f"{k}={val}" for k, val in v.tags_drift)
            actions.append(
                Action(
                    ActionKind.UPDATE_TAGS,
                    pool.name,
                    v.node,
                    f"labels changed ({labels})",
                    instance_id=_iid(v),
                    payload=TagsPayload(v.tags_drift),
                    action_reason=ActionReason.DRIFT,
                )
            )
        elif v.tags_drift:
            labels = ", ".join(k for k, _ in v.tags_drift)
            why = "; ".join(
                filter(
                    None,
                    [
                        why,
                        f"labels changed ({labels}); {_provider_type(ctx, v)} cannot update "
                        "tags in place",
                    ],
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


def _provider_name(ctx: PoolContext, v: NodeView) -> str:
    """The fleet.yaml name of the provider the node runs on (the pool's first placement's
    when the instance is unknown or its provider undeclared)."""
    name = v.instance.provider if v.instance is not None else ctx.pool.provider
    return name if name in ctx.spec.providers else ctx.pool.placed()[0].provider


def _can_update_tags(ctx: PoolContext, v: NodeView) -> bool:
    """Whether the node's provider declared Capability.UPDATE_TAGS."""
    return ctx.options.can(_provider_name(ctx, v), Capability.UPDATE_TAGS)


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
    present = present_nodes(ctx, prog)
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

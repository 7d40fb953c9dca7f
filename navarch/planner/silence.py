"""Nodes taken out of service because their reports fell silent: doubt, never terminated on
that alone. Pure.

A node whose accepted reports stop for offline_after is cordoned, drained and given a
replacement like a sick one (docs/design.md, Node lifecycle), with Cordon.silent
set. Silence is what a store outage, a network partition or a broken agent fakes for every
node at once, and what the circuit breaker cannot always see coming (nodes pass
offline_after one by one, spread over a heartbeat, and the first may be taken before the
breaker opens). So silence decides no termination (safety rule 2, "doubt never
terminates"); only independent evidence does (``evidence``):

- the cloud lists the instance impaired (its own status check failed), or stopped;
- a fresh accepted report, made after the cordon, says the node is unhealthy.

With evidence the node leaves as any drained node does (the terminate stage: its drain
finished, or drain_timeout passed). When the node reports again, fresh and not unhealthy,
the silence was doubt and it returns to service at once (an uncordon; the surge
replacement, if it came up, is then the pool's surplus). Until one or the other, it stays
cordoned, and the plan says so: an operator who knows the host is gone names it in
`apply --replace NODE`. The retirement of orphans and `destroy` are the operator's
decisions, not evidence about health: neither runs this stage.

A node cordoned because no first report came within boot_timeout was missing data too: a
slow boot looks the same until it reports. When its first report arrives before it is
terminated (fresh, made after the cordon, not unhealthy), it returns to service the same
way; without one it leaves through the terminate stage as before (a host that never boots
writes nothing, and boot_timeout is what ends it). In a pool with an acceptance suite it is
handed to acceptance instead (a cordon for ACCEPTANCE that takes over the boot_timeout
one): returned to the scheduler it would skip its suite, and replaced it would be a healthy
node terminated for a slow boot; its suite decides, as for any new node.
"""

from __future__ import annotations

from dataclasses import replace

from navarch.fleet.durations import format_duration_s
from navarch.inventory import InstanceState
from navarch.planner.context import PoolContext, Progress, StageResult, iid
from navarch.planner.model import Action, ActionKind, ActionReason, Lifecycle, NodeView
from navarch.report.health import Status

__all__ = ["evidence", "silence_stage"]

_OUT = (Lifecycle.CORDONED, Lifecycle.DRAINING)
_STOPPED = (InstanceState.STOPPING, InstanceState.STOPPED)


def _fresh_since_cordon(ctx: PoolContext, v: NodeView) -> bool:
    """Whether v's newest accepted report is fresh (stale_after) and made after v left
    service (phase_at), judged by the store's clock (ReportSummary.observed_at)."""
    s, age = v.summary, v.report_age_s
    if s is None or age is None or age > ctx.pool.health.stale_after_s or v.rejected:
        return False
    return v.phase_at is None or s.observed_at >= v.phase_at


def evidence(ctx: PoolContext, v: NodeView) -> str | None:
    """Independent evidence that a silent node v is sick, in words, or None.

    The cloud's own status (Instance.cloud_status impaired: an EC2 status check, a GCE
    host error, an Azure instance view; or the instance stopping or stopped) and a fresh
    accepted report made after the cordon whose status is unhealthy are evidence; the
    age of a report never is (a store outage ages every report at once).
    """
    inst = v.instance
    if inst is not None and inst.cloud_status.impaired:
        detail = inst.cloud_status.detail
        return "the cloud lists it impaired" + (f" ({detail})" if detail else "")
    if inst is not None and inst.state in _STOPPED:
        return f"the cloud lists it {inst.state.value}"
    s = v.summary
    if s is not None and s.status is Status.UNHEALTHY and _fresh_since_cordon(ctx, v):
        return "its latest report, made after the cordon, is unhealthy"
    return None


def _late_first_report(ctx: PoolContext, v: NodeView, taken: set[str]) -> bool:
    """Whether v, cordoned because no report came within boot_timeout, has now reported
    (fresh, made after the cordon, not unhealthy) and nothing else holds it: no evidence,
    no `--replace`, not taken by an earlier stage this run."""
    return (
        v.cordon is not None
        and v.cordon.cause is ActionReason.BOOT_TIMEOUT
        and v.lifecycle in _OUT
        and v.node not in taken
        and v.node not in ctx.options.replace
        and evidence(ctx, v) is None
        and _fresh_since_cordon(ctx, v)
    )


def _returned(ctx: PoolContext, v: NodeView, why: str) -> Action:
    """The uncordon (RECOVERED) of a node whose missing reports were doubt, not a fault."""
    return Action(
        ActionKind.UNCORDON,
        ctx.pool.name,
        v.node,
        f"{why} ({v.reason}); the cloud lists it running: it was doubt, not a fault",
        instance_id=iid(v),
        action_reason=ActionReason.RECOVERED,
    )


def _to_acceptance(ctx: PoolContext, v: NodeView) -> Action:
    """The late-booting node of a pool with an acceptance suite, kept from the scheduler
    for its suite (a cordon for ACCEPTANCE that ends the boot_timeout phase): the suite,
    not the slow boot, decides whether it serves or is replaced."""
    return Action(
        ActionKind.CORDON,
        ctx.pool.name,
        v.node,
        f"its first report came after boot_timeout's cordon ({v.reason}): judged by its "
        "acceptance suite before it serves, not replaced for a slow boot",
        instance_id=iid(v),
        action_reason=ActionReason.ACCEPTANCE,
    )


def silence_stage(ctx: PoolContext, prog: Progress) -> StageResult:
    """Silent-cordoned nodes (Cordon.silent) out of service: uncordon the ones
    that report again (fresh, made after the cordon, not unhealthy; the breaker does not
    hold a return to service), leave the ones with evidence (``evidence``) to the terminate
    stage, and keep the rest out of service with a pending line, never terminated. A node
    named by `--replace` is the operator's: the ladder and terminate stages take it."""
    actions: list[Action] = []
    pending: list[str] = []
    taken = set(prog.taken)
    for v in ctx.views:
        if _late_first_report(ctx, v, taken):
            taken.add(v.node)
            late = "its first report came after boot_timeout's cordon"
            accept = ctx.pool.acceptance is not None
            actions.append(_to_acceptance(ctx, v) if accept else _returned(ctx, v, late))
            continue
        if (
            v.cordon is None
            or not v.cordon.silent
            or v.lifecycle not in _OUT
            or v.node in taken
            or v.node in ctx.options.replace
            or evidence(ctx, v) is not None
        ):
            continue
        taken.add(v.node)
        if _fresh_since_cordon(ctx, v):
            actions.append(_returned(ctx, v, "reports again after its silence"))
            continue
        silent_s = v.report_age_s
        since = f" for {format_duration_s(silent_s)}" if silent_s is not None else ""
        pending.append(
            f"{v.node}: silent{since} and the cloud lists it running: doubt never "
            "terminates, so it stays out of service until it reports again or the cloud "
            f"lists it impaired or stopped (`navarch apply --replace {v.node}` replaces it)"
        )
    return StageResult(
        replace(prog, taken=frozenset(taken)), tuple(actions), pending=tuple(pending)
    )

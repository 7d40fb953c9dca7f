"""The remediation ladder: the one place that maps a fault to a remedy. Pure.

Facts come from below (the agent's checks with their structured fault keys, the XID
catalogue's recommended remedy, a user rule's action, a failed dcgmi diag); this module
alone decides the rung (docs/health-policy.md has the table, tested against ``decide``):

- a lemon (``lemon_after`` faults within ``lemon_window``, on the node or its physical
  host) is replaced;
- a fault whose recommended remedy is ``replace`` is replaced; one with no remedy
  (``none``: unhealthy by a rule, or a check with nothing to try) is replaced too;
- otherwise the cheapest rung of the pool's ``remediation`` at least as strong as the
  recommended remedy and, when the same fault kind had a rung within ``ladder_window``,
  stronger than that rung; past the last rung, replace.

The remediation table (navarch.fleet.remedies, fleet.yaml ``health.remedies`` over the built-in
rows) refines this per fault kind or class: a row's own ladder replaces the pool's (and
starts at its cheapest rung), and a node whose fault ``is_hardware`` (past the row's
``max_in_place``) is replaced. While a replacement could not launch on capacity, a
termination the ladder decides waits (navarch.planner.stockout) and the strongest
untried in-place rung runs meanwhile.

Nothing on the node overrides this: the agent reports how many boots it saw a fault in,
and never turns a reboot into a replacement itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from navarch.fleet.durations import format_duration_s
from navarch.fleet.remedies import RemedyRow, is_hardware, row_for
from navarch.planner.acceptance import launched_before_acceptance, return_verdict
from navarch.planner.context import (
    PoolContext,
    Progress,
    StageResult,
    cordon_then_drain,
    iid,
    terminate_node,
)
from navarch.planner.diagnostics import Climb, DiagStep, return_diag, scheduled_diag
from navarch.planner.model import (
    Acceptance,
    Action,
    ActionKind,
    ActionReason,
    Fault,
    Halt,
    HaltRule,
    Lifecycle,
    NodeView,
)
from navarch.planner.observe import after_remedy, fault_of
from navarch.planner.payloads import CordonPayload, RemedyPayload
from navarch.planner.spares import returning
from navarch.planner.stockout import holds, launches_first
from navarch.report.health import FaultKey, Remedy, Status
from navarch.report.xid import fatal_xids_by_remedy

__all__ = [
    "Rung",
    "catalogue_table",
    "decide",
    "decision_table",
    "in_place",
    "ladder_stage",
    "rung_for",
]


def decide(
    ladder: Sequence[Remedy],
    need: Remedy,
    *,
    previous: Remedy | None = None,
    lemon: bool = False,
) -> Remedy:
    """The rung a fault gets.

    ladder: the pool's health.remediation, cheapest first (an ordered subset of reset_gpu,
    reboot, replace); need: the fault's recommended remedy (the XID catalogue's, the
    check's documented one, or a user rule's); previous: the rung already tried for the
    same fault kind within ladder_window, or None; lemon: the node (or its host) had
    lemon_after faults within lemon_window.
    Returns REPLACE for a lemon, for a fault whose remedy is replace or none, and when no
    rung is both at least as strong as `need` and stronger than `previous`; else the
    cheapest such rung. Replacement ends every ladder, listed or not. Never raises.
    """
    if lemon or need in (Remedy.NONE, Remedy.REPLACE):
        return Remedy.REPLACE
    floor = need.rank if previous is None else max(need.rank, previous.rank + 1)
    for rung in ladder:
        if rung.rank >= floor:
            return rung
    return Remedy.REPLACE


#: The ladders and situations docs/health-policy.md tabulates (``decision_table``).
_TABLE_LADDERS: tuple[tuple[Remedy, ...], ...] = (
    (Remedy.REBOOT, Remedy.REPLACE),
    (Remedy.RESET_GPU, Remedy.REBOOT, Remedy.REPLACE),
    (Remedy.RESET_GPU, Remedy.REPLACE),
)
_TABLE_NEEDS = (Remedy.RESET_GPU, Remedy.REBOOT, Remedy.REPLACE, Remedy.NONE)
_CLIMBING = (Remedy.RESET_GPU, Remedy.REBOOT)


def decision_table() -> str:
    """The ladder's decision table as Markdown, made from ``decide`` itself: per
    recommended remedy and situation (first occurrence; the same fault kind again within
    ladder_window after each rung; a lemon), the rung each tabulated ladder gives. Its
    copy in docs/health-policy.md is tested to match, so the page cannot drift."""
    head = ["recommended", "situation"] + [
        "[" + ", ".join(r.value for r in ladder) + "]" for ladder in _TABLE_LADDERS
    ]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    situations: list[tuple[str, Remedy | None, bool]] = [("first occurrence", None, False)]
    situations += [(f"again after {r.value}", r, False) for r in (Remedy.RESET_GPU, Remedy.REBOOT)]
    situations.append(("lemon", None, True))
    for need in _TABLE_NEEDS:
        # replace and none give replace in every situation: one row each says so
        for label, previous, lemon in situations if need in _CLIMBING else [("any", None, False)]:
            cells = [
                decide(ladder, need, previous=previous, lemon=lemon).value
                for ladder in _TABLE_LADDERS
            ]
            rows.append(f"| {need.value} | {label} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def catalogue_table() -> str:
    """The XID catalogue's recommended remedy for each fatal XID (navarch.report.xid), the
    default order the ladder starts from, as Markdown (tested against its copy in
    docs/health-policy.md)."""
    rows = ["| recommended | fatal XIDs (fault kind xid:N) |", "|---|---|"]
    for remedy, codes in fatal_xids_by_remedy().items():
        rows.append(f"| {remedy.value} | {', '.join(str(c) for c in codes)} |")
    return "\n".join(rows) + "\n"


@dataclass(frozen=True)
class Rung:
    """What the ladder gives one fault: the remedy, the reason, and whether it is a lemon."""

    remedy: Remedy
    why: str
    lemon: bool

    @property
    def code(self) -> ActionReason:
        """The action_reason of the action that carries it out."""
        return ActionReason.LEMON if self.lemon else ActionReason.REMEDY


def _lemon_count(ctx: PoolContext, v: NodeView, unrecorded: int) -> tuple[int, str]:
    """Faults within lemon_window on the node (v.faults plus `unrecorded` not yet in Memory)
    or, where the cloud exposes one, on its physical host (PoolMemory.host_faults: faults
    of earlier instances on the same EC2 Dedicated Host); and " on host H" when the host's
    count is the larger."""
    h = ctx.pool.health
    count = unrecorded + sum((ctx.now - t).total_seconds() <= h.lemon_window_s for _, t in v.faults)
    host = v.instance.host_id if v.instance is not None else None
    if not host:
        return count, ""
    on_host = unrecorded + sum(
        hid == host and (ctx.now - t).total_seconds() <= h.lemon_window_s
        for hid, _, t in ctx.pm.host_faults
    )
    count = max(count, on_host)
    return count, f" on host {host}" if on_host == count else ""


def recent_rung(ctx: PoolContext, v: NodeView, fault: Fault) -> Remedy | None:
    """The rung last tried on node v for this same fault (kinds compared: FaultKey.same_as)
    within the pool's ladder_window, or None: where the ladder climbs from."""
    if (
        v.rung is not None
        and FaultKey(v.rung_fault).same_as(fault.key)
        and v.rung_at is not None
        and (ctx.now - v.rung_at).total_seconds() <= ctx.pool.health.ladder_window_s
    ):
        return v.rung
    return None


def rung_for(
    ctx: PoolContext, v: NodeView, fault: Fault, unrecorded: int, climb_from: Remedy | None = None
) -> Rung:
    """The ladder's rung for `fault` on v (``decide`` with the pool's settings).

    previous: the rung already tried for the same fault kind (FaultKey.same_as) within
    ladder_window, or `climb_from` when given (a remedy that did not bring the node back
    in time is climbed from whatever the window says); lemon: see ``_lemon_count``;
    unrecorded: faults not yet in Memory.
    """
    h = ctx.pool.health
    previous = climb_from or recent_rung(ctx, v, fault)
    count, where = _lemon_count(ctx, v, unrecorded)
    lemon = count >= h.lemon_after
    row = row_for(h.remedies, fault.key.kind)
    operator = row is not None and bool(row.actions) and not row.alert
    rungs = row.ladder(h.remediation) if row is not None and operator else h.remediation
    # An operator's row names the ladder itself: it starts at its cheapest rung.
    need = rungs[0] if operator else fault.action
    tried = _in_place_tried(ctx, v, fault, unrecorded, row)
    hardware = is_hardware(row, need, tried) and not lemon
    remedy = Remedy.REPLACE if hardware else decide(rungs, need, previous=previous, lemon=lemon)
    ladder = (
        f"remedies row {row.match}: " if operator and row is not None else "remediation: "
    ) + " then ".join(rungs)
    key = fault.key.kind  # the GPU is in the findings; the ladder compares kinds
    if hardware and row is not None and row.max_in_place is not None and tried:
        why = (
            f"{key}: hardware after {tried} in-place remedies (max_in_place "
            f"{row.max_in_place}; {row.source})"
        )
    elif lemon:
        why = (
            f"lemon: {count} faults{where} in {format_duration_s(h.lemon_window_s)} "
            f"(lemon_after {h.lemon_after}); {key}"
        )
    elif climb_from is not None:
        why = f"{key} not cured by the {climb_from.value}; {ladder}"
    elif previous is not None:
        why = (
            f"{key} again within {format_duration_s(h.ladder_window_s)} after "
            f"{previous.value}; {ladder}"
        )
    elif fault.action in (Remedy.NONE, Remedy.REPLACE):
        why = f"{key}: its remedy is replace"
    else:
        why = f"{key}, first occurrence; {ladder}"
    return Rung(remedy, why, lemon)


def _in_place_tried(
    ctx: PoolContext, v: NodeView, fault: Fault, unrecorded: int, row: RemedyRow | None
) -> int:
    """In-place remedies already tried for `fault`'s kind on v within the row's
    ladder_window (the pool's when the row sets none): v's remembered faults of that kind
    in the window, each answered by the ladder, less the one being decided when Memory
    already holds it (unrecorded 0)."""
    window_s = (
        row.ladder_window_s
        if row is not None and row.ladder_window_s is not None
        else ctx.pool.health.ladder_window_s
    )
    seen = sum(
        FaultKey.parse(k).same_as(fault.key) and (ctx.now - t).total_seconds() <= window_s
        for k, t in v.faults
    )
    return max(seen - (0 if unrecorded else 1), 0)


def _busy(v: NodeView) -> int:
    """GPU processes by the node's latest report (0 when none or unknown)."""
    return (v.summary.process_count or 0) if v.summary is not None else 0


#: The action that carries out each in-place rung of the ladder.
_RUNG_ACTION = {Remedy.RESET_GPU: ActionKind.RESET_GPU, Remedy.REBOOT: ActionKind.REBOOT}


def _carry_out(
    ctx: PoolContext, v: NodeView, r: Rung, fault: Fault, *, repair: bool = False, prefix: str = ""
) -> tuple[Action | None, str]:
    """The rung's action for v: TERMINATE for replace, else RESET_GPU or REBOOT in place, or
    why it waits: never in place while v's latest report shows GPU processes (nvidia-smi -r
    refuses then, and a reboot would kill them). A rung that cannot run for drain_timeout
    after the node left service (phase_at) falls back to replace: processes that outlive
    a drain that long are hung, and waiting on them would hold a budget slot for good."""
    why = prefix + r.why
    if r.remedy is Remedy.REPLACE:
        return terminate_node(ctx.pool.name, v, why, r.code, lemon=r.lemon, fault=fault), ""
    kind = _RUNG_ACTION[r.remedy]
    if _busy(v):
        h = ctx.pool.health
        waited_s = _since_s(ctx, v.phase_at)
        if waited_s >= h.drain_timeout_s:
            return terminate_node(
                ctx.pool.name,
                v,
                f"{why}; the {kind.value} cannot run: {_busy(v)} GPU process(es) "
                f"remain {format_duration_s(waited_s)} after it left service "
                f"(drain_timeout {format_duration_s(h.drain_timeout_s)}), so it is "
                "replaced",
                ActionReason.DRAIN_TIMEOUT,
                fault=fault,
            ), ""
        return None, (
            f"{v.node}: {kind.value} waits: its latest report shows {_busy(v)} "
            f"GPU process(es) ({format_duration_s(waited_s)} of drain_timeout "
            f"{format_duration_s(h.drain_timeout_s)}, then replaced)"
        )
    return Action(
        kind,
        ctx.pool.name,
        v.node,
        why,
        instance_id=iid(v),
        payload=RemedyPayload(r.remedy, fault, repair),
        action_reason=r.code,
    ), ""


def _since_s(ctx: PoolContext, at: datetime | None) -> float:
    """Seconds from `at` to the run's now (0 when unknown)."""
    return (ctx.now - at).total_seconds() if at is not None else 0.0


def _after_drain(ctx: PoolContext, v: NodeView, fault: Fault) -> tuple[Action | None, str]:
    """A drained node cordoned for a fault: reset its GPUs, reboot it, or terminate it."""
    r = rung_for(ctx, v, fault, unrecorded=0)
    if r.remedy is Remedy.REPLACE:  # the fault was recorded at the cordon
        return terminate_node(
            ctx.pool.name, v, f"drain finished; {r.why}", r.code, lemon=r.lemon
        ), ""
    return _carry_out(ctx, v, r, fault)


def _climb(ctx: PoolContext, v: NodeView, step: DiagStep) -> tuple[Action | None, str]:
    """A diagnostics step as an action: a failed diagnostic climbs the ladder (the next rung
    when it answers the fault just remedied), or is replaced."""
    if not isinstance(step, Climb):
        return step
    if ctx.frozen:  # with the breaker open a failed diagnostic is doubt: DCGM may be broken
        return None, f"{v.node}: {step.why}held by the circuit breaker"
    r = rung_for(ctx, v, step.fault, unrecorded=1)
    return _carry_out(ctx, v, r, step.fault, repair=True, prefix=step.why)


def _remediating(ctx: PoolContext, v: NodeView) -> tuple[Action | None, str]:
    """A rebooted or GPU-reset node: return it after return_after healthy reports made after
    the remedy, climb a rung when it faults again, replace it when no report made after the
    remedy arrives within boot_timeout, and climb a rung when it is still not back
    return_timeout after the remedy (reports degraded, unknown or stale, unhealthy below
    unhealthy_after, a diagnostic before return without a verdict): every wait here ends."""
    h, s, fault = ctx.pool.health, v.summary, v.fault
    rung = v.rung or Remedy.REBOOT
    since = v.rung_at or v.phase_at or ctx.now
    waited_s = (ctx.now - since).total_seconds()
    if s is None or not after_remedy(rung, fault, v.rung_at, s):
        if waited_s > h.boot_timeout_s:
            what = "from a new boot" if rung is not Remedy.RESET_GPU else "made"
            return terminate_node(
                ctx.pool.name,
                v,
                f"no report {what} within boot_timeout "
                f"({format_duration_s(h.boot_timeout_s)}) after the {rung.value}",
                ActionReason.REMEDY_TIMEOUT,
            ), ""
        return None, (
            f"{v.node}: waits for its first report after the {rung.value} "
            f"({format_duration_s(waited_s)} of boot_timeout "
            f"{format_duration_s(h.boot_timeout_s)})"
        )
    if v.report_age_s is not None and v.report_age_s > h.offline_after_s:
        return terminate_node(
            ctx.pool.name,
            v,
            f"no fresh report for {format_duration_s(v.report_age_s)} after the {rung.value}",
            ActionReason.OFFLINE,
        ), ""
    late = waited_s > h.return_timeout_s
    if s.status is Status.UNHEALTHY and (s.fatal or v.streak >= h.unhealthy_after):
        new = fault_of(s)
        return _carry_out(ctx, v, rung_for(ctx, v, new, unrecorded=1), new, repair=True)
    if s.status is Status.HEALTHY and v.return_streak >= h.return_after:
        why = f"healthy for {v.return_streak} reports after {rung.value}"
        if h.return_requires_diag is not None:
            gate = return_diag(ctx, v, h.return_requires_diag, why, late=late)
            if gate is not None:
                return _climb(ctx, v, gate)
            why += f"; dcgmi diag -r {h.return_requires_diag} passed"
        exempt = v.instance is not None and launched_before_acceptance(
            ctx.pm.acceptance_since, v.instance.launched_at
        )
        standing = return_verdict(ctx.pool.acceptance, s, rung, v.rung_at, ctx.now, exempt, v.node)
        if standing is not None and standing[0] is not Acceptance.PASSED:
            return _acceptance_return(ctx, v, standing)
        if standing is not None:
            why += f"; {standing[1]}"
        return Action(
            ActionKind.UNCORDON,
            ctx.pool.name,
            v.node,
            why,
            instance_id=iid(v),
            action_reason=ActionReason.RECOVERED,
        ), ""
    if s.status is Status.UNHEALTHY:
        wait = (
            f"{v.node}: unhealthy report {v.streak} of {h.unhealthy_after} after the {rung.value}"
        )
    elif s.status is Status.HEALTHY:
        wait = (
            f"{v.node}: {v.return_streak} of {h.return_after} healthy reports after the "
            f"{rung.value}"
        )
    else:
        wait = f"{v.node}: reports {s.status.value} after the {rung.value}"
    if late:
        return _timeout_climb(ctx, v, rung, waited_s)
    return None, (
        f"{wait} ({format_duration_s(waited_s)} of return_timeout "
        f"{format_duration_s(h.return_timeout_s)})"
    )


def _acceptance_return(
    ctx: PoolContext, v: NodeView, standing: tuple[Acceptance, str]
) -> tuple[Action | None, str]:
    """A remedied node's acceptance that has not passed: held while it runs, replaced (dead on
    arrival) when it failed or passed its deadline. It was already drained: terminate. No
    run by the deadline (NO_RUN: the image lacks acceptance) and a finding about the image
    or the pool's baseline (HELD) hold it, never replace it: neither is its hardware."""
    state, why = standing
    if state in (Acceptance.RUNNING, Acceptance.NO_RUN, Acceptance.HELD):
        return None, f"{v.node}: {why}"
    code = (
        ActionReason.ACCEPTANCE_FAILED
        if state is Acceptance.FAILED
        else ActionReason.ACCEPTANCE_TIMEOUT
    )
    return terminate_node(ctx.pool.name, v, why, code), ""


def _timeout_climb(
    ctx: PoolContext, v: NodeView, rung: Remedy, waited_s: float
) -> tuple[Action | None, str]:
    """The next rung for a node the `rung` did not bring back within return_timeout: its
    remedied fault is taken as not cured (replace when no fault is remembered)."""
    h = ctx.pool.health
    why = (
        f"not back in service {format_duration_s(waited_s)} after the {rung.value} "
        f"(return_timeout {format_duration_s(h.return_timeout_s)}); "
    )
    if v.fault is None:
        return terminate_node(ctx.pool.name, v, why + "replaced", ActionReason.REMEDY_TIMEOUT), ""
    r = rung_for(ctx, v, v.fault, unrecorded=0, climb_from=rung)
    action, wait = _carry_out(ctx, v, r, v.fault, repair=True, prefix=why)
    if action is not None and not r.lemon and action.action_reason is ActionReason.REMEDY:
        action = replace(action, action_reason=ActionReason.REMEDY_TIMEOUT)
    return action, wait


def _requested(ctx: PoolContext, v: NodeView) -> tuple[Action | None, str] | None:
    """`apply --replace NODE` for a node out of service (the repair stage takes those in
    service): an operator-cordoned node, or one cordoned on the cloud's first impaired
    listing, is drained for replacement, a drained or remediating
    one is terminated, a draining one is terminated when its drain finishes or times out
    (the terminate stage). The operator named it: the breaker does not hold it."""
    why = "replacement requested (--replace)"
    code = ActionReason.REPLACE_REQUESTED
    # A cordon that nothing drains (an operator's, or one on the cloud's first impaired
    # listing) is taken over: cordoned again as a repair, and drained.
    if v.lifecycle is Lifecycle.OPERATOR_CORDONED or (
        v.lifecycle is Lifecycle.CORDONED and v.impaired_cordon
    ):
        return Action(
            ActionKind.CORDON,
            ctx.pool.name,
            v.node,
            f"{why}; {v.reason}",
            instance_id=iid(v),
            payload=CordonPayload(repair=True),
            action_reason=code,
        ), ""
    if v.lifecycle is Lifecycle.REMEDIATING or (v.lifecycle is Lifecycle.DRAINING and v.drained):
        state = (
            "drained" if v.lifecycle is Lifecycle.DRAINING else f"out for its {v.rung or 'remedy'}"
        )
        return terminate_node(ctx.pool.name, v, f"{why}; it was {state}", code), ""
    return None


#: Lifecycles in which a node named by --replace is already on its way out (the terminate
#: and redrain stages finish it; the ladder must not take it from them).
_ALREADY_LEAVING = frozenset({Lifecycle.CORDONED, Lifecycle.DRAINING, Lifecycle.TERMINATING})


def _operator_cordoned(v: NodeView) -> str:
    """The pending line for a node an operator cordoned: who returns it, and whether its
    reports say it is sick (then `--replace` is the way out)."""
    s = v.summary
    if s is not None and s.status is Status.UNHEALTHY:
        worst = s.findings[0] if s.findings else "unhealthy"
        return (
            f"{v.node}: {v.reason}; its reports are unhealthy ({worst}): "
            f"`navarch apply --replace {v.node}` replaces it"
        )
    return f"{v.node}: {v.reason} (`navarch uncordon` returns it)"


def _step(ctx: PoolContext, v: NodeView) -> tuple[Action | None, str] | None:
    """The ladder's step for one node, or None when the ladder has nothing to say of it."""
    if v.node in ctx.options.replace:
        return _requested(ctx, v)
    if v.lifecycle is Lifecycle.DRAINING and v.cordon is not None and v.cordon.diagnostics:
        return _climb(ctx, v, scheduled_diag(ctx, v))
    if v.lifecycle is Lifecycle.DRAINING and v.drained and v.fault is not None:
        return _after_drain(ctx, v, v.fault)
    if v.lifecycle is Lifecycle.REMEDIATING:
        return _remediating(ctx, v)
    return None


def in_place(ctx: PoolContext, v: NodeView) -> bool:
    """Whether the ladder will remedy v in place (reset its GPUs or reboot it) rather than
    replace it: true of a remediating node, and of a node cordoned for a fault (or whose
    unhealthy report is cordoned this run) whose rung is in place. The count stage gives
    such a node no surge replacement under surge_on: replace; a node that climbs to replace
    leaves then and gets one."""
    if v.node in ctx.options.replace or (v.cordon is not None and v.cordon.diagnostics):
        return False
    if v.lifecycle is Lifecycle.REMEDIATING:
        return True
    if v.lifecycle in (Lifecycle.CORDONED, Lifecycle.DRAINING):
        fault, unrecorded = v.fault, 0
    elif (
        v.lifecycle is Lifecycle.UNHEALTHY
        and v.summary is not None
        and v.summary.status is Status.UNHEALTHY
    ):
        fault, unrecorded = fault_of(v.summary), 1
    else:
        return False
    if fault is None:
        return False
    return rung_for(ctx, v, fault, unrecorded).remedy is not Remedy.REPLACE


def ladder_stage(ctx: PoolContext, prog: Progress) -> StageResult:
    """The remediation ladder stage (docs/health-policy.md).

    A DRAINING node cordoned for a fault (Memory has it) whose drain finished gets
    ``rung_for``: RESET_GPU, REBOOT, or TERMINATE (replace; a lemon is marked); an in-place
    rung that GPU processes keep from running for drain_timeout falls back to TERMINATE. A
    REMEDIATING node is uncordoned after return_after healthy reports made after the
    remedy (observe.after_remedy: a new boot, or a report later than the GPU reset) when
    the pool needs it, else held as a warm spare or terminated as surplus
    (navarch.planner.spares.returning), climbs
    the next rung when it faults again after it or is not back within return_timeout, and
    is replaced when no report made after the remedy arrives within boot_timeout. Resets
    and reboots are repairs: the circuit breaker holds every one, the repair rate limit one
    no cordon paid for (a fault again after a remedy). Terminations here are of drained
    nodes and go even with the breaker open, except the fallback past drain_timeout (its
    processes may be work). Operator-cordoned nodes are listed as pending (with a hint
    when their reports are unhealthy); nodes named by `--replace` are replaced whatever
    their lifecycle, the breaker notwithstanding."""
    actions: list[Action] = []
    halts: list[Halt] = []
    pending: list[str] = []
    taken = set(prog.taken)
    leaving = list(prog.leaving)
    rate_left = prog.rate_left
    held_nodes, first = set(prog.held), set(prog.launch_first)
    spared, returned = prog.spared, prog.returned
    for v in ctx.views:
        if v.lifecycle is Lifecycle.OPERATOR_CORDONED and v.node not in ctx.options.replace:
            pending.append(_operator_cordoned(v))
            continue
        step = _step(ctx, v)
        if step is None:
            if v.node in ctx.options.replace and v.lifecycle in _ALREADY_LEAVING:
                pending.append(_already_leaving(v))
            continue
        action, wait = step
        taken.add(v.node)
        held = _held(ctx, prog, v, action, first)
        if held is not None:
            held_nodes.add(v.node)
            action, wait = _in_place_while_held(ctx, v)
            wait = held + wait
        if action is None:
            pending.append(wait)
            continue
        halt, rate_left = _hold(ctx, v.node, action, rate_left)
        if halt is not None:
            halts.append(halt)
            continue
        if action.action_reason is ActionReason.RECOVERED:
            # Cured: back to service, into the spare set, or away as surplus; decided
            # once, so no plan uncordons a node it retires (navarch.planner.spares).
            so_far = replace(prog, leaving=tuple(leaving), spared=spared, returned=returned)
            action, so_far = returning(ctx, so_far, v, action)
            spared, returned = so_far.spared, so_far.returned
            if action.kind is ActionKind.TERMINATE:
                leaving.append(v.node)
            actions.append(action)
            continue
        actions.append(action)
        if action.kind in (ActionKind.CORDON, ActionKind.TERMINATE):
            leaving.append(v.node)  # leaves for good: the count stage replaces it
        if action.kind is ActionKind.CORDON:  # an operator's cordon, now a replacement
            actions.append(cordon_then_drain(action)[1])
    return StageResult(
        replace(
            prog,
            rate_left=rate_left,
            taken=frozenset(taken),
            leaving=tuple(leaving),
            held=frozenset(held_nodes),
            launch_first=frozenset(first),
            spared=spared,
            returned=returned,
        ),
        tuple(actions),
        tuple(halts),
        pending=tuple(pending),
    )


def _held(
    ctx: PoolContext, prog: Progress, v: NodeView, action: Action | None, first: set[str]
) -> str | None:
    """Why the step's termination is held for a stockout (navarch.planner.stockout.holds),
    or None; a termination that waits in the run for its replacement's launch instead
    adds its node to `first` (stockout.launches_first)."""
    if action is None:
        return None
    held = holds(ctx, prog, v, action)
    if held is None and launches_first(ctx, prog, v, action):
        first.add(v.node)
    return held


def _in_place_while_held(ctx: PoolContext, v: NodeView) -> tuple[Action | None, str]:
    """What a node held for a stockout (navarch.planner.stockout) gets meanwhile: the
    strongest in-place rung of its ladder stronger than the one already tried for its
    fault within ladder_window, when it is drained or back from a remedy; else nothing
    (and why, to append to the hold's line). A cure returns it to service as any remedy's
    would; a rung that cannot run is no reason to terminate it."""
    fault, h = v.fault, ctx.pool.health
    if fault is None or not (
        v.lifecycle is Lifecycle.REMEDIATING or (v.lifecycle is Lifecycle.DRAINING and v.drained)
    ):
        return None, ""
    tried = recent_rung(ctx, v, fault)
    rungs = [
        r for r in h.remediation if r in _RUNG_ACTION and (tried is None or r.rank > tried.rank)
    ]
    if not rungs:
        return None, "; no in-place rung of its ladder is left to try meanwhile"
    why = (
        f"{fault.key.kind}: its replacement could not launch, so the {rungs[-1].value} "
        "is tried in place meanwhile"
    )
    action, wait = _carry_out(
        ctx,
        v,
        Rung(rungs[-1], why, lemon=False),
        fault,
        repair=v.lifecycle is Lifecycle.REMEDIATING,
    )
    if action is not None and action.kind is ActionKind.TERMINATE:
        return None, f"; its {rungs[-1].value} cannot run: GPU processes remain"
    return action, ("; " + wait if wait else "")


def _already_leaving(v: NodeView) -> str:
    """What a node named by --replace that is already leaving waits for."""
    return (
        f"{v.node}: --replace: already leaving ({v.lifecycle.value}); "
        "terminated once its drain finishes or at drain_timeout"
    )


def _hold(ctx: PoolContext, node: str, action: Action, rate_left: int) -> tuple[Halt | None, int]:
    """Whether the circuit breaker or the repair rate limit holds the rung's action back,
    and the repairs left this hour once it goes."""
    pool = ctx.pool.name
    if (
        ctx.frozen
        and action.kind is ActionKind.TERMINATE
        and action.action_reason is ActionReason.DRAIN_TIMEOUT
    ):
        return Halt(pool, HaltRule.CIRCUIT_BREAKER, f"{node}: termination held back"), rate_left
    if action.kind not in (ActionKind.REBOOT, ActionKind.RESET_GPU):
        return None, rate_left
    if ctx.frozen:
        return (
            Halt(pool, HaltRule.CIRCUIT_BREAKER, f"{node}: {action.kind.value} held back"),
            rate_left,
        )
    if not action.repair:
        return None, rate_left
    if rate_left <= 0:
        return (
            Halt(
                pool,
                HaltRule.REPAIR_RATE_LIMIT,
                f"{node} waits for its {action.kind.value}: "
                f"{ctx.spec.safety.repairs_per_pool_per_hour} repairs in the last hour",
            ),
            rate_left,
        )
    return None, rate_left - 1

"""Typed events of one apply, derived from its result and from errors.

Two sources, one module:

- outcome_events / plan_conditions / outcome_conditions (an RunResult's parts):
  per-action outcomes (node cordoned with its reason, drain started, drain finished or
  timed out, node terminated, replacement provisioned, node rebooted or GPU-reset, node diagnosed
  (dcgmi diag verdict), node returned to
  service, action failed) and the plan's halts and failures as *conditions*
  (circuit breaker per pool, capacity exhausted per pool, quota or auth failure per pool,
  orphan guard).
- events_from_error(exc): apply failed, lease lost, auth/quota failures that stopped the
  run before any action.

A condition holds while the world stays wrong (a breaker stays open over many runs); it is
sent once when it starts and once when it clears (navarch.notify.state remembers which
are active), so a cron job every 5 minutes does not page 12 times an hour. Every other
event happens once: the planner never repeats a successful action.

Nothing here does I/O.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from navarch.errors import AuthError, CapacityError, LeaseLost, QuotaError
from navarch.outcome import Outcome
from navarch.planner.model import Action, ActionKind, DiagState, Fault, HaltRule, Plan
from navarch.planner.modes import Would
from navarch.planner.payloads import DiagnosePayload
from navarch.report.compat import RenamedStrEnum
from navarch.textsafe import plain


class EventKind(RenamedStrEnum):
    """What happened. The values are fleet.yaml's notify[].events names."""

    NODE_CORDONED = "node_cordoned"
    DRAIN_STARTED = "drain_started"
    DRAIN_FINISHED = "drain_finished"
    DRAIN_TIMED_OUT = "drain_timed_out"
    NODE_TERMINATED = "node_terminated"
    NODE_PROVISIONED = "node_provisioned"
    NODE_RETURNED = "node_returned"
    NODE_REBOOTED = "node_rebooted"  # the remediation ladder's reboot through the provider
    NODE_GPU_RESET = "node_gpu_reset"  # the ladder's GPU reset (nvidia-smi -r) on the node
    NODE_DIAGNOSED = "node_diagnosed"  # dcgmi diag gave a verdict that is no fault
    NODE_DIAG_FAILED = "node_diag_failed"  # dcgmi diag failed: a fault, the ladder climbs
    ACTION_FAILED = "action_failed"
    CAPACITY_EXHAUSTED = "capacity_exhausted"
    BREAKER_TRIPPED = "breaker_tripped"
    BREAKER_CLEARED = "breaker_cleared"
    QUOTA_FAILURE = "quota_failure"
    AUTH_FAILURE = "auth_failure"
    ORPHAN_GUARD = "orphan_guard"
    APPLY_FAILED = "apply_failed"
    LEASE_LOST = "lease_lost"
    CONDITION_CLEARED = "condition_cleared"  # any condition but the breaker cleared
    RESERVATION_IDLE = "reservation_idle"  # reserved capacity idle past reservation_idle_after
    #: a node of an acceptance pool reported no acceptance run by its deadline: the agent
    #: config or image lacks acceptance (the node is held, not replaced)
    NO_ACCEPTANCE_RUN = "no_acceptance_run"
    #: acceptance replacements held for a finding about the pool (the image, a declared
    #: version, a suspect baseline), not its nodes' hardware
    ACCEPTANCE_HELD = "acceptance_held"
    #: a rack or switch fault holds the ladder of a topology block (a block_fault halt)
    BLOCK_FAULT = "block_fault"
    #: a pool's mode (observe, cordon) holds back an action the plan made: what navarch
    #: would do, kept per node and action while it holds (navarch.planner.modes)
    WOULD_ACT = "would_act"


class Severity(enum.StrEnum):
    """How urgent; sinks filter on min_severity (ordered info < warning < critical)."""

    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return ("info", "warning", "critical").index(self.value)


#: Kinds that are conditions (held across runs), keyed per pool (or "*" for the fleet).
#: A failing action (a cordon whose SSH step keeps failing) is a condition too, keyed per
#: node and action kind, so a cron job retrying it every 5 minutes reports it once.
CONDITION_KINDS = frozenset(
    {
        EventKind.BREAKER_TRIPPED,
        EventKind.CAPACITY_EXHAUSTED,
        EventKind.QUOTA_FAILURE,
        EventKind.AUTH_FAILURE,
        EventKind.ORPHAN_GUARD,
        EventKind.APPLY_FAILED,
        EventKind.ACTION_FAILED,
        EventKind.RESERVATION_IDLE,
        EventKind.NO_ACCEPTANCE_RUN,
        EventKind.ACCEPTANCE_HELD,
        EventKind.BLOCK_FAULT,
        EventKind.WOULD_ACT,
    }
)

SEVERITY = {
    EventKind.NODE_CORDONED: Severity.WARNING,
    EventKind.DRAIN_STARTED: Severity.INFO,
    EventKind.DRAIN_FINISHED: Severity.INFO,
    EventKind.DRAIN_TIMED_OUT: Severity.WARNING,
    EventKind.NODE_TERMINATED: Severity.INFO,
    EventKind.NODE_PROVISIONED: Severity.INFO,
    EventKind.NODE_RETURNED: Severity.INFO,
    EventKind.NODE_REBOOTED: Severity.INFO,
    EventKind.NODE_GPU_RESET: Severity.INFO,
    EventKind.NODE_DIAGNOSED: Severity.INFO,
    EventKind.NODE_DIAG_FAILED: Severity.WARNING,
    EventKind.ACTION_FAILED: Severity.WARNING,
    EventKind.CAPACITY_EXHAUSTED: Severity.CRITICAL,
    EventKind.BREAKER_TRIPPED: Severity.CRITICAL,
    EventKind.BREAKER_CLEARED: Severity.INFO,
    EventKind.QUOTA_FAILURE: Severity.CRITICAL,
    EventKind.AUTH_FAILURE: Severity.CRITICAL,
    EventKind.ORPHAN_GUARD: Severity.WARNING,
    EventKind.APPLY_FAILED: Severity.CRITICAL,
    EventKind.LEASE_LOST: Severity.WARNING,
    EventKind.CONDITION_CLEARED: Severity.INFO,
    EventKind.RESERVATION_IDLE: Severity.WARNING,
    EventKind.NO_ACCEPTANCE_RUN: Severity.WARNING,
    EventKind.ACCEPTANCE_HELD: Severity.WARNING,
    EventKind.BLOCK_FAULT: Severity.CRITICAL,
    EventKind.WOULD_ACT: Severity.WARNING,
}


@dataclass(frozen=True)
class Event:
    """One notification-worthy fact.

    pool: the pool ("*" fleet-wide); node: the node or None. details: sorted (key, value)
    string pairs (e.g. ("xid", "79"), ("instance_id", "i-...")). condition: the stable key
    of a condition event ("<pool>/<kind>"), None for one-off events. clears: for
    BREAKER_CLEARED / CONDITION_CLEARED, the kind that cleared (its sinks get the clear).
    time: when it happened, aware UTC (the run's clock when its events are sent); None
    until the dispatcher stamps it.
    """

    kind: EventKind
    severity: Severity
    fleet: str
    pool: str
    node: str | None
    message: str
    details: tuple[tuple[str, str], ...] = ()
    condition: str | None = None
    clears: EventKind | None = None
    run_id: str = field(default="", compare=False)
    time: datetime | None = field(default=None, compare=False)

    @property
    def event_id(self) -> str:
        """A stable id (sha256 prefix of run id, kind, pool, node, condition): receivers
        can drop a redelivery."""
        raw = "\x00".join(
            (self.run_id, self.kind.value, self.pool, self.node or "", self.condition or "")
        )
        return hashlib.sha256(raw.encode()).hexdigest()[:24]

    def dedup_key(self) -> str:
        """PagerDuty dedup_key: "navarch/<fleet>/<condition key>", i.e. per fleet + pool +
        condition (stable across runs; a clear carries its condition's key)."""
        if self.condition:
            return f"navarch/{self.fleet}/{self.condition}"
        return f"navarch/{self.fleet}/{self.pool}/{(self.clears or self.kind).value}"

    def to_json(self) -> dict[str, object]:
        """The webhook/log body form (no secrets: events never carry any)."""
        return {
            "event_id": self.event_id,
            "kind": self.kind.value,
            "severity": self.severity.value,
            "fleet": self.fleet,
            "pool": self.pool,
            "node": self.node,
            "message": self.message,
            "details": dict(self.details),
            "condition": self.condition,
            "clears": self.clears.value if self.clears else None,
            "run_id": self.run_id,
            "time": _rfc3339(self.time),
        }


def _rfc3339(when: datetime | None) -> str | None:
    """An aware time as RFC 3339 UTC with a Z (2026-05-01T12:00:00Z), or None."""
    if when is None:
        return None
    return when.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def make(
    kind: EventKind,
    fleet: str,
    pool: str,
    node: str | None,
    message: str,
    run_id: str = "",
    **details: object,
) -> Event:
    """An Event with its kind's severity; conditions get their key "<pool>/<kind>"
    (action_failed, would_act: "<pool>/<node>/<action>/<kind>"). The message and the details
    may quote a node: they are made plain (navarch.textsafe), so every sink, JSON ones
    too, gets visible one-line text."""
    condition = None
    if kind in (EventKind.ACTION_FAILED, EventKind.WOULD_ACT):
        condition = f"{pool}/{node or '-'}/{details.get('action', '')}/{kind.value}"
    elif kind in CONDITION_KINDS:
        condition = f"{pool}/{kind.value}"
    return Event(
        kind,
        SEVERITY[kind],
        fleet,
        pool,
        node,
        plain(message),
        tuple(sorted((k, plain(str(v))) for k, v in details.items() if v is not None)),
        condition=condition,
        run_id=run_id,
    )


def cleared(active: Event, run_id: str = "") -> Event:
    """The event saying `active` (a condition) cleared."""
    kind = (
        EventKind.BREAKER_CLEARED
        if active.kind is EventKind.BREAKER_TRIPPED
        else EventKind.CONDITION_CLEARED
    )
    what = active.kind.value.replace("_", " ")
    where = "the fleet" if active.pool == "*" else f"pool {active.pool}"
    if active.node:
        where = f"{active.node} ({where})"
    return Event(
        kind,
        SEVERITY[kind],
        active.fleet,
        active.pool,
        active.node,
        f"{what} cleared in {where}",
        (("was", active.message),),
        condition=active.condition,
        clears=active.kind,
        run_id=run_id,
    )


def _xid(fault: Fault | None) -> str | None:
    """The XID code of the fault a cordon answers (its structured key, kind "xid:N")."""
    if fault is None:
        return None
    kind, _, code = fault.key.kind.partition(":")
    return code if kind == "xid" and code.isdigit() else None


#: A successful action's kind -> the event it raises and its message ({node}, {reason}: the
#: action's). Provision and diagnose have their own steps; scale and tag updates are routine.
_ACTION_EVENTS: dict[ActionKind, tuple[EventKind, str]] = {
    ActionKind.CORDON: (EventKind.NODE_CORDONED, "{node} cordoned: {reason}"),
    ActionKind.DRAIN: (EventKind.DRAIN_STARTED, "{node}: drain started"),
    ActionKind.TERMINATE: (EventKind.NODE_TERMINATED, "{node} terminated ({reason})"),
    ActionKind.UNCORDON: (EventKind.NODE_RETURNED, "{node} returned to service: {reason}"),
    ActionKind.REBOOT: (EventKind.NODE_REBOOTED, "{node} rebooted: {reason}"),
    ActionKind.RESET_GPU: (EventKind.NODE_GPU_RESET, "{node}: GPUs reset: {reason}"),
}


def operator_cordon_event(
    fleet: str, pool: str, node: str, reason: str, by: str, run_id: str, instance_id: str | None
) -> Event:
    """An operator's cordon (`navarch cordon`, an MCP client's) as a node_cordoned event:
    its message names who cordoned and why, its details say so (by, reason, operator), so a
    sink filtering on node_cordoned hears of a person's cordon as of navarch's."""
    return make(
        EventKind.NODE_CORDONED,
        fleet,
        pool,
        node,
        f"{node} cordoned by an operator ({by}): {reason}",
        run_id,
        by=by,
        reason=reason,
        operator="true",
        instance_id=instance_id,
    )


def _action_event(fleet: str, run_id: str, outcome: Outcome) -> Event | None:
    """One successful action's outcome -> its event, or None."""
    a, detail = outcome.action, outcome.detail
    if not outcome.ok:
        return None  # a condition: outcome_conditions
    ids = {"instance_id": a.instance_id, "reason": a.reason}
    if a.kind is ActionKind.PROVISION:
        return _provision_event(fleet, run_id, a, detail)
    if a.kind is ActionKind.DIAGNOSE:
        return _diag_event(fleet, run_id, a, detail, outcome.diag, ids)
    row = _ACTION_EVENTS.get(a.kind)
    if row is None:
        return None  # scale and tag updates are routine
    kind, message = row
    # Only a cordon names the XID it answers: the alert a pager shows first.
    xid = _xid(a.fault) if a.kind is ActionKind.CORDON else None
    return make(
        kind,
        fleet,
        a.pool,
        a.node,
        message.format(node=a.node, reason=a.reason),
        run_id,
        xid=xid,
        **ids,
    )


def _provision_event(fleet: str, run_id: str, a: Action, detail: str) -> Event:
    """A provisioned node's event, naming the node it replaces, if any."""
    why = f" to replace {a.replaces}" if a.replaces else ""
    return make(
        EventKind.NODE_PROVISIONED,
        fleet,
        a.pool,
        a.node,
        f"{a.node} provisioned{why}: {detail}",
        run_id,
        replaces=a.replaces,
        reason=a.reason,
    )


def _diag_event(
    fleet: str,
    run_id: str,
    a: Action,
    detail: str,
    state: DiagState | None,
    ids: dict[str, str | None],
) -> Event | None:
    """A diagnostics verdict (state: the outcome's); none while it only started or still
    runs (a later run collects it), or when the outcome carries none."""
    if state is None or state is DiagState.RUNNING:
        return None
    kind = EventKind.NODE_DIAG_FAILED if state is DiagState.FAIL else EventKind.NODE_DIAGNOSED
    return make(
        kind,
        fleet,
        a.pool,
        a.node,
        f"{a.node}: {detail}",
        run_id,
        diag=state.value,
        level=a.carries(DiagnosePayload).level,
        **ids,
    )


def outcome_events(fleet: str, run_id: str, outcomes: Iterable[Outcome]) -> tuple[Event, ...]:
    """One-off events of the applied actions, in outcome order (a terminate after a drain
    also yields drain_finished or drain_timed_out before node_terminated)."""
    out: list[Event] = []
    for o in outcomes:
        a = o.action
        if o.ok and a.kind is ActionKind.TERMINATE:
            ids = {"instance_id": a.instance_id, "reason": a.reason}
            if a.reason.startswith("drain finished"):
                out.append(
                    make(
                        EventKind.DRAIN_FINISHED,
                        fleet,
                        a.pool,
                        a.node,
                        f"{a.node}: drain finished",
                        run_id,
                        **ids,
                    )
                )
            elif a.reason.startswith("drain_timeout"):
                out.append(
                    make(
                        EventKind.DRAIN_TIMED_OUT,
                        fleet,
                        a.pool,
                        a.node,
                        f"{a.node}: {a.reason}",
                        run_id,
                        **ids,
                    )
                )
        event = _action_event(fleet, run_id, o)
        if event is not None:
            out.append(event)
    return tuple(out)


def plan_conditions(plan: Plan, run_id: str = "") -> dict[str, Event]:
    """Conditions the plan's halts show -> {condition key: Event}.

    circuit_breaker -> breaker_tripped (per pool, "*" for the fleet breaker); capacity ->
    capacity_exhausted (every place in backoff); orphan_guard -> orphan_guard;
    no_acceptance_run -> no_acceptance_run (a node held for want of a run); acceptance_held
    -> acceptance_held (a finding about the image or the pool's baseline); block_fault ->
    block_fault (a person should look at the rack before its hold lapses). Budget, rate
    limit and max_nodes halts pace a converging run: no event. Each action a pool's mode
    held back (Plan.would) -> would_act, per node and action kind.
    """
    rule_kind = {
        HaltRule.CIRCUIT_BREAKER: EventKind.BREAKER_TRIPPED,
        HaltRule.CAPACITY: EventKind.CAPACITY_EXHAUSTED,
        HaltRule.ORPHAN_GUARD: EventKind.ORPHAN_GUARD,
        HaltRule.NO_ACCEPTANCE_RUN: EventKind.NO_ACCEPTANCE_RUN,
        HaltRule.ACCEPTANCE_HELD: EventKind.ACCEPTANCE_HELD,
        HaltRule.BLOCK_FAULT: EventKind.BLOCK_FAULT,
    }
    out: dict[str, Event] = {}
    for h in plan.halts:
        kind = rule_kind.get(h.rule)
        if kind is None:
            continue
        e = make(
            kind, plan.fleet, h.pool, None, f"{h.pool}: {h.message}", run_id, rule=h.rule.value
        )
        out.setdefault(e.condition or "", e)  # the first halt of a pool says why
    for w in plan.would:
        e = _would_event(plan.fleet, run_id, w)
        out.setdefault(e.condition or "", e)
    return out


def _would_event(fleet: str, run_id: str, w: Would) -> Event:
    """What a pool's mode held back, as a would_act condition per node and action kind:
    "would cordon demo-train-0002 (pool mode observe): XID 79 ...", sent once while the
    plan keeps making it and cleared when it no longer does."""
    a = w.action
    return make(
        EventKind.WOULD_ACT,
        fleet,
        a.pool,
        a.node,
        f"{w.headline} (pool mode {w.mode}): {a.reason}",
        run_id,
        action=a.kind.value,
        mode=w.mode.value,
        instance_id=a.instance_id,
        reason=a.reason,
        xid=_xid(a.fault),
        replaces=a.replaces,
    )


def outcome_conditions(fleet: str, run_id: str, outcomes: Iterable[Outcome]) -> dict[str, Event]:
    """Conditions from failed actions -> {condition key: Event}: auth and quota failures
    and a provision with no capacity anywhere (per pool), any other failure per node and
    action kind (action_failed)."""
    # By the exception's own class, as the audit log's `error` names it.
    kinds: dict[type[BaseException], EventKind] = {
        AuthError: EventKind.AUTH_FAILURE,
        QuotaError: EventKind.QUOTA_FAILURE,
        CapacityError: EventKind.CAPACITY_EXHAUSTED,
    }
    out: dict[str, Event] = {}
    for o in outcomes:
        if o.ok:
            continue
        a, error = o.action, o.error
        kind = kinds.get(type(o.exc)) if o.exc is not None else None
        if kind is None:
            e = make(
                EventKind.ACTION_FAILED,
                fleet,
                a.pool,
                a.node,
                f"{a.kind.value} {a.node or a.pool} failed: {o.detail}",
                run_id,
                action=a.kind.value,
                error=error,
                reason=a.reason,
            )
            out.setdefault(e.condition or "", e)
            continue
        e = make(
            kind,
            fleet,
            a.pool,
            None,
            f"{a.pool}: {a.kind.value} {a.node}: {o.detail}",
            run_id,
            action=a.kind.value,
        )
        out.setdefault(e.condition or "", e)
    return out


def events_from_error(fleet: str, exc: BaseException, run_id: str = "") -> tuple[Event, ...]:
    """Events for an apply that raised: lease lost (one-off), else apply failed (a fleet
    condition) plus auth/quota failure when a provider said so."""
    if isinstance(exc, LeaseLost):
        return (make(EventKind.LEASE_LOST, fleet, "*", None, f"lease lost: {exc}", run_id),)
    out = [
        make(
            EventKind.APPLY_FAILED,
            fleet,
            "*",
            None,
            f"apply failed: {type(exc).__name__}: {exc}",
            run_id,
            error=type(exc).__name__,
        )
    ]
    if isinstance(exc, AuthError | QuotaError):
        kind = EventKind.AUTH_FAILURE if isinstance(exc, AuthError) else EventKind.QUOTA_FAILURE
        out.append(make(kind, fleet, "*", None, str(exc), run_id, code=getattr(exc, "code", None)))
    return tuple(out)

"""The circuit breaker as one named value (docs/design.md, Safety rules, rule 4).

Like the Kubernetes node lifecycle controller's zone state (Normal / PartialDisruption /
FullDisruption, computed once per zone per pass and read by every decision after it), a
pool's or the fleet's breaker is computed once per run into a BreakerState: closed or open,
with the counts it was decided on and the words its halt says. Pure.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from navarch.planner.model import DiagState, DiagWhy, Lifecycle, NodeView


class Breaker(enum.StrEnum):
    """Whether a breaker lets cordons and terminations through (closed) or not (open)."""

    CLOSED = "closed"
    OPEN = "open"


#: What the breaker counts. Stale nodes count although they are never acted on: when the
#: store or the network fails, reports age together, spread over one heartbeat, and the
#: first of them pass offline_after while most are still only stale; counting only the
#: offline ones let a run cordon (and later terminate) healthy nodes before the breaker saw
#: the outage. Instances the cloud lists impaired count too, from their first listing: a
#: cloud's own outage must open the breaker before the first-sight cordons spend the budget.
_BREAKER_COUNTS = (Lifecycle.UNHEALTHY, Lifecycle.OFFLINE, Lifecycle.STALE)


@dataclass(frozen=True)
class BreakerState:
    """One breaker's verdict for this run.

    state: open when at least 2 of `total` active nodes (all but terminating ones and
    orphans) are `sick` and sick * 100 >= threshold_pct * total; sick: unhealthy, offline,
    stale, failing their return diagnostics or listed impaired by the cloud; reason: what
    was counted, in words, for the halt ("unhealthy, stale or offline (1 failing ...)").
    """

    state: Breaker
    sick: int
    total: int
    threshold_pct: float
    reason: str

    @property
    def open(self) -> bool:
        """True when the breaker holds new cordons and terminations back."""
        return self.state is Breaker.OPEN

    def summary(self, scope: str = "") -> str:
        """What the breaker counted against its threshold, the opening of its halt:
        "3 of 10 nodes are unhealthy, stale or offline (>= 30%)"; scope is inserted after
        "nodes" (" in the fleet")."""
        return (
            f"{self.sick} of {self.total} nodes{scope} are {self.reason} "
            f"(>= {self.threshold_pct:g}%)"
        )


def breaker_state(
    views: Sequence[NodeView], threshold_pct: float, alerts: Collection[str] = ()
) -> BreakerState:
    """The breaker over `views` (one pool's, or the whole fleet's) at threshold_pct
    (safety.circuit_breaker_pct or fleet_circuit_breaker_pct, 0-100). alerts: names of
    nodes unhealthy only by a fault their remediation table reports and never acts on
    (navarch.planner.remedy_gate.alert_only_nodes): active, but not sick, since a node
    nothing will act on gates nothing. O(N)."""
    active = [v for v in views if v.lifecycle is not Lifecycle.TERMINATING and not v.orphan]
    sick = sum(
        (v.lifecycle in _BREAKER_COUNTS and v.node not in alerts)
        or failed_return_diag(v)
        or listed_impaired(v)
        for v in active
    )
    total = len(active)
    tripped = sick >= 2 and total > 0 and sick * 100 >= threshold_pct * total
    return BreakerState(
        Breaker.OPEN if tripped else Breaker.CLOSED, sick, total, threshold_pct, _sick_words(active)
    )


def failed_return_diag(v: NodeView) -> bool:
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


def listed_impaired(v: NodeView) -> bool:
    """Whether the cloud lists v's instance impaired on this run."""
    return v.instance is not None and v.instance.cloud_status.impaired


def _sick_words(active: Sequence[NodeView]) -> str:
    """What the breaker counted, for its halt message."""
    failing = sum(failed_return_diag(v) for v in active)
    impaired = sum(listed_impaired(v) and v.lifecycle not in _BREAKER_COUNTS for v in active)
    notes = [f"{failing} failing their return diagnostics"] if failing else []
    notes += [f"{impaired} more listed impaired by the cloud"] if impaired else []
    return "unhealthy, stale or offline" + (f" ({'; '.join(notes)})" if notes else "")

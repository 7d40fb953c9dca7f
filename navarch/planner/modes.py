"""What a pool's mode lets the plan do; the rest becomes "would" rows. Pure.

A pool in ``observe`` or ``cordon`` (navarch.fleet.modes) is planned exactly as a pool in
``full``: the same stages, budget and ladder decide (a would cordon takes its place of the
budget, so the rows show what navarch would do within the same limits; a cordon only a
remediation row's mode holds does not: ``row_held``). Then ``hold_by_mode`` moves each
action its mode forbids out of the plan's actions into ``Plan.would``: a row that says
what would have been done ("would cordon node-1", "would replace node-1 with node-3") and
is never executed, but is rendered by plan and status, notified, counted in metrics and
recorded in the audit log (navarch.reconcile.executor) so ``navarch report`` can hold it
against what happened. The pause (navarch.planner.pause) is the same shape one level up:
the whole fleet, every action.

The mode of an action is its pool's, made stricter by the remediation row of the fault
it answers (navarch.fleet.remedies.RemedyRow.mode): the action's own fault, else the
fault of the node it acts on or stands in for. An action on a pool no longer declared
(an orphan's retirement) has no pool mode and is left as planned.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from navarch.fleet.modes import Mode, stricter
from navarch.fleet.remedies import row_for
from navarch.fleet.spec import FleetSpec, PoolSpec
from navarch.planner.model import Action, ActionKind, NodeView

__all__ = [
    "CORDON_ALLOWS",
    "Would",
    "action_mode",
    "allows",
    "hold_by_mode",
    "row_held",
    "would_text",
]

#: What ``cordon`` lets through: taking nodes out of (and back into) the scheduler and
#: looking at them; never a terminate, a launch, a reboot or a GPU reset.
CORDON_ALLOWS = frozenset(
    {
        ActionKind.CORDON,
        ActionKind.DRAIN,
        ActionKind.UNCORDON,
        ActionKind.DIAGNOSE,
        ActionKind.NCCL_PEER,
        ActionKind.UPDATE_TAGS,
        ActionKind.SCALE,
    }
)


def allows(mode: Mode, kind: ActionKind) -> bool:
    """Whether `mode` lets an action of `kind` run: full every kind, cordon CORDON_ALLOWS,
    observe none (not even a launch to reach the pool's target)."""
    if mode is Mode.FULL:
        return True
    return mode is Mode.CORDON and kind in CORDON_ALLOWS


@dataclass(frozen=True)
class Would:
    """An action the plan made and the pool's mode held back: never executed.

    action: the action as planned (its reason and payload, as `plan --json` lists it);
    mode: the mode that held it (the pool's, or stricter by its fault's remediation row);
    fault: the fault kind it answers ("xid:79@gpu0"'s kind "xid:79"; "" none), its own or
    its node's, so a report can group what navarch would have done by fault.
    """

    action: Action
    mode: Mode
    fault: str = ""

    def about(self) -> frozenset[str]:
        """The nodes the row is about: the one it acts on and the one it stands in for."""
        return frozenset(n for n in (self.action.node, self.action.replaces) if n)

    @property
    def headline(self) -> str:
        """ "would cordon node-1", "would replace node-1 with node-3", "would provision
        node-4": what the row says in plans, status and notifications."""
        return would_text(self.action)


def would_text(a: Action) -> str:
    """What an action held back by a mode would have done, in words (Would.headline)."""
    what = a.node or f"pool {a.pool}"
    if a.kind is ActionKind.PROVISION and a.replaces:
        return f"would replace {a.replaces} with {a.node}"
    return f"would {a.kind.value.replace('_', ' ')} {what}"


def _fault_kind(a: Action, views: Mapping[str, NodeView]) -> str | None:
    """The fault kind `a` answers: its payload's fault, else that of the node it acts on
    or stands in for (the ladder's remembered fault, else its report's), else None."""
    if a.fault is not None:
        return a.fault.key.kind
    v = views.get(a.replaces or a.node or "")
    if v is None:
        return None
    if v.fault is not None:
        return v.fault.key.kind
    if v.summary is not None and v.summary.fault_key is not None:
        return v.summary.fault_key.kind
    return None


def action_mode(pool: PoolSpec, a: Action, views: Mapping[str, NodeView]) -> Mode:
    """The mode `a` runs under: the stricter of the pool's and the mode of the remediation
    row deciding the fault it answers (no fault or no row: the pool's)."""
    return _mode_of(pool, _fault_kind(a, views))


def _mode_of(pool: PoolSpec, kind: str | None) -> Mode:
    """The stricter of the pool's mode and that of the row deciding fault `kind`."""
    row = row_for(pool.health.remedies, kind) if kind is not None else None
    return stricter(pool.mode, row.mode if row is not None else None)


def hold_by_mode(
    spec: FleetSpec, actions: Sequence[Action], views: Sequence[NodeView]
) -> tuple[tuple[Action, ...], tuple[Would, ...]]:
    """Split `actions` (plan order) into those the modes allow and the Would rows of the
    rest, both in plan order. Actions of a pool not in `spec` are allowed (module
    docstring). O(A) with a dict of the views."""
    pools = {p.name: p for p in spec.pools}
    by_node = {v.node: v for v in views}
    kept: list[Action] = []
    held: list[Would] = []
    for a in actions:
        pool = pools.get(a.pool)
        kind = _fault_kind(a, by_node)
        mode = _mode_of(pool, kind) if pool is not None else Mode.FULL
        if allows(mode, a.kind):
            kept.append(a)
        else:
            held.append(Would(a, mode, kind or ""))
    return tuple(kept), tuple(held)


def row_held(spec: FleetSpec, would: Sequence[Would]) -> frozenset[str]:
    """Nodes whose cordon a remediation row's mode holds back in a pool whose own mode
    would let it through. plan() plans again with them in PlanOptions.mode_held, so the
    repair stage leaves them (navarch.planner.remedy_gate.gate) and a fault the operator
    only watches takes no place of the pool's budget or repair rate from a fault it lets
    navarch act on. In a pool whose own mode holds the cordon, a would row keeps its place:
    it shows what navarch would do within the same limits."""
    pools = {p.name: p for p in spec.pools}
    return frozenset(
        w.action.node
        for w in would
        if w.action.kind is ActionKind.CORDON
        and w.action.node
        and w.action.pool in pools
        and allows(pools[w.action.pool].mode, ActionKind.CORDON)
    )

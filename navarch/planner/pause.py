"""A paused fleet's plan: everything planned, nothing to act on (`navarch pause`).

The pause is an input like any other (Memory.pause, written by navarch.reconcile.operator.pause
under the lease); the plan is made as usual, then every action is held with the one halt
rule HaltRule.PAUSED: a fleet-wide halt saying who paused, when and why, and one per
held action saying what would have been done. Runs then report what they would do while
a person looks, and act again once `navarch resume` clears the pause. Pure.
"""

from __future__ import annotations

from dataclasses import replace

from navarch.planner.model import Halt, HaltRule, Pause, Plan
from navarch.report.timefmt import ts

__all__ = ["hold_all", "pause_message"]


def pause_message(pause: Pause) -> str:
    """The fleet-wide halt's words: who paused, when (RFC 3339 UTC), why, and the way out."""
    return (
        f"paused by {pause.by} at {ts(pause.at)}: {pause.reason}; every run plans and "
        "reports but acts on nothing until `navarch resume FLEET`"
    )


def hold_all(plan: Plan, pause: Pause | None) -> Plan:
    """plan unchanged without a pause; else the same plan with no actions and the halts
    (one "*" PAUSED halt first, then the plan's own, then one PAUSED halt per held action,
    in plan order: "<action> <node or pool> held (<its reason>)")."""
    if pause is None:
        return plan
    held = tuple(
        Halt(a.pool, HaltRule.PAUSED, f"{a.kind.value} {a.node or a.pool} held ({a.reason})")
        for a in plan.actions
    )
    head = Halt("*", HaltRule.PAUSED, pause_message(pause))
    return replace(plan, actions=(), halts=(head, *plan.halts, *held))

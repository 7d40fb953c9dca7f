"""`navarch pause FLEET --reason TEXT` and `navarch resume FLEET`: a person stops every
run from acting, and lets them act again.

The pause lives in the fleet's state document (Memory.pause), written like any state
under the fleet's lease and by compare-and-swap, so every runner (cron, CI, a colleague's
laptop, the MCP server) sees it on its next run. The planner holds every action of a
paused fleet with the halt rule PAUSED (navarch.planner.pause); runs still observe, plan,
report and record what they saw. Both verbs are written to the audit log (action `pause`
or `resume`, pool `*`, who, why).

Operator verbs that name a node (cordon, uncordon, reboot) are not held: a person
acting on one node by name is what a pause makes room for.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from navarch.actor import Actor
from navarch.logs import new_run_id
from navarch.planner.model import Pause
from navarch.planner.pause import pause_message
from navarch.reconcile.operator.manual import verb_who
from navarch.reconcile.run import Clock, Fleet, leased, system_clock
from navarch.reconcile.state import AuditLog, default_holder, load_memory, save_memory
from navarch.report.timefmt import ts
from navarch.textsafe import operator_reason

__all__ = ["PauseResult", "pause", "resume"]


@dataclass(frozen=True)
class PauseResult:
    """What a pause or resume verb did. pause: the fleet's pause now (None after resume);
    before: the pause it replaced or cleared (None when there was none); message: one line
    for a person."""

    pause: Pause | None
    before: Pause | None
    message: str

    def to_json(self) -> dict[str, Any]:
        """{"paused": {"by", "at", "reason"} or null, "before": the same or null,
        "message"} (times RFC 3339 UTC)."""

        def doc(p: Pause | None) -> dict[str, Any] | None:
            return None if p is None else {"by": p.by, "at": ts(p.at), "reason": p.reason}

        return {"paused": doc(self.pause), "before": doc(self.before), "message": self.message}


def _who() -> str:
    """ "user@host" of this process (default_holder without its pid)."""
    return default_holder().rsplit(" pid ", 1)[0]


def _write(
    fleet: Fleet, verb: str, reason: str | None, actor: Actor | None, clock: Clock
) -> PauseResult:
    """Under the lease: set Memory.pause (reason None: clear it), audit the verb, return
    what changed."""
    spec = fleet.spec
    by = actor.label() if actor is not None else _who()
    with leased(fleet, verb, clock) as lease:
        now = clock()
        memory, version = load_memory(fleet.store, spec.name, fleet.state_cache)
        before = memory.pause
        if reason is None and before is None:
            return PauseResult(None, None, f"Fleet {spec.name} is not paused; nothing to resume.")
        after = None if reason is None else Pause(by, now, reason)
        if after is not None:
            message = f"Fleet {spec.name} {pause_message(after)}."
        else:
            message = f"Fleet {spec.name} resumed by {by}; the next run acts again."
        lease.check_store()
        save_memory(fleet.store, replace(memory, pause=after), version, cache=fleet.state_cache)
        run_id = new_run_id(now)
        audit = AuditLog(fleet.store, spec.name, run_id, now)
        audit.append(
            {
                "time": ts(now),
                "run_id": run_id,
                "operator": True,
                **verb_who(actor),
                "verb": verb,
                "action": verb,
                "pool": "*",
                "node": None,
                "reason": reason or "",
                "ok": True,
                "detail": message,
                "error": None,
            }
        )
        audit.flush()
        return PauseResult(after, before, message)


def pause(
    fleet: Fleet, reason: str, *, actor: Actor | None = None, clock: Clock = system_clock
) -> PauseResult:
    """Pause the fleet: from the next run on, every plan and apply acts on nothing and
    says who paused, when and why. A pause already in place is replaced (new who, when,
    why). actor: who pauses (navarch.actor; None: "user@host" of this process); reason:
    made plain; refused when empty or too long
    (textsafe.operator_reason).

    Raises NavarchError for an empty or too long reason, LockHeld when another run holds the lease,
    LeaseLost when it lapsed before the write, StoreError.
    """
    text = operator_reason(reason, "every run prints it while the fleet is paused")
    return _write(fleet, "pause", text, actor, clock)


def resume(fleet: Fleet, *, actor: Actor | None = None, clock: Clock = system_clock) -> PauseResult:
    """Clear the fleet's pause: the next run acts again. Resuming a fleet that is not
    paused changes nothing (PauseResult.before is None). Raises LockHeld, LeaseLost,
    StoreError."""
    return _write(fleet, "resume", None, actor, clock)

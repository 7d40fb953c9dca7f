"""The fleet's cap on launches per run (safety.max_launches_per_run): pure, like the planner.

Every other limit paces a pool toward what fleet.yaml declares; this one doubts the
declaration itself. A typo in nodes.target (2000 for 20) is a valid fleet, and under
`apply --auto-approve` nothing else stands between it and two thousand GPU nodes billed by
the hour. Launching up to the cap every run would only slow the typo down (a cron of
runs buys the whole count in hours), so a plan that wants more launches none of its
growth: it stops for a human (a safety halt: exit 3) naming the count and the flag that
allows it (`--allow-launches N`) or the key to raise when the growth is meant.
"""

from __future__ import annotations

from collections.abc import Sequence

from navarch.planner.model import Action, ActionKind, Halt, HaltRule
from navarch.textsafe import counted

#: The key an operator raises for a deliberate large scale-up (named in the halt).
MAX_LAUNCHES_KEY = "safety.max_launches_per_run"
#: The flag of `navarch plan` and `navarch apply` that allows one run more launches.
ALLOW_FLAG = "--allow-launches"


def cap_launches(
    actions: Sequence[Action], limit: int, allowed: int = 0
) -> tuple[tuple[Action, ...], tuple[Halt, ...]]:
    """The plan's actions with its growth held back when it launches more than the cap
    allows, and the halt saying so.

    actions: the plan's actions in execution order; limit: safety.max_launches_per_run
    (>= 1); allowed: `--allow-launches N` of this run (0: none), which raises the cap to N
    for this run. Returns (actions, ()) unchanged when the plan provisions at most
    max(limit, allowed) nodes. Otherwise no scale-up launches at all, and only the
    replacements of nodes leaving service (a fault, drift: already bounded by
    max_unavailable and the repair rate limit, capacity the pool is losing whatever
    fleet.yaml says), at most `limit` of them in plan order, still launch; returns one
    fleet-wide ("*") HaltRule.MAX_LAUNCHES halt naming the count and ALLOW_FLAG. Every
    other action stays.
    """
    provisions = [i for i, a in enumerate(actions) if a.kind is ActionKind.PROVISION]
    cap = max(limit, allowed)
    if len(provisions) <= cap:
        return tuple(actions), ()
    kept = [i for i in provisions if actions[i].replaces is not None][:limit]
    held = frozenset(provisions) - frozenset(kept)
    count = len(provisions)
    still = (
        f" ({counted(len(kept), 'replacement')} of nodes leaving service still launch)"
        if kept
        else ""
    )
    given = f"{ALLOW_FLAG} {allowed:,} allows {allowed:,}; " if allowed else ""
    halt = Halt(
        "*",
        HaltRule.MAX_LAUNCHES,
        f"the plan would provision {count:,} {'node' if count == 1 else 'nodes'}, more than "
        f"{MAX_LAUNCHES_KEY} ({limit:,}): {given}none of its {len(held):,} new nodes "
        f"launch{still}; if the fleet is meant to grow this much run again with "
        f"{ALLOW_FLAG} {count} (or raise {MAX_LAUNCHES_KEY} in fleet.yaml), else fix the "
        "pools' nodes.target",
    )
    return tuple(a for i, a in enumerate(actions) if i not in held), (halt,)

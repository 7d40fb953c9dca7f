"""The fleet's cap on launches per run (safety.max_launches_per_run): pure, like the planner.

Every other limit paces a pool toward what fleet.yaml declares; this one doubts the
declaration itself. A typo in nodes.target (2000 for 20) is a valid fleet, and under
`apply --auto-approve` nothing else stands between it and two thousand GPU nodes billed by
the hour. So one run provisions at most the cap, and a plan that wants more stops for a
human (a safety halt: exit 3) naming the key to raise when the growth is meant.
"""

from __future__ import annotations

from collections.abc import Sequence

from navarch.planner.model import Action, ActionKind, Halt, HaltRule
from navarch.textsafe import counted

#: The key an operator raises for a deliberate large scale-up (named in the halt).
MAX_LAUNCHES_KEY = "safety.max_launches_per_run"


def cap_launches(
    actions: Sequence[Action], limit: int
) -> tuple[tuple[Action, ...], tuple[Halt, ...]]:
    """The plan's actions with provisions beyond `limit` held back, and the halt saying so.

    actions: the plan's actions in execution order; limit: safety.max_launches_per_run
    (>= 1). Returns (actions, ()) unchanged when the plan provisions at most `limit` nodes.
    Otherwise keeps `limit` provisions, replacements first (a node leaving service for a
    fault or drift: already bounded by max_unavailable and the repair rate limit, and
    capacity the pool is losing) then scale-up, each in plan order (pools by name, node
    indices ascending, so no pool's names skip), and returns one fleet-wide ("*")
    HaltRule.MAX_LAUNCHES halt. The held-back nodes are provisioned by later runs once
    the cap is raised or the target fixed; every other action stays.
    """
    provisions = [i for i, a in enumerate(actions) if a.kind is ActionKind.PROVISION]
    if len(provisions) <= limit:
        return tuple(actions), ()
    ranked = sorted(provisions, key=lambda i: (actions[i].replaces is None, i))
    held = frozenset(ranked[limit:])
    halt = Halt(
        "*",
        HaltRule.MAX_LAUNCHES,
        f"the plan would provision {counted(len(provisions), 'node')}, more than "
        f"{MAX_LAUNCHES_KEY} ({limit:,}): {limit:,} launch this run, {len(held):,} are held "
        f"back; if the fleet is meant to grow this much raise {MAX_LAUNCHES_KEY} in "
        "fleet.yaml, else fix the pools' nodes.target",
    )
    return tuple(a for i, a in enumerate(actions) if i not in held), (halt,)

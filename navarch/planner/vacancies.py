"""Where a node terminated to be replaced sat, until its replacement launches. Pure.

A pool with `replacement: after-terminate` launches a node's replacement only once the
node is gone. By then the node's instance has left the inventory (the local provider
removes it at once, Compute Engine once its delete operation ends, EC2 lists terminated
instances as gone), so nothing in the run's views says where it was. The executor
records a Vacancy when it terminates such a node (``vacancy_of`` decides whether one is
owed); the count stage gives each provision for an open vacancy its ``replaces``
(``open_vacancies``), so the replacement prefers the node's zone
(navarch.planner.zones) and, with ``topology: same_block``, asks for its topology block
(navarch.planner.hosts.launch_wish); the executor fills the vacancy when that launch
succeeds (``fill``). A vacancy not filled within VACANCY_TTL_S lapses: a launch that
much later is capacity like any other, not a replacement.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from datetime import datetime

from navarch.fleet.spec import PoolSpec, Replacement
from navarch.inventory import Instance
from navarch.planner.model import Action, ActionReason, NodeMemory, PoolMemory, Vacancy

__all__ = ["MAX_VACANCIES", "VACANCY_TTL_S", "fill", "open_vacancies", "record", "vacancy_of"]

#: How long a vacancy waits for its replacement (seconds): longer than a capacity
#: backoff's first steps and a slow boot, short enough that a scale-up days later is
#: not taken for a replacement.
VACANCY_TTL_S = 3600
#: Vacancies kept per pool at most (the oldest go first): the state stays small.
MAX_VACANCIES = 64

#: Terminations that owe no replacement: the pool shrinks, leaves, or is destroyed, or
#: the instance was a duplicate of a node that stays.
_NOT_REPLACED = frozenset(
    {
        ActionReason.SCALE_DOWN,
        ActionReason.DESTROY,
        ActionReason.ORPHAN,
        ActionReason.DUPLICATE,
        ActionReason.CAPACITY_BLOCK_END,
    }
)


def vacancy_of(
    pool: PoolSpec | None, action: Action, node: NodeMemory | None, inst: Instance, now: datetime
) -> Vacancy | None:
    """The vacancy a successful termination leaves, or None when no replacement is owed
    after it: the pool is not declared (an orphan), replaces by surge (its replacement
    launched beside the node, carrying the node's zone and block), the node was cordoned
    for a scale-down (Cordon.scale_down), or the action's reason owes none."""
    if pool is None or pool.health.replacement is not Replacement.AFTER_TERMINATE:
        return None
    if action.action_reason in _NOT_REPLACED or (
        node is not None and node.cordon is not None and node.cordon.scale_down
    ):
        return None
    return Vacancy(action.node or "", inst.provider, inst.zone, inst.block, now)


def _live(pm: PoolMemory, now: datetime) -> tuple[Vacancy, ...]:
    return tuple(v for v in pm.vacancies if (now - v.at).total_seconds() < VACANCY_TTL_S)


def record(pm: PoolMemory, vacancy: Vacancy, now: datetime) -> PoolMemory:
    """pm with `vacancy` added (one per node), lapsed ones dropped, at most MAX_VACANCIES."""
    kept = tuple(v for v in _live(pm, now) if v.node != vacancy.node) + (vacancy,)
    return replace(pm, vacancies=kept[-MAX_VACANCIES:])


def fill(pm: PoolMemory, node: str, now: datetime) -> PoolMemory:
    """pm without the vacancy of `node` (its replacement launched) and lapsed ones; the
    same object when nothing changes."""
    kept = tuple(v for v in _live(pm, now) if v.node != node)
    return pm if kept == pm.vacancies else replace(pm, vacancies=kept)


def open_vacancies(pm: PoolMemory, now: datetime, known: Collection[str]) -> tuple[Vacancy, ...]:
    """The pool's vacancies still owed a replacement, oldest first: not lapsed, and whose
    node is not among `known` (the run's node views: a node still listed is replaced as
    the node it is)."""
    return tuple(v for v in _live(pm, now) if v.node not in known)

"""How long a warm spare's place stays empty: each spare the set lacks, from the run that
lost it (a promotion, or the spare's own fault) to the run that filled it again.

The engine's spells (``spare_refill_s``) run from the first run with fewer spares than the
pools declare to the first with the set whole again: two faults eight minutes apart make
one spell that lasts until the second replacement is ready, longer than either refill.
A place is one spare: the first lost is the first filled (a queue), so each figure is one
replacement's launch, boot and acceptance plus the runs around them, the quantity the
refill goal (launch + boot + acceptance + 2 min, docs/simulate.md) bounds.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from navarch.simulate.report import percentile

__all__ = ["SlotRefills"]


class SlotRefills:
    """Counts empty spare places run by run (observe) and gives the result keys (keys).

    Times are seconds since the start; only runs after the fleet first reached its target
    are observed (the engine's ``warm``), as for the spells.
    """

    def __init__(self) -> None:
        self.lost: deque[float] = deque()  # when each place now empty was lost, oldest first
        self.refills: list[float] = []  # seconds each filled place stayed empty

    def observe(self, t_s: float, count: int, declared: int) -> None:
        """A run at t_s saw `count` warm spares of `declared` (nodes.spares, less what max
        leaves above target): places newly empty start now, places filled end now."""
        short = max(0, declared - count)
        while len(self.lost) < short:
            self.lost.append(t_s)
        while len(self.lost) > short:
            self.refills.append(round(t_s - self.lost.popleft(), 3))

    def keys(self, spells_s: list[float], duration_s: float) -> dict[str, Any]:
        """The result document's keys: p95 of the spells (spells_s, the engine's
        spare_refill_s), the places' refills with their p95 and maximum, and the
        place still empty longest at the end (its length so far), else null."""
        return {
            "p95_spare_refill_s": percentile(spells_s, 0.95),
            "spare_slot_refill_s": list(self.refills),
            "p95_spare_slot_refill_s": percentile(self.refills, 0.95),
            "max_spare_slot_refill_s": max(self.refills) if self.refills else None,
            "spare_slot_refill_open_s": round(duration_s - self.lost[0], 3) if self.lost else None,
        }

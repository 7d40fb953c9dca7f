"""How far navarch may act on a pool: observe, cordon or full (fleet.yaml ``mode:``).

An operator hands a new tool a production fleet in stages: first it only watches and says
what it would do (``observe``), then it may take sick nodes out of the scheduler
(``cordon``), then it may replace and remedy them (``full``, the default). A pool names
its mode, and a row of its remediation table (``health.remedies[].mode``) may name one
for the faults it matches; where both apply the stricter wins, so a row can hold one
fault class back in a pool that acts fully, but never grant more than its pool allows.

Which action kinds each mode lets through is the planner's rule
(navarch.planner.modes.allows); this module holds the word and its order. Pure.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Mode", "stricter"]


class Mode(StrEnum):
    """A pool's (or a remediation row's) mode, serialised by value.

    OBSERVE: plan, record and notify what would be done; act on nothing, launches to reach
    the pool's target included. CORDON: cordon and drain (and uncordon) only; never
    terminate, launch, reboot or reset GPUs. FULL: every action the plan makes.
    """

    OBSERVE = "observe"
    CORDON = "cordon"
    FULL = "full"

    @property
    def strictness(self) -> int:
        """0 for full, 1 for cordon, 2 for observe: the higher holds back more."""
        return _STRICTNESS[self]


_STRICTNESS = {Mode.FULL: 0, Mode.CORDON: 1, Mode.OBSERVE: 2}


def stricter(a: Mode, b: Mode | None) -> Mode:
    """The stricter of `a` and `b` (b None: a), the rule for a pool's mode and its
    remediation row's (module docstring)."""
    if b is None:
        return a
    return a if a.strictness >= b.strictness else b

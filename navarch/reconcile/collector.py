"""Python's cyclic garbage collector around gather(), in a process that gathers once.

A gather of a large fleet allocates millions of objects that live until a one-shot command
exits (Memory, the verified-report cache's entries, the views and the plan) and makes next
to no reference cycles. With the collector running, it scanned them again and again while
they were made: about 60 young and one middle collection, 1.3 s of a 12 s incremental plan
at 100,000 nodes, even with the CLI's batch thresholds (``navarch.cli.tune_gc_for_batch``).
Pausing it and resuming it afterwards only moves that cost: the first collection after
the pause scans everything made during it.

So a command that gathers once and exits (the CLI's plan, apply, status and destroy run
inside ``one_shot``) gathers with the collector paused and then freezes what it made out
of later scans (``gc.freeze``), as the CLI does with the objects imported at start-up. Reference counting
still frees every frozen object that is dropped; only a cycle among frozen objects is
never collected, so a process that gathers again and again (``navarch simulate``, the MCP
server) keeps the collector as it is.
Benchmark: ``bench/scale.py`` (``incremental_vs_floor_100k``).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gathering", "one_shot"]

#: Whether a one_shot() block is running (a list: set and restored in place).
_one_shot = [False]


@contextmanager
def one_shot() -> Iterator[None]:
    """Around a command that gathers once and then exits: the gathers inside pause the
    collector and freeze what they made (see the module docstring)."""
    before = _one_shot[0]
    _one_shot[0] = True
    try:
        yield
    finally:
        _one_shot[0] = before


@contextmanager
def gathering() -> Iterator[None]:
    """Around one gather: inside one_shot() (and with the collector on), pause
    the collector, and on the way out freeze the objects made and resume it; elsewhere,
    nothing."""
    if not _one_shot[0] or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()

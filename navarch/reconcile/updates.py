"""Updates: what a handler returns beside its Outcome, a pure function Memory -> Memory.

Handlers run on the engine's worker threads and never touch the run's Memory; each
returns an Update, and the engine (navarch.reconcile.executor) folds them on its one
folding thread in completion order, so Memory changes are serialised.
"""

from __future__ import annotations

from collections.abc import Callable

from navarch.planner.model import Memory, NodeMemory

#: A change to the run's Memory, folded by the engine's one folding thread.
Update = Callable[[Memory], Memory]


def same(memory: Memory) -> Memory:
    """The Update that changes nothing (the engine journals only after other ones)."""
    return memory


def chain(*updates: Update) -> Update:
    """One Update that applies `updates` in order."""

    def run(memory: Memory) -> Memory:
        for u in updates:
            memory = u(memory)
        return memory

    return run


def set_node(nm: NodeMemory) -> Update:
    """The Update that records `nm` as its node's entry."""
    return lambda memory: memory.with_node(nm)

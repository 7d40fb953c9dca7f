"""The partial run: an event-started run whose reports are all quiet folds them and stops.

navarch.planner.quiet decides when the reports an event run was started for can change no
decision now. Then the run (under the lease, like any apply) reads Memory and those
reports only, folds them into Memory and saves it when it changed: no cloud listing, no
observation of the other nodes, no plan, no verified-report cache. Its cost grows with the
events, not the fleet, but for reading and writing the state document (bench/scale.py,
event_vs_floor_100k). Anything else, and a run asked for more than converging (a saved
plan, --replace, destroy), is the full run.

Correctness under failure is the full run's: the state is written by compare-and-swap on
the version read, fenced by the lease (Lease.check_store), and the event's messages are
deleted by the caller only after this returns (navarch.events.runner), so a crash before
the write costs one more delivery, and a delivery of reports already folded writes
nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import datetime

from navarch.fleet.spec import FleetSpec
from navarch.outcome import RunResult
from navarch.planner.model import Memory, Plan
from navarch.planner.quiet import quiet_fold
from navarch.reconcile.named_reports import list_named, named_keys
from navarch.reconcile.reports import RuleSets, read_listed
from navarch.reconcile.state import StateCache, load_memory, save_memory
from navarch.stores import ObjectStore

__all__ = ["Partial", "quiet_run"]


@dataclass(frozen=True)
class Partial:
    """What a partial run did: its plan (no actions, Plan.partial saying what it left)
    and the Memory it left (saved when the reports changed it)."""

    plan: Plan
    memory: Memory

    def result(self, run_id: str) -> RunResult:
        """The run's RunResult: the plan, no outcomes, the Memory it left."""
        return RunResult(self.plan, (), self.memory, run_id)


def quiet_run(
    store: ObjectStore,
    spec: FleetSpec,
    secret: bytes | None,
    cache: StateCache,
    now: datetime,
    named: Collection[str],
    check_store: Callable[[], None],
) -> Partial | None:
    """Fold the named reports into Memory when every one is quiet -> the Partial run, or
    None when the full run must run (a report that is not quiet, none of the keys left in
    the store, a key that is not this fleet's report).

    named: report keys health/<fleet>/<pool>/<node>.json. check_store: the lease's
    fencing check (Lease.check_store), called before the state is written. Raises
    StoreError (reading or writing the state, listing a key), LeaseLost and
    PreconditionFailed (from the write: nothing is written then).
    """
    keys = named_keys(spec.name, named)
    if not keys or len(keys) != len(set(named)):
        return None
    memory, version = load_memory(store, spec.name, cache, lazy=True)
    listed = list_named(store, spec.name, keys)
    if len(listed) != len(keys):
        return None  # a report was deleted: the node may be gone, which is the full run's
    rules: Mapping[str, RuleSets] = {p.name: p.health.rule_sets() for p in spec.pools}
    try:
        reports = read_listed(store, spec.name, memory, secret, now, listed, rules)
        changed = quiet_fold(spec, memory, reports) if len(reports) == len(keys) else None
    except (KeyError, ValueError, TypeError):
        return None  # a malformed node entry: the full run reads the state and says so
    if changed is None:
        return None
    saved = memory
    if changed:
        check_store()
        # A lazy Memory is not remembered in the cache: it has not checked every entry.
        lazy = memory.nodes.lazy_entries() is not None
        saved, _ = save_memory(
            store, memory.with_nodes(changed), version, cache=None if lazy else cache
        )
    plan = Plan(
        fleet=spec.name,
        created_at=now,
        actions=(),
        state_serial=memory.serial,
        partial=_partial_text(len(keys), len(changed)),
    )
    return Partial(plan, saved)


def _partial_text(read: int, new: int) -> str:
    """What a partial run says instead of "No changes"."""
    reports = f"{read} report{'s' if read != 1 else ''}"
    what = f"{new} new" if new else "none new"
    return (
        f"read the {reports} its events named ({what}), each healthy from a node in "
        "service; the clouds were not listed and no other node was looked at (the "
        "periodic run plans the whole fleet)"
    )

"""The listing of an event-started run: the reports its events named, and Memory for the rest.

A run started by the store's notifications (navarch.events) knows which reports were
written. Listing health/<fleet>/ again (one LIST page per 1,000 keys, and a stat per key on
the file store) would only confirm that the others did not change, so the run lists just the
named keys and takes every other node's report as the one Memory folded in last: the same
observation a full listing gives for an unchanged object (navarch.reconcile.reports,
_known_reports).

That is safe only while a missed event cannot matter. A lost notification leaves a newer
report unseen until the next periodic run (events make a run sooner, never replace the
schedule), which is the cron reconciler's reaction time anyway; but a report that looks old
would be judged stale or offline on a guess. So the named listing is used only when every
other node's last seen report is still fresh (younger than its pool's stale_after) and every
node Memory knows has been seen reporting; otherwise the run lists in full as usual.
Benchmark: ``bench/scale.py`` (``event_vs_floor_100k``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime

from navarch.planner.model import Memory
from navarch.reconcile.state import health_key
from navarch.stores.base import ObjectInfo, ObjectStore

__all__ = ["list_named", "named_keys", "named_listing"]

#: key -> (pool, node, listing entry): the shape of reports._Listed.
Listing = dict[str, tuple[str, str, ObjectInfo]]


def named_listing(
    store: ObjectStore,
    fleet: str,
    memory: Memory,
    named: Collection[str],
    now: datetime,
    stale_after_s: Mapping[str, int],
) -> Listing | None:
    """The listing a run started by events reads -> key -> (pool, node, entry), or None
    when the run must list health/<fleet>/ in full (see the module docstring).

    named: store-relative keys health/<fleet>/<pool>/<node>.json (navarch.events.messages
    checked their shape). stale_after_s: pool name -> its health.stale_after_s; a node of
    a pool not in it (a pool being removed) forces a full listing too. Each named key is
    listed on its own (a LIST with the key as prefix: one request on S3 and GCS); a named
    key that is gone is left out, as a full listing would. Raises StoreError.
    """
    listing: Listing = {}
    for nm in memory.nodes:
        limit = stale_after_s.get(nm.pool)
        if limit is None or nm.report_version is None or nm.report is None:
            return None
        if (now - nm.report.observed_at).total_seconds() > limit:
            return None
        key = health_key(fleet, nm.pool, nm.node)
        stored = nm.report.stored_at or nm.report.generated_at
        listing[key] = (nm.pool, nm.node, ObjectInfo(key, nm.report_version, 0, stored.isoformat()))
    for key in named_keys(fleet, named):
        listing.pop(key, None)
    listing.update(list_named(store, fleet, named))
    return listing


def named_keys(fleet: str, named: Collection[str]) -> list[str]:
    """The keys of `named` that look like health/<fleet>/<pool>/<node>.json, sorted and
    distinct; others are left out."""
    prefix = f"health/{fleet}/"
    out = []
    for key in sorted(set(named)):
        pool, _, name = key[len(prefix) :].partition("/")
        if key.startswith(prefix) and pool and name.endswith(".json") and "/" not in name:
            out.append(key)
    return out


def list_named(store: ObjectStore, fleet: str, named: Collection[str]) -> Listing:
    """The named reports as the store lists them now -> key -> (pool, node, entry).

    Each key of named_keys() is listed on its own (a LIST with the key as prefix: one
    request on S3 and GCS); a named key that is gone is left out, as a full listing would.
    Raises StoreError.
    """
    listing: Listing = {}
    prefix = f"health/{fleet}/"
    for key in named_keys(fleet, named):
        pool, _, name = key[len(prefix) :].partition("/")
        for info in store.list(key):
            if info.key == key:
                listing[key] = (pool, name[: -len(".json")], info)
    return listing

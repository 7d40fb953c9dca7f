"""The notifier's memory: which conditions are active, in state/<fleet>.notify.json.

A condition (breaker open in a pool, capacity exhausted, auth failure, ...) is sent once
when it starts and once when it clears; this document is what lets the next run know.
It lives beside Memory (state/<fleet>.json), not inside it: Memory belongs to the planner
and the executor, and this one has its own writer. Writes are compare-and-swap on the
object's version (navarch.stores put(if_absent / if_version)), like Memory's.

Document: {"format_version": 1, "fleet": F, "active": {condition key: {"kind", "pool",
"node", "message", "since"}}, "idle_since": {reservation id: when first seen idle}}.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from navarch.errors import NotFound, PreconditionFailed, StoreError
from navarch.notify.events import Event, EventKind, cleared, make
from navarch.report.timefmt import ts
from navarch.stores.base import ObjectStore


def notify_key(fleet: str) -> str:
    """Object key of the notifier's state."""
    return f"state/{fleet}.notify.json"


@dataclass(frozen=True)
class NotifyState:
    """Active conditions by key (as Events), the time each started (RFC 3339), and the
    object's version (None when it does not exist yet)."""

    active: Mapping[str, Event]
    since: Mapping[str, str]
    version: str | None
    #: reservation id -> when it was first seen idle (navarch.notify.reserved)
    idle_since: Mapping[str, str] = field(default_factory=dict)


def load_state(store: ObjectStore, fleet: str) -> NotifyState:
    """Read state/<fleet>.notify.json; missing or unreadable -> no active condition.

    An unreadable document is not fatal (it is only about what was already sent): the
    worst outcome is one repeated notification. Raises StoreError when the store fails.
    """
    try:
        blob = store.get(notify_key(fleet))
    except NotFound:
        return NotifyState({}, {}, None)
    try:
        doc = json.loads(blob.data)
        active = {
            k: replace(
                make(EventKind(v["kind"]), fleet, v["pool"], v.get("node"), v["message"]),
                condition=k,
            )
            for k, v in doc["active"].items()
        }
        since = {k: str(v.get("since", "")) for k, v in doc["active"].items()}
        idle_since = {str(k): str(v) for k, v in doc.get("idle_since", {}).items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        return NotifyState({}, {}, blob.version)
    return NotifyState(active, since, blob.version, idle_since)


def save_state(store: ObjectStore, fleet: str, state: NotifyState) -> str:
    """CAS-write the active conditions -> the new version.

    Raises PreconditionFailed when another writer moved the document on, StoreError.
    """
    doc = {
        "format_version": 1,
        "fleet": fleet,
        "active": {
            k: {
                "kind": e.kind.value,
                "pool": e.pool,
                "node": e.node,
                "message": e.message,
                "since": state.since.get(k, ""),
            }
            for k, e in sorted(state.active.items())
        },
        "idle_since": dict(sorted(state.idle_since.items())),
    }
    body = json.dumps(doc, indent=1, sort_keys=True).encode()
    if state.version is None:
        return store.put(notify_key(fleet), body, if_absent=True)
    return store.put(notify_key(fleet), body, if_version=state.version)


def transition(
    previous: NotifyState,
    current: Mapping[str, Event],
    now: datetime,
    run_id: str = "",
    *,
    complete: bool = True,
    pools: frozenset[str] | None = None,
) -> tuple[tuple[Event, ...], NotifyState]:
    """Compare this run's conditions with the active ones -> (events to send, new state).

    A condition in `current` but not active is sent (it started); an active one absent
    from `current` is cleared (sent as breaker_cleared / condition_cleared) only when the
    run saw the whole picture: complete (the apply finished; a failed apply knows nothing
    of the breakers) and its pool in `pools` (None: every pool; a --pool run leaves the
    others' conditions alone). Still-active conditions send nothing.
    """
    started = tuple(e for k, e in sorted(current.items()) if k not in previous.active)
    clears: list[Event] = []
    active = dict(previous.active)
    since = dict(previous.since)
    for key, event in sorted(previous.active.items()):
        if key in current:
            continue
        in_scope = pools is None or event.pool == "*" or event.pool in pools
        if complete and in_scope:
            clears.append(cleared(event, run_id))
            active.pop(key)
            since.pop(key, None)
    for e in started:
        active[e.condition or ""] = e
        since[e.condition or ""] = ts(now) or ""
    return started + tuple(clears), NotifyState(
        active, since, previous.version, previous.idle_since
    )


def commit(store: ObjectStore, fleet: str, state: NotifyState) -> str | None:
    """save_state; returns the error text when it failed (a lost
    race or a store error: the next run may then repeat a notification), else None."""
    try:
        save_state(store, fleet, state)
    except PreconditionFailed:
        return f"{notify_key(fleet)} changed under this run; not saved"
    except StoreError as exc:
        return f"cannot save {notify_key(fleet)}: {exc}"
    return None

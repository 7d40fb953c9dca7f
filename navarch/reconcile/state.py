"""The reconciler's memory, lock and audit log, on any ObjectStore.

state/<fleet>.json   Memory, written by compare-and-swap on the object's version, serial + 1
                     on every write (S3 If-Match ETag, GCS ifGenerationMatch, file inode).
state/<fleet>.lock   the lock: created only if absent (If-None-Match: *, ifGenerationMatch=0);
                     a lock past its expiry may be taken over by CAS; released by a
                     delete conditional on the version we wrote (Terraform's S3/GCS backends
                     lock the same way).
events/<fleet>/<yyyy>/<mm>/<dd>/<run-id>.jsonl   one object per run: every action applied
                     and its outcome, one JSON object per line.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from navarch.errors import LockHeld, NavarchError, NotFound, PreconditionFailed, StoreError
from navarch.planner.model import Memory, memory_from_json, memory_to_json, parse_ts, ts
from navarch.stores.base import ObjectStore


def state_key(fleet: str) -> str:
    """Object key of the fleet's Memory document."""
    return f"state/{fleet}.json"


def lock_key(fleet: str) -> str:
    """Object key of the fleet's lock."""
    return f"state/{fleet}.lock"


def health_prefix(fleet: str) -> str:
    """Prefix under which agents write the fleet's health reports."""
    return f"health/{fleet}/"


def health_key(fleet: str, pool: str, node: str) -> str:
    """Object key of one node's latest health report."""
    return f"health/{fleet}/{pool}/{node}.json"


def default_holder() -> str:
    """"user@host pid N": who holds a lock, for the message other runs print."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()} pid {os.getpid()}"


@dataclass(frozen=True)
class Lock:
    """A held lock: its id, holder, command, times (aware UTC) and the object's version."""

    lock_id: str
    holder: str
    command: str
    created_at: datetime
    expires_at: datetime
    version: str

    def to_json(self) -> dict[str, Any]:
        return {"lock_id": self.lock_id, "holder": self.holder, "command": self.command,
                "created_at": ts(self.created_at), "expires_at": ts(self.expires_at)}


def _read_lock(store: ObjectStore, fleet: str) -> Lock:
    blob = store.get(lock_key(fleet))
    try:
        d = json.loads(blob.data)
        return Lock(d["lock_id"], d["holder"], d["command"], parse_ts(d["created_at"]),
                    parse_ts(d["expires_at"]), blob.version)
    except (ValueError, KeyError, TypeError) as exc:
        raise StoreError(
            f"{lock_key(fleet)} is unreadable; if no navarch run is active, remove it with "
            "`navarch force-unlock FLEET LOCK_ID` (use the id `corrupt`)"
        ) from exc


def acquire_lock(store: ObjectStore, fleet: str, command: str, ttl_s: int, now: datetime,
                 holder: str | None = None) -> Lock:
    """Take the fleet lock or raise LockHeld (holder, command, age).

    A lock past its expiry is taken over with a CAS write on its version, so of two runs
    that both see it expired only one wins. Raises StoreError for store failures.
    """
    lock = Lock(uuid.uuid4().hex[:12], holder or default_holder(), command, now,
                now + timedelta(seconds=ttl_s), "")
    body = json.dumps(lock.to_json(), sort_keys=True).encode()
    try:
        version = store.put(lock_key(fleet), body, if_absent=True)
        return Lock(**{**lock.__dict__, "version": version})
    except PreconditionFailed:
        pass
    try:
        held = _read_lock(store, fleet)
    except NotFound:
        # Released between our write and our read: one more try, then report the race.
        version = store.put(lock_key(fleet), body, if_absent=True)
        return Lock(**{**lock.__dict__, "version": version})
    if held.expires_at > now:
        raise LockHeld(held.holder, held.command, held.lock_id,
                       (now - held.created_at).total_seconds(),
                       (held.expires_at - now).total_seconds())
    try:
        version = store.put(lock_key(fleet), body, if_version=held.version)
    except PreconditionFailed as exc:
        raise LockHeld(held.holder, held.command, held.lock_id,
                       (now - held.created_at).total_seconds(), 0.0) from exc
    return Lock(**{**lock.__dict__, "version": version})


def release_lock(store: ObjectStore, fleet: str, lock: Lock) -> None:
    """Release our lock; if someone took it over (ours expired), leave theirs alone."""
    try:
        store.delete(lock_key(fleet), if_version=lock.version)
    except (PreconditionFailed, NotFound):
        pass


def force_unlock(store: ObjectStore, fleet: str, lock_id: str) -> Lock | None:
    """Remove the lock if its id is lock_id (or "corrupt" for an unreadable lock).

    Returns the removed Lock (None for a corrupt one). Raises NavarchError when no lock
    is held or the id does not match (so a human cannot remove a lock they did not mean).
    """
    try:
        held = _read_lock(store, fleet)
    except NotFound as exc:
        raise NavarchError(f"fleet {fleet} is not locked") from exc
    except StoreError:
        if lock_id != "corrupt":
            raise
        store.delete(lock_key(fleet))
        return None
    if held.lock_id != lock_id:
        raise NavarchError(
            f"the lock is {held.lock_id} (held by {held.holder} for {held.command!r}), not {lock_id}"
        )
    store.delete(lock_key(fleet), if_version=held.version)
    return held


def load_memory(store: ObjectStore, fleet: str) -> tuple[Memory, str | None]:
    """Read state/<fleet>.json -> (Memory, version); a missing object is an empty Memory.

    Raises StoreError when the document exists but cannot be read: navarch stops rather
    than act on a fleet it has forgotten.
    """
    try:
        blob = store.get(state_key(fleet))
    except NotFound:
        return Memory(fleet=fleet, lineage=uuid.uuid4().hex), None
    try:
        mem = memory_from_json(json.loads(blob.data))
    except (ValueError, KeyError, TypeError) as exc:
        raise StoreError(
            f"{state_key(fleet)} in {store.url} is not a valid navarch state document ({exc}); "
            "restore an earlier version from the store's history before running again"
        ) from exc
    if mem.fleet != fleet:
        raise StoreError(f"{state_key(fleet)} belongs to fleet {mem.fleet!r}, not {fleet!r}")
    return mem, blob.version


def save_memory(store: ObjectStore, memory: Memory, version: str | None) -> tuple[Memory, str]:
    """CAS-write memory with serial + 1 -> (saved Memory, new version).

    Raises PreconditionFailed when another writer moved the state on since `version`.
    """
    saved = Memory(**{**memory.__dict__, "serial": memory.serial + 1})
    body = json.dumps(memory_to_json(saved), indent=1, sort_keys=True).encode()
    key = state_key(memory.fleet)
    if version is None:
        new_version = store.put(key, body, if_absent=True)
    else:
        new_version = store.put(key, body, if_version=version)
    return saved, new_version


class AuditLog:
    """The run's audit log object, events/<fleet>/<yyyy>/<mm>/<dd>/<run-id>.jsonl.

    Object stores cannot append, so each run owns one object and rewrites it whole after
    every record: a killed run leaves every record written before the kill.
    """

    def __init__(self, store: ObjectStore, fleet: str, run_id: str, started_at: datetime) -> None:
        self.store = store
        self.key = f"events/{fleet}/{started_at:%Y/%m/%d}/{run_id}.jsonl"
        self.records: list[dict[str, Any]] = []

    def append(self, record: dict[str, Any]) -> None:
        """Add one record (JSON-serialisable mapping) and persist the log."""
        self.records.append(record)
        body = "".join(json.dumps(r, sort_keys=True) + "\n" for r in self.records)
        self.store.put(self.key, body.encode())

"""The reconciler's memory, lock and audit log, on any ObjectStore.

state/<fleet>.json   Memory, written by compare-and-swap on the object's version, serial + 1
                     on every write (S3 If-Match ETag, GCS ifGenerationMatch, file inode).
state/<fleet>.lock   the lease: created only if absent (If-None-Match: *, ifGenerationMatch=0);
                     renewed by its holder (CAS on the version it wrote) every TTL/3; a lease
                     whose object the store saw last written more than its TTL ago may be
                     taken over by CAS; released by a delete conditional on the version we
                     wrote (Terraform's S3/GCS backends lock the same way; the renewal and
                     fencing follow Kubernetes Lease / etcd leases).
state/<fleet>.lock.probe   the store's clock: a contender finding the lease held writes it and
                     reads both objects' modification times in one listing, so a lease's age
                     is measured by one clock, the store's, never by comparing two hosts'.
events/<fleet>/<yyyy>/<mm>/<dd>/<run-id>-<nnnn>.jsonl   the audit log, in chunks: every action
                     applied and its outcome, one JSON object per line; each chunk is a new
                     object (object stores cannot append, and rewriting one growing object
                     costs quadratic bytes).
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import orjson

from navarch.errors import (
    LeaseLost,
    LockHeld,
    NavarchError,
    NotFound,
    PreconditionFailed,
    StoreError,
)
from navarch.planner.model import Memory
from navarch.reconcile.codec import NodeDocCache, memory_from_json, memory_to_json
from navarch.report.timefmt import required_ts, ts
from navarch.stores.base import ObjectStore


def state_key(fleet: str) -> str:
    """Object key of the fleet's Memory document."""
    return f"state/{fleet}.json"


def lock_key(fleet: str) -> str:
    """Object key of the fleet's lock."""
    return f"state/{fleet}.lock"


def lock_probe_key(fleet: str) -> str:
    """Object key a contender writes to read the store's own clock (see acquire_lock)."""
    return f"state/{fleet}.lock.probe"


#: Seconds added to a lease's TTL before a contender may take it over: S3 and Azure Blob
#: report an object's modification time to the whole second, so a lease object's listed
#: time may be up to a second older than its write.
STORE_CLOCK_SLACK_S = 1.0


def health_prefix(fleet: str) -> str:
    """Prefix under which agents write the fleet's health reports."""
    return f"health/{fleet}/"


def health_key(fleet: str, pool: str, node: str) -> str:
    """Object key of one node's latest health report."""
    return f"health/{fleet}/{pool}/{node}.json"


def default_holder() -> str:
    """ "user@host pid N": who holds a lock, for the message other runs print."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()} pid {os.getpid()}"


@dataclass(frozen=True)
class Lock:
    """A held lock (lease): its id, holder, command, times (aware UTC), the object's version.

    created_at and expires_at are the holder's own clock, shown to people and never compared
    with another host's clock: whether a lease lapsed is decided by the store's clock
    (acquire_lock). ttl_s: the holder's TTL in seconds (0 in a lock written before the
    field: a contender then assumes its own). took_over: when this run took the lease over
    from an expired holder, whose it was ("holder running 'command' (lock ID, expired Ns
    ago)"), else None.
    """

    lock_id: str
    holder: str
    command: str
    created_at: datetime
    expires_at: datetime
    version: str
    took_over: str | None = None
    ttl_s: int = 0

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "lock_id": self.lock_id,
            "holder": self.holder,
            "command": self.command,
            "created_at": ts(self.created_at),
            "expires_at": ts(self.expires_at),
        }
        if self.ttl_s:
            doc["ttl_s"] = self.ttl_s
        return doc


def _read_lock(store: ObjectStore, fleet: str) -> Lock:
    blob = store.get(lock_key(fleet))
    try:
        d = json.loads(blob.data)
        return Lock(
            d["lock_id"],
            d["holder"],
            d["command"],
            required_ts(d["created_at"]),
            required_ts(d["expires_at"]),
            blob.version,
            ttl_s=int(d.get("ttl_s") or 0),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise StoreError(
            f"{lock_key(fleet)} is unreadable; if no navarch run is active, remove it with "
            "`navarch force-unlock FLEET LOCK_ID` (use the id `corrupt`)"
        ) from exc


def acquire_lock(
    store: ObjectStore,
    fleet: str,
    command: str,
    ttl_s: int,
    now: datetime,
    holder: str | None = None,
) -> Lock:
    """Take the fleet lock or raise LockHeld (holder, command, age, time left).

    now: this run's clock, written into the lock for people to read and never used to
    decide. Whether a held lease lapsed is measured by the store's clock alone (Kubernetes
    leader election likewise never compares two hosts' clocks): the lease object's last
    write (its holder rewrites it every ttl_s/3) against the store's now, read as the
    modification time of lock_probe_key(fleet), written just before one listing of both.
    A lease silent for more than its holder's TTL plus STORE_CLOCK_SLACK_S is taken over
    with a CAS write on its version, so of two runs that both see it lapsed only one wins;
    the returned Lock's took_over says whose it was. A runner whose clock is minutes fast
    or slow therefore neither takes a live lease nor waits on a dead one.
    Raises LockHeld, StoreError for store failures.
    """
    lock = Lock(
        uuid.uuid4().hex[:12],
        holder or default_holder(),
        command,
        now,
        now + timedelta(seconds=ttl_s),
        "",
        ttl_s=ttl_s,
    )
    body = json.dumps(lock.to_json(), sort_keys=True).encode()
    try:
        version = store.put(lock_key(fleet), body, if_absent=True)
        return replace(lock, version=version)
    except PreconditionFailed:
        pass
    try:
        held = _read_lock(store, fleet)
        silent_s = _silent_s(store, fleet, held)
    except NotFound:
        return _after_release(store, fleet, lock, body)
    held_ttl_s = held.ttl_s or ttl_s
    # The holder's own time from taking the lease to its last renewal (one clock), plus
    # the store's time since that renewal.
    age_s = max((held.expires_at - held.created_at).total_seconds() - held_ttl_s, 0.0) + silent_s
    if silent_s <= held_ttl_s + STORE_CLOCK_SLACK_S:
        raise LockHeld(held.holder, held.command, held.lock_id, age_s, held_ttl_s - silent_s)
    try:
        version = store.put(lock_key(fleet), body, if_version=held.version)
    except PreconditionFailed as exc:
        raise LockHeld(held.holder, held.command, held.lock_id, age_s, 0.0) from exc
    return replace(
        lock,
        version=version,
        took_over=f"{held.holder} running {held.command!r} (lock {held.lock_id}, "
        f"expired {silent_s - held_ttl_s:.0f}s ago by the store's clock)",
    )


def _after_release(store: ObjectStore, fleet: str, lock: Lock, body: bytes) -> Lock:
    """The lease was released between our create and our look: create it once more. When
    another contender created it first (many runs waiting on one release), that run holds
    it: LockHeld, as a moment later, never a store error."""
    try:
        return replace(lock, version=store.put(lock_key(fleet), body, if_absent=True))
    except PreconditionFailed as exc:
        try:
            taken = _read_lock(store, fleet)
        except NotFound:
            raise LockHeld("another run", "(took and released the lease)", "?", 0.0, 0.0) from exc
        raise LockHeld(
            taken.holder, taken.command, taken.lock_id, 0.0, float(taken.ttl_s or 0)
        ) from exc


def _silent_s(store: ObjectStore, fleet: str, held: Lock) -> float:
    """Seconds, by the store's clock, since the lease object `held` was last written.

    Writes lock_probe_key(fleet), then lists both keys: the probe's modification time is
    the store's now. 0.0 when the lease was rewritten since `held` was read (a renewal:
    it is live). Raises NotFound when the lease is gone, StoreError when the store lists
    no usable modification time (a backend breaking the contract in navarch.stores.base).
    """
    probe = lock_probe_key(fleet)
    store.put(probe, json.dumps({"probe": "the store's clock, for the lease"}).encode())
    infos = {i.key: i for i in store.list(lock_key(fleet)) if i.key in (probe, lock_key(fleet))}
    if lock_key(fleet) not in infos:
        raise NotFound(lock_key(fleet))
    if infos[lock_key(fleet)].version != held.version or probe not in infos:
        return 0.0
    try:
        written = required_ts(infos[lock_key(fleet)].modified_at)
        store_now = required_ts(infos[probe].modified_at)
    except ValueError as exc:
        raise StoreError(
            f"{store.url} lists no modification time for {lock_key(fleet)} ({exc}): the "
            "lease cannot be timed by the store's clock"
        ) from exc
    return (store_now - written).total_seconds()


def renew_lock(store: ObjectStore, fleet: str, lock: Lock, ttl_s: int, now: datetime) -> Lock:
    """Extend our lease to now + ttl_s by a CAS write on the version we last wrote.

    Returns the renewed Lock (new version and expiry). Raises LeaseLost when the lease is
    no longer ours (taken over, force-unlocked: the version moved or the object is gone),
    StoreError when the store cannot be reached (the caller retries until the lease would
    have expired).
    """
    renewed = replace(lock, expires_at=now + timedelta(seconds=ttl_s))
    body = json.dumps(renewed.to_json(), sort_keys=True).encode()
    try:
        version = store.put(lock_key(fleet), body, if_version=lock.version)
    except (PreconditionFailed, NotFound) as exc:
        raise LeaseLost(_whose(store, fleet, lock)) from exc
    return replace(renewed, version=version)


def _whose(store: ObjectStore, fleet: str, lock: Lock) -> str:
    """Why the lease is no longer ours, naming the new holder when there is one."""
    try:
        held = _read_lock(store, fleet)
    except NotFound:
        return f"lease {lock.lock_id} on {lock_key(fleet)} was removed (force-unlock?)"
    except StoreError:
        return f"lease {lock.lock_id} on {lock_key(fleet)} was replaced by an unreadable one"
    if held.lock_id == lock.lock_id:
        return f"lease {lock.lock_id} on {lock_key(fleet)} was rewritten by someone else"
    return (
        f"lease {lock.lock_id} on {lock_key(fleet)} was taken over by {held.holder} "
        f"running {held.command!r} (lock {held.lock_id})"
    )


class Lease:
    """A held lease, renewed in the background, with the fencing checks an apply makes.

    The renewal thread CAS-writes the lease every ttl_s/3 (Kubernetes leader election:
    renew well within the lease duration). check() is the cheap fence before every action:
    the lease is ours while our last successful renewal is younger than the TTL minus a
    margin, by this process's monotonic clock (a process stalled past its TTL, e.g.
    SIGSTOPped or swapped out, finds its lease lapsed on waking even before the renewal
    thread runs), and no renewal found it taken. check_store() is the strict fence before
    every state write: it reads the lease object and compares its version with ours.
    Both raise LeaseLost. clock: the run's clock, for the lease's expires_at.
    """

    #: Seconds of the TTL kept as a margin: a check passes only while at least this much
    #: of the lease is left (covers the time an action takes to start after the check).
    MARGIN_S = 1.0

    def __init__(
        self,
        store: ObjectStore,
        fleet: str,
        lock: Lock,
        ttl_s: int,
        clock: Callable[[], datetime],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.fleet = fleet
        self.ttl_s = ttl_s
        self.clock = clock
        self.monotonic = monotonic
        self._lock = lock
        self._renewed_at = monotonic()
        self._lost: str | None = None
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.renewals = 0

    @property
    def lock(self) -> Lock:
        with self._mutex:
            return self._lock

    def start(self) -> Lease:
        """Start the renewal thread (a daemon: a dying process takes it along)."""
        self._thread = threading.Thread(target=self._run, name="navarch-lease", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        interval_s = max(self.ttl_s / 3, 0.05)
        while not self._stop.wait(interval_s):
            if not self.renew():
                return

    def renew(self) -> bool:
        """One renewal now; False once the lease is lost (a store error only retries)."""
        with self._mutex:
            if self._lost is not None:
                return False
            lock = self._lock
        started = self.monotonic()
        try:
            renewed = renew_lock(self.store, self.fleet, lock, self.ttl_s, self.clock())
        except LeaseLost as exc:
            with self._mutex:
                self._lost = str(exc)
            return False
        except NavarchError:
            return True  # the store is unreachable: try again; check() sees the lease age
        with self._mutex:
            if self._lost is None:
                self._lock, self._renewed_at = renewed, started
                self.renewals += 1
        return True

    def check(self) -> None:
        """Raise LeaseLost unless the lease is still ours (no store call)."""
        with self._mutex:
            lost, renewed_at = self._lost, self._renewed_at
        if lost is not None:
            raise LeaseLost(lost)
        age_s = self.monotonic() - renewed_at
        if age_s > self.ttl_s - min(self.MARGIN_S, self.ttl_s / 3):
            lost = (
                f"lease {self.lock.lock_id} was last renewed {age_s:.0f}s ago, past its "
                f"{self.ttl_s}s TTL: another run may hold it now"
            )
            with self._mutex:
                self._lost = lost
            raise LeaseLost(lost)

    def check_store(self) -> None:
        """check(), then read the lease object: raise LeaseLost unless it is our version."""
        self.check()
        try:
            version: str | None = self.store.get(lock_key(self.fleet)).version
        except NotFound:
            version = None
        lock = self.lock  # after the read: a renewal racing with it wrote what we read
        if version != lock.version:
            lost = _whose(self.store, self.fleet, lock)
            with self._mutex:
                self._lost = lost
            raise LeaseLost(lost)

    def stop(self) -> None:
        """Stop renewing (the lease then lapses at its expiry unless released)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def release(self) -> None:
        """Stop renewing and delete the lease if it is still ours."""
        self.stop()
        release_lock(self.store, self.fleet, self.lock)


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


class StateCache:
    """The state document this process last wrote or read, by object key and version.

    A store's version names one content of an object (S3 ETag, GCS generation, the file
    store's mtime and inode, the compare-and-swap writes rely on the same), so a read that
    returns the version this process last wrote or parsed may reuse that Memory instead of
    parsing the bytes again. The read itself still happens: a state moved on by another
    writer has another version and is parsed. Useful to a process that runs many
    reconciles (navarch simulate); one `navarch apply` reads the state once.

    node_docs: the node entries of the state documents this process made (NodeDocCache).
    """

    def __init__(self) -> None:
        self._entry: tuple[str, str, Memory] | None = None
        self.node_docs = NodeDocCache()

    def get(self, key: str, version: str) -> Memory | None:
        """The Memory of key at version when it is the one remembered, else None."""
        entry = self._entry
        if entry is not None and entry[0] == key and entry[1] == version:
            return entry[2]
        return None

    def put(self, key: str, version: str, memory: Memory) -> None:
        """Remember memory as the content of key at version."""
        self._entry = (key, version, memory)


def load_memory(
    store: ObjectStore, fleet: str, cache: StateCache | None = None, *, lazy: bool = False
) -> tuple[Memory, str | None]:
    """Read state/<fleet>.json -> (Memory, version); a missing object is an empty Memory.

    cache: reuse the Memory of a version this process wrote or read already (StateCache).
    lazy: decode each node only when it is looked up (codec.memory_from_json), for a run
    that reads a few nodes (navarch.reconcile.quiet_run); a malformed node entry then
    raises KeyError/ValueError/TypeError at that lookup instead of StoreError here, so a
    lazy Memory is not remembered in the cache (a cached one is still used).
    Raises StoreError when the document exists but cannot be read: navarch stops rather
    than act on a fleet it has forgotten.
    """
    try:
        blob = store.get(state_key(fleet))
    except NotFound:
        return Memory(fleet=fleet, lineage=uuid.uuid4().hex), None
    cached = cache.get(blob.key, blob.version) if cache is not None else None
    if cached is not None:
        return cached, blob.version
    try:
        # orjson wrote it: 27 MB at 100,000 nodes
        mem = memory_from_json(orjson.loads(blob.data), lazy=lazy)
    except (ValueError, KeyError, TypeError) as exc:
        raise StoreError(
            f"{state_key(fleet)} in {store.url} is not a valid navarch state document ({exc}); "
            f"{restore_hint(store.url, state_key(fleet))} before running again"
        ) from exc
    if mem.fleet != fleet:
        raise StoreError(f"{state_key(fleet)} belongs to fleet {mem.fleet!r}, not {fleet!r}")
    if cache is not None and not lazy:  # a lazy Memory has not checked every entry yet
        cache.put(blob.key, blob.version, mem)
    return mem, blob.version


def restore_hint(url: str, key: str) -> str:
    """How to get an earlier version of `key` back on the store at `url`: only S3 and GCS
    (with versioning on) and Azure Blob (with blob versioning) keep object history; a
    file:// store has none, so its answer is the operator's own backup."""
    scheme = url.split("://", 1)[0]
    if scheme == "s3":
        return (
            f"restore an earlier version of {key} (S3 object versioning: "
            "`aws s3api list-object-versions`, then copy the last good one back)"
        )
    if scheme == "gs":
        return (
            f"restore an earlier generation of {key} (GCS object versioning: "
            "`gcloud storage ls --all-versions`, then copy the last good one back)"
        )
    if scheme == "az":
        return f"restore an earlier version of {key} (Azure Blob versioning)"
    return (
        f"a file:// store keeps no history: restore {key} from your backup of the "
        "store directory, or move it aside to start from an empty memory (the instances "
        "carrying this fleet's tags are adopted again; drains under way and lemons "
        "remembered are lost)"
    )


def save_memory(
    store: ObjectStore,
    memory: Memory,
    version: str | None,
    doc: dict[str, Any] | None = None,
    cache: StateCache | None = None,
) -> tuple[Memory, str]:
    """CAS-write memory with serial + 1 -> (saved Memory, new version).

    doc: memory_to_json(memory) when the caller has it already (the serial is replaced).
    cache: remember the saved Memory under its new version (StateCache).
    The document is compact JSON with sorted keys, written by orjson: an indented dump
    goes through Python's pure-Python encoder, about ten times slower on a 10,000-node
    state (bench/scale.py), and orjson is about six times faster than the stdlib's C
    encoder (navarch simulate writes the state every reconcile period).
    Raises PreconditionFailed when another writer moved the state on since `version`.
    """
    saved = replace(memory, serial=memory.serial + 1)
    if doc is None:
        doc = memory_to_json(saved, cache.node_docs if cache is not None else None)
    else:
        doc = {**doc, "serial": saved.serial}
    body = orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)
    key = state_key(memory.fleet)
    if version is None:
        new_version = store.put(key, body, if_absent=True)
    else:
        new_version = store.put(key, body, if_version=version)
    if cache is not None:
        cache.put(key, new_version, saved)
    return saved, new_version


def audit_prefix(fleet: str, run_id: str, started_at: datetime) -> str:
    """Key prefix of one run's audit chunks: events/<fleet>/<yyyy>/<mm>/<dd>/<run-id>-."""
    return f"events/{fleet}/{started_at:%Y/%m/%d}/{run_id}-"


class AuditLog:
    """One run's audit log, written in chunks events/<fleet>/<yyyy>/<mm>/<dd>/<run-id>-<nnnn>.jsonl.

    append() only buffers; flush() writes the buffered records as the next chunk, a new
    object created only if absent (never a rewrite or an overwrite: bytes written per
    action stay constant however long the run, and a record once written stays). Run ids
    are unique (the UTC second and random hex, navarch.logs.new_run_id), so two runs or
    operator verbs in one second never share a chunk key.
    The executor flushes with every state write, so a killed run loses at most the records
    since its last flush (the world changes they describe are in Memory or the inventory).
    A failed flush keeps the records for the next one.
    """

    #: Chunk keys found taken in a row before a flush gives up (a store answering every
    #: create-if-absent with PreconditionFailed would otherwise spin).
    MAX_TAKEN_KEYS = 100

    def __init__(self, store: ObjectStore, fleet: str, run_id: str, started_at: datetime) -> None:
        self.store = store
        self.prefix = audit_prefix(fleet, run_id, started_at)
        self.pending: list[dict[str, Any]] = []
        self.chunks = 0
        self.bytes_written = 0

    def append(self, record: dict[str, Any]) -> None:
        """Buffer one record (a JSON-serialisable mapping; other values become strings)."""
        self.pending.append(record)

    def flush(self) -> str | None:
        """Write the buffered records as a new chunk -> its key (None when nothing was buffered).

        The chunk is created only if absent: a key already taken (another writer under the
        same run id, or an earlier flush of ours whose answer was lost) is never
        overwritten; the records go under the next chunk number instead (kept twice at
        worst, never lost). Raises StoreError (the records stay buffered for the next flush).
        """
        if not self.pending:
            return None
        body = "".join(
            json.dumps(r, sort_keys=True, default=str) + "\n" for r in self.pending
        ).encode()
        for _ in range(self.MAX_TAKEN_KEYS):
            key = f"{self.prefix}{self.chunks + 1:04d}.jsonl"
            try:
                self.store.put(key, body, if_absent=True)
                break
            except PreconditionFailed:
                self.chunks += 1
        else:
            raise StoreError(
                f"{self.MAX_TAKEN_KEYS} audit chunk keys under {self.prefix} were already "
                "taken; the records stay buffered"
            )
        self.chunks += 1
        self.bytes_written += len(body)
        self.pending = []
        return key

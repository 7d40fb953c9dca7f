"""Lock, state document and audit log on the object store."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from navarch.errors import LockHeld, NavarchError, NotFound, PreconditionFailed, StoreError
from navarch.planner.model import Memory, NodeMemory, Phase
from navarch.reconcile.state import (
    AuditLog,
    StateCache,
    acquire_lock,
    force_unlock,
    load_memory,
    lock_key,
    release_lock,
    restore_hint,
    save_memory,
)
from navarch.stores.file import FileStore

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def silence(store: FileStore, seconds: float) -> None:
    """The lease's holder last wrote it `seconds` ago by the store's clock (it stopped
    renewing): the lock file's mtime, which the file store lists as its modified_at."""
    store.set_modified_at(lock_key("demo"), datetime.now(UTC) - timedelta(seconds=seconds))


def test_lock_is_exclusive_until_expiry_then_taken_over(tmp_path):
    store = FileStore(tmp_path)
    first = acquire_lock(store, "demo", "apply", 900, T0, holder="a@host pid 1")
    silence(store, 300)
    with pytest.raises(LockHeld) as info:
        acquire_lock(store, "demo", "apply", 900, T0, holder="b")
    assert info.value.holder == "a@host pid 1"
    assert 300 <= info.value.age_s < 310
    assert 590 < info.value.expires_in_s <= 600
    assert info.value.lock_id == first.lock_id
    # Silent past its TTL by the store's clock, the next run takes it over; the first
    # run's release leaves it alone.
    silence(store, 16 * 60)
    second = acquire_lock(store, "demo", "apply", 900, T0, holder="b")
    release_lock(store, "demo", first)
    with pytest.raises(LockHeld):
        acquire_lock(store, "demo", "apply", 900, T0 + timedelta(minutes=17), holder="c")
    release_lock(store, "demo", second)
    acquire_lock(store, "demo", "apply", 900, T0 + timedelta(minutes=17), holder="c")


def test_force_unlock_needs_the_right_id(tmp_path):
    store = FileStore(tmp_path)
    lock = acquire_lock(store, "demo", "apply", 900, T0)
    with pytest.raises(NavarchError, match=f"the lock is {lock.lock_id}"):
        force_unlock(store, "demo", "nope")
    assert force_unlock(store, "demo", lock.lock_id).lock_id == lock.lock_id
    with pytest.raises(NavarchError, match="not locked"):
        force_unlock(store, "demo", lock.lock_id)


def test_state_round_trip_and_compare_and_swap(tmp_path):
    store = FileStore(tmp_path)
    memory, version = load_memory(store, "demo")
    assert (memory.serial, version) == (0, None)
    node = NodeMemory(
        node="demo-train-0001",
        pool="train",
        instance_id="i-1",
        first_seen_at=T0,
        phase=Phase.DRAINING,
        phase_at=T0,
        phase_reason="XID 79",
    )
    saved, v1 = save_memory(store, memory.with_node(node), version)
    loaded, v = load_memory(store, "demo")
    assert v == v1 and loaded == saved and loaded.serial == 1
    # A writer holding the old version loses.
    with pytest.raises(PreconditionFailed):
        save_memory(store, memory, version)
    save_memory(store, loaded, v1)
    assert load_memory(store, "demo")[0].serial == 2


def test_state_cache_reuses_only_the_version_it_holds(tmp_path):
    # StateCache: a read of the version this process wrote reuses its Memory (no parse);
    # another writer's version is parsed, and a corrupt object is still refused.
    store = FileStore(tmp_path)
    cache = StateCache()
    memory, version = load_memory(store, "demo", cache)
    node = NodeMemory(node="demo-train-0001", pool="train", instance_id="i-1", first_seen_at=T0)
    saved, v1 = save_memory(store, memory.with_node(node), version, cache=cache)
    assert load_memory(store, "demo", cache) == (saved, v1)
    assert load_memory(store, "demo", cache)[0] is saved
    other, v2 = save_memory(store, saved.without_node(node.node), v1)  # no cache: someone else
    loaded, v = load_memory(store, "demo", cache)
    assert v == v2 and loaded == other and loaded.node(node.node) is None
    store.put("state/demo.json", b"{not json")
    with pytest.raises(StoreError, match="file:// store keeps no history: restore state/demo"):
        load_memory(store, "demo", cache)


def test_corrupt_state_hint_fits_the_store_kind():
    assert "S3 object versioning" in restore_hint("s3://bucket/navarch", "state/demo.json")
    assert "GCS object versioning" in restore_hint("gs://bucket/navarch", "state/demo.json")
    assert "keeps no history" in restore_hint("file:///srv/navarch", "state/demo.json")


def test_corrupt_state_stops_the_run(tmp_path):
    store = FileStore(tmp_path)
    store.put("state/demo.json", b"{not json")
    with pytest.raises(StoreError, match="from your backup of the store directory") as info:
        load_memory(store, "demo")
    assert "store's history" not in str(info.value)
    store.put("state/demo.json", json.dumps({"fleet": "other"}).encode())
    with pytest.raises(StoreError, match="belongs to fleet 'other'"):
        load_memory(store, "demo")


def test_audit_log_writes_each_chunk_as_a_new_object(tmp_path):
    store = FileStore(tmp_path)
    log = AuditLog(store, "demo", "run-1", T0)
    log.append({"action": "cordon", "ok": True})
    log.append({"action": "drain", "ok": False})
    assert log.flush() == "events/demo/2026/11/01/run-1-0001.jsonl"
    assert log.flush() is None  # nothing buffered, nothing written
    log.append({"action": "terminate", "ok": True})
    assert log.flush() == "events/demo/2026/11/01/run-1-0002.jsonl"
    keys = [o.key for o in store.list("events/demo/")]
    lines = [json.loads(x)["action"] for k in keys for x in store.get(k).data.decode().splitlines()]
    assert lines == ["cordon", "drain", "terminate"]
    assert Memory(fleet="demo").serial == 0


def test_lock_taken_over_says_whose_it_was(tmp_path):
    store = FileStore(tmp_path)
    acquire_lock(store, "demo", "apply fleet.yaml", 120, T0, holder="a@host pid 1")
    silence(store, 180)
    lock = acquire_lock(store, "demo", "apply", 120, T0, holder="b")
    assert lock.took_over is not None
    assert "a@host pid 1" in lock.took_over and "expired 60s ago" in lock.took_over


def test_audit_chunks_are_created_only_if_absent_and_never_overwritten(tmp_path):
    store = FileStore(tmp_path)
    first, second = AuditLog(store, "demo", "run-1", T0), AuditLog(store, "demo", "run-1", T0)
    first.append({"action": "cordon"})
    second.append({"action": "reboot"})
    assert first.flush() == "events/demo/2026/11/01/run-1-0001.jsonl"
    assert second.flush() == "events/demo/2026/11/01/run-1-0002.jsonl"  # the key was taken
    actions = [
        json.loads(line)["action"]
        for o in store.list("events/demo/")
        for line in store.get(o.key).data.decode().splitlines()
    ]
    assert actions == ["cordon", "reboot"]


def test_a_lease_taken_by_another_run_while_we_looked_is_held_not_a_store_error(
    tmp_path,
) -> None:
    """Eight runs waiting on one apply: the holder releases, one waiting run creates the
    lease first, and the others, who saw it gone, must be told it is held (exit 4), not
    fail on the store's precondition (exit 1)."""
    inner = FileStore(tmp_path)
    acquire_lock(inner, "demo", "apply", 900, T0, holder="holder")

    class Racing:
        """The store as a waiting run sees it: the holder releases just before our read,
        and another waiting run takes the lease before our second create."""

        url, parallel_gets = inner.url, 1
        raced = False

        def __getattr__(self, name: str):
            return getattr(inner, name)

        def get(self, key: str):
            if key == lock_key("demo") and not self.raced:
                self.raced = True
                inner.delete(key)
                acquire_lock(inner, "demo", "apply", 900, T0, holder="quicker run")
                raise NotFound(key)
            return inner.get(key)

    with pytest.raises(LockHeld) as held:
        acquire_lock(Racing(), "demo", "apply", 900, T0, holder="slower run")
    assert held.value.holder == "quicker run"

"""The ObjectStore contract (navarch/stores/base.py), run against every backend.

Each backend in conftest.STORE_BACKENDS (the `store_root` fixture) runs every test here on
its real local server: file:// on a temporary directory, s3:// on moto, gs:// on
fake-gcs-server, az:// on Azurite. Stores are opened by URL (open_store), as the CLI opens
them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from navarch.errors import NotFound, PreconditionFailed
from navarch.stores import ObjectStore, open_store

Opener = Callable[[str], ObjectStore]


@pytest.fixture
def opener(store_root: str) -> Opener:
    """prefix -> a store at that prefix of one fresh backend place."""
    return lambda prefix: open_store(f"{store_root}/{prefix}")


@pytest.fixture
def store(opener: Opener) -> ObjectStore:
    return opener("fleets/prod")


def test_put_then_get_returns_the_bytes_and_the_version(store: ObjectStore) -> None:
    version = store.put("state/f.json", b'{"serial": 1}')
    blob = store.get("state/f.json")
    assert (blob.key, blob.data, blob.version) == ("state/f.json", b'{"serial": 1}', version)


def test_get_missing_is_not_found_naming_the_key(store: ObjectStore) -> None:
    with pytest.raises(NotFound) as info:
        store.get("state/none.json")
    assert info.value.key == "state/none.json"


def test_put_if_absent_creates_only_once(store: ObjectStore) -> None:
    store.put("state/f.lock", b"first", if_absent=True)
    with pytest.raises(PreconditionFailed):
        store.put("state/f.lock", b"second", if_absent=True)
    assert store.get("state/f.lock").data == b"first"


def test_put_if_version_is_compare_and_swap(store: ObjectStore) -> None:
    v1 = store.put("state/f.json", b"1")
    v2 = store.put("state/f.json", b"2", if_version=v1)
    assert v2 != v1
    with pytest.raises(PreconditionFailed):
        store.put("state/f.json", b"3", if_version=v1)
    assert store.get("state/f.json").data == b"2"
    v3 = store.put("state/f.json", b"3", if_version=v2)
    assert store.get("state/f.json").version == v3


def test_put_if_version_on_a_missing_key_is_precondition_failed(store: ObjectStore) -> None:
    version = store.put("state/other.json", b"x")  # a real version token of this backend
    with pytest.raises(PreconditionFailed):
        store.put("state/missing.json", b"x", if_version=version)
    with pytest.raises(NotFound):
        store.get("state/missing.json")


def test_unconditional_put_overwrites(store: ObjectStore) -> None:
    store.put("health/f/p/n.json", b"a")
    store.put("health/f/p/n.json", b"b")
    assert store.get("health/f/p/n.json").data == b"b"


def test_put_with_both_conditions_is_a_caller_error(store: ObjectStore) -> None:
    version = store.put("state/f.json", b"1")
    with pytest.raises(ValueError):
        store.put("state/f.json", b"2", if_absent=True, if_version=version)


def test_delete_if_version_only_at_that_version(store: ObjectStore) -> None:
    v1 = store.put("state/f.lock", b"mine", if_absent=True)
    store.put("state/f.lock", b"theirs")
    with pytest.raises(PreconditionFailed):
        store.delete("state/f.lock", if_version=v1)
    assert store.get("state/f.lock").data == b"theirs"
    store.delete("state/f.lock", if_version=store.get("state/f.lock").version)
    with pytest.raises(NotFound):
        store.get("state/f.lock")


def test_delete_missing_is_not_found(store: ObjectStore) -> None:
    store.put("x", b"1")
    store.delete("x")
    with pytest.raises(NotFound):
        store.get("x")
    with pytest.raises(NotFound):
        store.delete("x")
    version = store.put("y", b"1")
    with pytest.raises(NotFound):
        store.delete("state/none.lock", if_version=version)


def test_list_is_sorted_under_the_prefix_with_metadata(opener: Opener) -> None:
    store = opener("fleets/prod")
    keys = ["health/f/b/n2.json", "health/f/a/n1.json", "health/f/a/n10.json"]
    for n, key in enumerate(keys):
        store.put(key, b"x" * (n + 1))
    store.put("state/f.json", b"{}")
    opener("fleets/other").put("health/f/a/n0.json", b"elsewhere")
    infos = store.list("health/f/")
    assert [i.key for i in infos] == sorted(keys)
    for info in infos:
        assert info.size_bytes == keys.index(info.key) + 1
        assert info.version == store.get(info.key).version
        modified = datetime.fromisoformat(info.modified_at)
        assert modified.utcoffset() == timedelta(0), info.modified_at
        assert abs(modified - datetime.now(UTC)) < timedelta(days=1)
    assert store.list("nothing/") == []


def test_modified_at_is_the_stores_clock_and_moves_with_every_write(store: ObjectStore) -> None:
    """The lease is timed by the store's clock alone (navarch.reconcile.state.acquire_lock):
    a rewrite moves an object's listed modification time, at least to the second, and an
    object written later never lists as older."""

    def modified() -> dict[str, datetime]:
        return {i.key: datetime.fromisoformat(i.modified_at) for i in store.list("state/f.lock")}

    store.put("state/f.lock", b"1")
    first = modified()["state/f.lock"]
    time.sleep(1.1)
    store.put("state/f.lock", b"2")
    store.put("state/f.lock.probe", b"p")
    now = modified()
    assert now["state/f.lock"] > first
    assert now["state/f.lock.probe"] >= now["state/f.lock"]


def test_stores_at_other_prefixes_are_separate(opener: Opener) -> None:
    opener("fleets/prod").put("state/f.json", b"prod")
    other = opener("fleets/dev")
    with pytest.raises(NotFound):
        other.get("state/f.json")
    assert other.list("") == []


def test_get_many_returns_the_present_keys_once(store: ObjectStore) -> None:
    keys = [f"health/f/p/n{i:02d}.json" for i in range(12)]
    for key in keys[:9]:
        store.put(key, key.encode())
    got = store.get_many(keys + keys[:3])
    assert sorted(got) == keys[:9]
    assert all(got[k].data == k.encode() and got[k].key == k for k in got)
    assert store.get_many([]) == {}


def test_racing_create_if_absent_has_one_winner(store: ObjectStore) -> None:
    outcomes: list[str] = []
    barrier = threading.Barrier(8)

    def contend(i: int) -> None:
        barrier.wait()
        try:
            store.put("state/race.lock", str(i).encode(), if_absent=True)
            outcomes.append(str(i))
        except PreconditionFailed:
            outcomes.append("lost")

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [o for o in outcomes if o != "lost"]
    assert len(winners) == 1 and len(outcomes) == 8
    assert store.get("state/race.lock").data == winners[0].encode()


def test_readers_see_whole_old_or_whole_new_bytes(store: ObjectStore) -> None:
    old, new = b"a" * 256 * 1024, b"b" * 256 * 1024
    store.put("health/f/p/n.json", old)
    done = threading.Event()
    seen: list[bytes] = []

    def write() -> None:
        for n in range(12):
            store.put("health/f/p/n.json", new if n % 2 == 0 else old)
        done.set()

    writer = threading.Thread(target=write)
    writer.start()
    while not done.is_set():
        seen.append(store.get("health/f/p/n.json").data)
    writer.join()
    assert seen and all(data in (old, new) for data in seen)

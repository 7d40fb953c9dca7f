"""The file:// ObjectStore contract, including two processes racing for a condition."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from navarch.errors import NotFound, PreconditionFailed
from navarch.stores import open_store
from navarch.stores.file import FileStore


def test_versioned_reads_and_conditional_writes(tmp_path):
    store = FileStore(tmp_path)
    v1 = store.put("state/x.json", b"one", if_absent=True)
    with pytest.raises(PreconditionFailed):
        store.put("state/x.json", b"two", if_absent=True)
    blob = store.get("state/x.json")
    assert (blob.data, blob.version) == (b"one", v1)
    v2 = store.put("state/x.json", b"two", if_version=v1)
    assert v2 != v1
    with pytest.raises(PreconditionFailed):
        store.put("state/x.json", b"three", if_version=v1)
    with pytest.raises(PreconditionFailed):
        store.put("state/missing.json", b"x", if_version=v1)
    with pytest.raises(PreconditionFailed):
        store.delete("state/x.json", if_version=v1)
    store.delete("state/x.json", if_version=v2)
    with pytest.raises(NotFound):
        store.get("state/x.json")
    with pytest.raises(NotFound):
        store.delete("state/x.json")


def test_list_and_get_many(tmp_path):
    store = open_store("file://store", base_dir=tmp_path)
    for key in ("health/f/a/n2.json", "health/f/a/n1.json", "state/f.json"):
        store.put(key, key.encode())
    infos = store.list("health/f/")
    assert [i.key for i in infos] == ["health/f/a/n1.json", "health/f/a/n2.json"]
    assert infos[0].size_bytes == len(b"health/f/a/n1.json")
    blobs = store.get_many(["health/f/a/n1.json", "health/f/a/gone.json"])
    assert list(blobs) == ["health/f/a/n1.json"]
    assert (tmp_path / "store" / "state" / "f.json").exists()


def test_bad_keys_are_refused(tmp_path):
    store = FileStore(tmp_path)
    for key in ("../escape", "a//b", "", ".tmp/x"):
        with pytest.raises(Exception, match="invalid object key"):
            store.put(key, b"x")


def _race(root: str, barrier, results) -> None:
    store = FileStore(Path(root))
    barrier.wait()
    try:
        store.put("state/lock", b"mine", if_absent=True)
        results.put("won")
    except PreconditionFailed:
        results.put("lost")


def test_two_processes_one_winner(tmp_path):
    ctx = multiprocessing.get_context("fork")
    for _ in range(5):
        root = tmp_path / f"r{_}"
        barrier, results = ctx.Barrier(4), ctx.Queue()
        procs = [ctx.Process(target=_race, args=(str(root), barrier, results)) for _ in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(30)
        outcomes = sorted(results.get(timeout=5) for _ in procs)
        assert outcomes == ["lost", "lost", "lost", "won"]

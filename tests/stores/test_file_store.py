"""FileStore's own behaviour: relative URLs, key rules, two processes racing for a condition.

The ObjectStore contract itself runs in tests/contracts/test_store_contract.py.
"""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from navarch.errors import PreconditionFailed
from navarch.stores import open_store
from navarch.stores.file import FileStore


def test_relative_url_resolves_against_the_fleet_directory(tmp_path):
    store = open_store("file://store", base_dir=tmp_path)
    store.put("state/f.json", b"{}")
    assert (tmp_path / "store" / "state" / "f.json").read_bytes() == b"{}"


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

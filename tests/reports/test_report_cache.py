"""Incremental observation: a run fetches and verifies only the reports whose store version
changed; the verified-report cache beside the state only ever saves time."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from navarch.planner.model import Memory, NodeMemory
from navarch.reconcile.report_cache import CacheMemo, ReportCache, report_cache_key
from navarch.reconcile.reports import read_reports
from navarch.report.health import Status
from navarch.stores.file import FileStore
from tests.support.reports import health_report, signed_report_bytes

SECRET = b"fleet-secret-for-tests"
NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
NODES = [f"demo-train-{n:04d}" for n in range(1, 6)]


def _report(node: str, sequence: int, status: str = "healthy") -> bytes:
    report = health_report(
        node=node,
        instance_id=f"i-{node}",
        sequence=sequence,
        status=Status(status),
        health_score=100 if status == "healthy" else 60,
        gpus=(),
    )
    return signed_report_bytes(report, SECRET)


class CountingStore(FileStore):
    """The file store, counting the health reports fetched."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.fetched: list[str] = []

    def get(self, key: str):  # type: ignore[no-untyped-def]
        if key.startswith("health/"):
            self.fetched.append(key.rsplit("/", 1)[-1][: -len(".json")])
        return super().get(key)


def _put(store: FileStore, node: str, sequence: int, status: str = "healthy") -> None:
    store.put(f"health/demo/train/{node}.json", _report(node, sequence, status))


def _run(
    store: CountingStore, secret: bytes = SECRET, minutes: int = 0, memo: CacheMemo | None = None
) -> dict[str, str]:
    """One run's observation (with a plan's empty Memory) -> node -> status; saves the cache."""
    store.fetched.clear()
    obs = read_reports(
        store,
        "demo",
        Memory(fleet="demo"),
        secret,
        NOW + timedelta(minutes=minutes),
        cache=memo or CacheMemo(),
    )
    return {n: o.summary.status.value for n, o in obs.items() if o.summary is not None}


def _fleet(tmp_path: Path) -> CountingStore:
    store = CountingStore(tmp_path)
    for node in NODES:
        _put(store, node, 7)
    return store


def test_unchanged_reports_are_not_fetched_on_the_next_run(tmp_path: Path) -> None:
    store = _fleet(tmp_path)
    first = _run(store)
    assert sorted(store.fetched) == NODES
    second = _run(store, minutes=1)
    assert store.fetched == [] and second == first == dict.fromkeys(NODES, "healthy")


def test_a_changed_report_is_fetched_and_verified_again(tmp_path: Path) -> None:
    store = _fleet(tmp_path)
    _run(store)
    _put(store, "demo-train-0003", 8, status="unhealthy")
    seen = _run(store, minutes=1)
    assert store.fetched == ["demo-train-0003"]
    assert seen["demo-train-0003"] == "unhealthy"
    assert {seen[n] for n in NODES if n != "demo-train-0003"} == {"healthy"}


def test_a_tampered_cache_is_ignored_whole(tmp_path: Path) -> None:
    store = _fleet(tmp_path)
    _run(store)
    key = report_cache_key("demo")
    header, body = store.get(key).data.split(b"\n", 1)
    entries = json.loads(body)
    entries["health/demo/train/demo-train-0002.json"]["summary"]["status"] = "unhealthy"
    store.put(key, header + b"\n" + json.dumps(entries).encode())  # the MAC no longer matches
    seen = _run(store, minutes=1)
    assert sorted(store.fetched) == NODES
    assert set(seen.values()) == {"healthy"}


def test_a_cache_made_for_another_version_is_ignored(tmp_path: Path) -> None:
    store = _fleet(tmp_path)
    _run(store)
    old_cache = store.get(report_cache_key("demo")).data
    _put(store, "demo-train-0004", 9, status="unhealthy")
    store.put(report_cache_key("demo"), old_cache)  # the entry of the previous version
    seen = _run(store, minutes=1)
    assert store.fetched == ["demo-train-0004"]
    assert seen["demo-train-0004"] == "unhealthy"


def test_a_cache_made_under_another_secret_is_ignored(tmp_path: Path) -> None:
    store = _fleet(tmp_path)
    _run(store, secret=b"another-fleet-secret")  # every report rejected, nothing cached
    _run(store)
    assert sorted(store.fetched) == NODES


def test_a_lost_cache_is_rebuilt(tmp_path: Path) -> None:
    store = _fleet(tmp_path)
    _run(store)
    store.delete(report_cache_key("demo"))
    again = _run(store, minutes=1)
    assert sorted(store.fetched) == NODES and set(again.values()) == {"healthy"}
    _run(store, minutes=2)
    assert store.fetched == []


def test_the_cache_is_written_only_when_it_changed(tmp_path: Path) -> None:
    store = _fleet(tmp_path)
    _run(store)
    version = store.get(report_cache_key("demo")).version
    _run(store, minutes=1)
    assert store.get(report_cache_key("demo")).version == version
    _put(store, "demo-train-0001", 8)
    _run(store, minutes=2)
    assert store.get(report_cache_key("demo")).version != version


def test_a_cached_summary_still_obeys_the_replay_rule(tmp_path: Path) -> None:
    store = _fleet(tmp_path)
    obs = read_reports(
        store,
        "demo",
        Memory(fleet="demo"),
        SECRET,
        NOW,
        cache=CacheMemo(),
    )
    # Memory has accepted a later sequence since: the cached sequence 7 is a replay now.
    newer = obs["demo-train-0001"].summary
    assert newer is not None
    memory = Memory(fleet="demo").with_node(
        NodeMemory(
            node="demo-train-0001",
            pool="train",
            report_version="elsewhere",
            report=replace(newer, sequence=9),
        )
    )
    store.fetched.clear()
    again = read_reports(store, "demo", memory, SECRET, NOW, cache=CacheMemo())
    assert store.fetched == ["demo-train-0001"]
    assert again["demo-train-0001"].rejected == "replayed"


def test_the_cache_holds_only_what_memory_lacks(tmp_path: Path) -> None:
    store = _fleet(tmp_path)
    first = read_reports(store, "demo", Memory(fleet="demo"), SECRET, NOW, cache=CacheMemo())
    # An apply folds every report into Memory; one node's report changes after it.
    memory = Memory(fleet="demo").with_nodes(
        [
            NodeMemory(node=o.node, pool="train", report_version=o.version, report=o.summary)
            for o in first.values()
        ]
    )
    _put(store, "demo-train-0002", 8, status="unhealthy")
    store.fetched.clear()
    seen = read_reports(store, "demo", memory, SECRET, NOW, cache=CacheMemo())
    assert store.fetched == ["demo-train-0002"]
    changed = seen["demo-train-0002"].summary
    assert changed is not None and changed.status.value == "unhealthy"
    kept = ReportCache.load(store, "demo", SECRET)
    assert kept is not None and list(kept.entries) == ["health/demo/train/demo-train-0002.json"]
    # Memory lost: every report is verified again, and the verdicts are the same.
    assert _run(store) == {**dict.fromkeys(NODES, "healthy"), "demo-train-0002": "unhealthy"}
    assert sorted(store.fetched) == [n for n in NODES if n != "demo-train-0002"]


def test_a_process_reuses_the_cache_it_wrote_and_only_that_version(tmp_path: Path) -> None:
    store = _fleet(tmp_path)
    memo = CacheMemo()
    _run(store, memo=memo)
    written = store.get(report_cache_key("demo")).version
    assert memo.version == written and sorted(memo.entries) == [
        f"health/demo/train/{n}.json" for n in NODES
    ]
    # The memo stands for the stored document at its version: emptied, it is what loads.
    memo.entries = {}
    _run(store, minutes=1, memo=memo)
    assert sorted(store.fetched) == NODES
    # Another writer's document (a new version) is read and checked, never the memo's.
    key = report_cache_key("demo")
    header, body = store.get(key).data.split(b"\n", 1)
    entries = json.loads(body)
    entries["health/demo/train/demo-train-0002.json"]["summary"]["status"] = "unhealthy"
    store.put(key, header + b"\n" + json.dumps(entries).encode())
    seen = _run(store, minutes=2, memo=memo)
    assert sorted(store.fetched) == NODES and set(seen.values()) == {"healthy"}

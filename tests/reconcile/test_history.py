"""navarch.history on a file:// store: which chunks a query reads, and old or broken records."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from navarch.history import Trigger, history_to_json, read_history, render_history
from navarch.planner.model import Memory, NodeMemory, Phase
from navarch.stores.base import Blob, ObjectInfo
from navarch.stores.file import FileStore

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
#: A fleet whose Memory holds no node (the story's "now" part is empty).
EMPTY = Memory(fleet="demo")


class Spy:
    """A FileStore that remembers the prefixes listed and the keys read."""

    def __init__(self, root: Path) -> None:
        self.inner = FileStore(root)
        self.url = self.inner.url
        self.parallel_gets = 1
        self.listed: list[str] = []
        self.read: list[str] = []

    def list(self, prefix: str) -> Sequence[ObjectInfo]:
        self.listed.append(prefix)
        return self.inner.list(prefix)

    def get(self, key: str) -> Blob:
        self.read.append(key)
        return self.inner.get(key)

    def get_many(self, keys):
        return {k: self.get(k) for k in keys}


def _chunk(store: FileStore, when: datetime, run: str, *records: dict) -> None:
    body = "".join(json.dumps(r) + "\n" for r in records).encode()
    store.put(f"events/demo/{when:%Y/%m/%d}/{run}-0001.jsonl", body)


def _rec(when: datetime, node: str, action: str = "cordon", **extra: object) -> dict:
    return {
        "time": when.isoformat().replace("+00:00", "Z"),
        "run_id": "r",
        "action": action,
        "pool": "train",
        "node": node,
        "instance_id": "i-1",
        "reason": "XID 79",
        "ok": True,
        "detail": "done",
        "error": None,
        **extra,
    }


def test_a_day_query_lists_three_day_prefixes_of_a_month_of_chunks(tmp_path: Path) -> None:
    spy = Spy(tmp_path)
    for day in range(30):
        when = NOW - timedelta(days=day, hours=1)
        _chunk(spy.inner, when, f"{when:%Y%m%dT%H%M%SZ}-x", _rec(when, "n1"), _rec(when, "n2"))
    h = read_history(spy, "demo", EMPTY, since=NOW - timedelta(hours=24), until=NOW, node="n1")
    assert spy.listed == [
        "events/demo/2026/03/08/",
        "events/demo/2026/03/09/",
        "events/demo/2026/03/10/",
    ]
    assert [k for k in spy.read if k.startswith("events/")] == [
        "events/demo/2026/03/08/20260308T110000Z-x-0001.jsonl",
        "events/demo/2026/03/09/20260309T110000Z-x-0001.jsonl",
        "events/demo/2026/03/10/20260310T110000Z-x-0001.jsonl",
    ]
    assert [(e.node, e.time) for e in h.events] == [("n1", NOW - timedelta(hours=1))]
    assert h.chunks_read == 3


def test_a_run_that_crossed_midnight_is_found_under_the_day_it_started(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    started = datetime(2026, 3, 9, 23, 59, tzinfo=UTC)
    _chunk(store, started, "20260309T235900Z-x", _rec(started + timedelta(minutes=3), "n1"))
    h = read_history(store, "demo", EMPTY, since=datetime(2026, 3, 10, tzinfo=UTC), until=NOW)
    assert [e.node for e in h.events] == ["n1"]


def test_records_without_newer_fields_and_broken_lines_still_read(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    when = NOW - timedelta(hours=2)
    body = (
        json.dumps(_rec(when, "n1", operator=True, run_id="reboot", action="reboot"))
        + "\n"
        + '{"node": "n1", not json\n'
        + json.dumps(_rec(when + timedelta(minutes=1), "n1"))
        + "\n"
        + json.dumps({"node": "n1"})
        + "\n"
    ).encode()
    store.put(f"events/demo/{when:%Y/%m/%d}/old-0001.jsonl", body)
    h = read_history(store, "demo", EMPTY, since=NOW - timedelta(hours=24), until=NOW, node="n1")
    assert [(e.action, e.actor, e.verb) for e in h.events] == [
        ("reboot", Trigger.OPERATOR, "reboot"),
        ("cordon", Trigger.SCHEDULED, ""),
    ]
    assert h.events[0].report is None and h.skipped_lines == 2
    text = render_history(h)
    assert "reboot n1  ok  by operator (reboot)" in text
    assert "(2 malformed audit lines skipped)" in text


def test_a_node_with_a_similar_name_is_not_mixed_in(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    when = NOW - timedelta(hours=2)
    _chunk(store, when, "r", _rec(when, "demo-train-0001"), _rec(when, "demo-train-00010"))
    h = read_history(
        store, "demo", EMPTY, since=NOW - timedelta(hours=24), until=NOW, node="demo-train-0001"
    )
    assert [e.node for e in h.events] == ["demo-train-0001"]


def test_the_nodes_now_come_from_the_memory_the_caller_read_with_their_phase(
    tmp_path: Path,
) -> None:
    """history reads only the audit log; the nodes' state now is the Memory its caller
    passes, a serving node's phase is Phase.NONE (spelled "none" in the JSON document)."""
    store = FileStore(tmp_path)  # holds no state object: the caller's Memory is what counts
    memory = Memory(fleet="demo").with_node(
        NodeMemory("n1", "train", "i-1", phase=Phase.CORDONED, phase_at=NOW, phase_reason="XID 79")
    )
    memory = memory.with_node(NodeMemory("n2", "train", "i-2"))
    h = read_history(store, "demo", memory, since=NOW - timedelta(hours=24), until=NOW)
    assert [(n.node, n.phase) for n in h.nodes] == [("n1", Phase.CORDONED), ("n2", Phase.NONE)]
    assert [n["phase"] for n in history_to_json(h)["nodes"]] == ["cordoned", "none"]
    text = render_history(h)
    assert "Now: n1 (train, i-1) cordoned since" in text and "Now: n2" not in text

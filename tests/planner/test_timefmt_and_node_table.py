"""The time format every JSON form shares (navarch.report.timefmt) and Memory's node table
(navarch.planner.node_table), each in its own module beside the plain data model."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from navarch.planner.model import Memory, NodeMemory, Phase
from navarch.planner.node_table import NodeTable
from navarch.report.timefmt import parse_ts, required_ts, ts


def test_times_are_written_in_utc_with_a_z_and_read_back_aware() -> None:
    cest = timezone(timedelta(hours=2))
    when = datetime(2026, 11, 27, 5, 0, tzinfo=cest)
    assert ts(when) == "2026-11-27T03:00:00Z"
    assert ts(None) is None
    assert parse_ts("2026-11-27T05:00:00+02:00") == datetime(2026, 11, 27, 3, tzinfo=UTC)
    assert required_ts("2026-11-27T03:00:00Z").tzinfo is UTC
    with pytest.raises(ValueError, match="without a timezone"):
        parse_ts("2026-11-27T03:00:00")


def _nm(name: str, phase: Phase = Phase.NONE) -> NodeMemory:
    return NodeMemory(node=name, pool="train", phase=phase)


def test_a_node_table_lists_nodes_in_name_order_through_single_and_bulk_updates() -> None:
    table: NodeTable[NodeMemory] = NodeTable([_nm("n3"), _nm("n1")])
    assert table.names() == ("n1", "n3")
    table = table.set(_nm("n2"))
    assert table.names() == ("n1", "n2", "n3") and "n2" in table and len(table) == 3
    table = table.updated([_nm("n4"), _nm("n1", Phase.CORDONED)], without=["n3", "absent"])
    assert table.names() == ("n1", "n2", "n4")
    got = table.get("n1")
    assert got is not None and got.phase is Phase.CORDONED
    assert table.discard("n2").names() == ("n1", "n4")
    memory = Memory(fleet="demo", nodes=table)
    assert memory.with_node(_nm("n0")).nodes.names() == ("n0", "n1", "n2", "n4")
    assert memory.nodes == Memory(fleet="demo", nodes=list(table)).nodes


def test_a_lazy_node_table_decodes_only_what_is_looked_up_and_equals_the_eager_one() -> None:
    entries = {f"n{i:03d}": {"pool": "p", "i": i} for i in range(100)}
    decoded: list[str] = []

    def decode(name: str, entry: dict[str, object]) -> NodeMemory:
        decoded.append(name)
        return NodeMemory(node=name, pool=str(entry["pool"]))

    table = NodeTable.lazy(entries, decode)
    first = table.get("n007")
    assert first is not None and table["n007"] is first  # decoded once, the same object
    assert "n050" in table and "zz" not in table and len(table) == 100
    assert table.get("zz") is None
    moved = NodeMemory(node="n050", pool="q", phase=Phase.CORDONED)
    added = NodeMemory(node="n100", pool="p")
    updated = table.updated([moved, added])
    assert decoded == ["n007"]  # a lookup and an update decode nothing else
    assert updated.lazy_entries() == (entries, {"n050": moved, "n100": added})
    assert updated["n050"] is moved and len(updated) == 101
    eager = NodeTable(decode(n, e) for n, e in entries.items()).updated([moved, added])
    assert updated == eager and updated.names() == eager.names()
    assert updated.lazy_entries() is None  # compared: every node decoded, a plain table now
    assert table.discard("n001").names() == tuple(n for n in sorted(entries) if n != "n001")

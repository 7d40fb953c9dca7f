"""Lemons per physical host: the executor counts a new fault occurrence against
the node's host where the cloud exposes one (Instance.host_id, EC2 Dedicated Hosts) and
remembers a lemon's host; a fault already recorded for the node is not counted again."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from navarch.fleet.load import load_fleet
from navarch.planner.model import (
    Action,
    ActionKind,
    ActionReason,
    Fault,
    Memory,
    NodeMemory,
    Phase,
    Plan,
)
from navarch.planner.payloads import CordonPayload, TerminatePayload
from navarch.reconcile.executor import Executor
from navarch.reconcile.state import AuditLog
from navarch.report.health import FaultKey, Remedy
from navarch.stores.file import FileStore
from tests.planner import builders
from tests.support.journal import FLEET, write_fleet

NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


class _Cloud:
    def terminate(self, instances: object) -> None:
        pass


def _run(tmp_path: Path, memory: Memory, node: str, host: str | None, *actions: Action) -> Memory:
    run_id = f"run-{len(list((tmp_path / 'store').rglob('*.jsonl'))) + 1}"
    spec = load_fleet(write_fleet(tmp_path))
    inst = replace(
        builders.instance(FLEET, "train", node, launched_at=NOW, instance_id="i-1", provider="sim"),
        host_id=host,
    )
    executor = Executor(
        spec,
        {"sim": _Cloud()},  # type: ignore[dict-item]
        AuditLog(FileStore(tmp_path / "store"), FLEET, run_id, NOW),
        instances={node: inst},
        inventory=(inst,),
        clock=lambda: NOW,
        run_id=run_id,
    )
    memory, outcomes = executor.execute(Plan(FLEET, NOW, actions), memory)
    assert all(o.ok for o in outcomes), outcomes
    return memory


def test_a_fault_counts_against_the_host_and_a_lemons_host_is_remembered(tmp_path) -> None:
    node = f"{FLEET}-train-0001"
    fault = Fault(FaultKey("xid:79", 0), Remedy.REBOOT, "boot-1", 10)
    old = (NOW - timedelta(days=30), "h-old")
    pm = builders.pool_memory(
        "train",
        host_faults=[("h-0abc", "xid:48", NOW - timedelta(days=1)), (old[1], "xid:79", old[0])],
    )
    memory = builders.memory(FLEET, [NodeMemory(node, "train", "i-1", first_seen_at=NOW)], [pm])
    cordon = Action(
        ActionKind.CORDON,
        "train",
        node,
        "XID 79",
        instance_id="i-1",
        payload=CordonPayload(fault=fault, repair=True),
        action_reason=ActionReason.UNHEALTHY,
    )
    memory = _run(tmp_path, memory, node, "h-0abc", cordon)
    # The new occurrence joins; a fault older than max(ladder_window, lemon_window) leaves.
    assert memory.pool("train").host_faults == (
        ("h-0abc", "xid:48", NOW - timedelta(days=1)),
        ("h-0abc", "xid:79", NOW),
    )
    nm = replace(memory.node(node), phase=Phase.DRAINING)
    memory = memory.with_node(nm)
    term = Action(
        ActionKind.TERMINATE,
        "train",
        node,
        "lemon",
        instance_id="i-1",
        payload=TerminatePayload(lemon=True),
        action_reason=ActionReason.DRAIN_FINISHED,
    )
    memory = _run(tmp_path, memory, node, "h-0abc", term)
    assert memory.pool("train").lemons == ("i-1",)
    assert memory.pool("train").lemon_hosts == ("h-0abc",)
    # The audit log marks it: the fault a cordon answered, the lemon a terminate removed.
    records = [
        json.loads(line)
        for f in sorted((tmp_path / "store" / "events").rglob("*"))
        if f.is_file()
        for line in f.read_text().splitlines()
    ]
    by_action = {r["action"]: r for r in records}
    assert by_action["cordon"]["fault"] == "xid:79@gpu0"
    assert by_action["terminate"]["lemon"] is True


def test_no_host_id_no_host_faults(tmp_path) -> None:
    node = f"{FLEET}-train-0001"
    memory = builders.memory(FLEET, [NodeMemory(node, "train", "i-1", first_seen_at=NOW)], [])
    cordon = Action(
        ActionKind.CORDON,
        "train",
        node,
        "XID 79",
        instance_id="i-1",
        payload=CordonPayload(fault=Fault(FaultKey("xid:79", 0), Remedy.REBOOT, "boot-1", 10)),
        action_reason=ActionReason.UNHEALTHY,
    )
    memory = _run(tmp_path, memory, node, None, cordon)
    assert memory.pool("train").host_faults == ()

"""The executor's share of hosts: a termination marked hand_back reports the host first
(only to a provider declaring Capability.REPORT_FAULTY_HOST), a refused report never
stops the termination, and the pool's host fault list stays bounded."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from navarch.capabilities import Capability
from navarch.errors import ConfigError
from navarch.fleet.load import load_fleet
from navarch.inventory import Instance
from navarch.planner.model import Action, ActionKind, ActionReason, Fault, NodeMemory, Phase, Plan
from navarch.planner.payloads import CordonPayload, TerminatePayload
from navarch.reconcile.executor import Executor
from navarch.reconcile.handlers import MAX_HOST_FAULTS
from navarch.reconcile.state import AuditLog
from navarch.report.health import FaultKey, Remedy
from navarch.stores.file import FileStore
from tests.planner import builders
from tests.support.journal import FLEET, write_fleet

NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
NODE = f"{FLEET}-train-0001"
XID79 = Fault(FaultKey("xid:79", 3), Remedy.REPLACE, "boot-1", 10)


class _Cloud:
    """A provider that records what it was asked; `refuse` makes its report fail."""

    def __init__(self, capabilities: Capability, refuse: bool = False) -> None:
        self.capabilities = capabilities
        self.refuse = refuse
        self.calls: list[tuple[str, str]] = []

    def terminate(self, instances: list[Instance]) -> None:
        self.calls += [("terminate", i.instance_id) for i in instances]

    def report_faulty_host(self, instance: Instance, fault: str) -> str:
        self.calls.append(("report", f"{instance.host_id} {fault}"))
        if self.refuse:
            raise ConfigError("INSTANCES_WITHOUT_RESERVATION_NOT_SUPPORTED")
        return f"host {instance.host_id} reported faulty"


def _terminate(tmp_path: Path, cloud: _Cloud, *, hand_back: bool = True):
    spec = load_fleet(write_fleet(tmp_path))
    inst = replace(
        builders.instance(FLEET, "train", NODE, launched_at=NOW, instance_id="i-1"),
        host_id="h-7",
    )
    memory = builders.memory(
        FLEET, [NodeMemory(NODE, "train", "i-1", first_seen_at=NOW, phase=Phase.DRAINING)], []
    )
    action = Action(
        ActionKind.TERMINATE,
        "train",
        NODE,
        "drain finished; xid:79",
        instance_id="i-1",
        payload=TerminatePayload(fault=XID79, hand_back=hand_back),
        action_reason=ActionReason.DRAIN_FINISHED,
    )
    executor = Executor(
        spec,
        {"sim": cloud},  # type: ignore[dict-item]
        AuditLog(FileStore(tmp_path / "store"), FLEET, "run-1", NOW),
        instances={NODE: inst},
        inventory=(inst,),
        clock=lambda: NOW,
        run_id="run-1",
    )
    return executor.execute(Plan(FLEET, NOW, (action,)), memory)


def test_a_hardware_termination_reports_the_host_before_terminating(tmp_path) -> None:
    cloud = _Cloud(Capability.REPORT_FAULTY_HOST)
    _, (outcome,) = _terminate(tmp_path, cloud)
    assert cloud.calls == [("report", "h-7 xid:79@gpu3"), ("terminate", "i-1")]
    assert outcome.ok and outcome.detail == "terminated i-1; host h-7 reported faulty"


def test_a_provider_without_the_capability_is_never_asked(tmp_path) -> None:
    cloud = _Cloud(Capability.NONE)
    _, (outcome,) = _terminate(tmp_path, cloud)
    assert cloud.calls == [("terminate", "i-1")]
    assert outcome.detail == "terminated i-1"


def test_a_refused_report_still_terminates_and_says_why(tmp_path) -> None:
    cloud = _Cloud(Capability.REPORT_FAULTY_HOST, refuse=True)
    _, (outcome,) = _terminate(tmp_path, cloud)
    assert cloud.calls[-1] == ("terminate", "i-1") and outcome.ok
    assert "reporting its host as faulty failed: INSTANCES_WITHOUT_RESERVATION" in outcome.detail


def test_the_host_fault_list_keeps_only_the_newest(tmp_path) -> None:
    spec = load_fleet(write_fleet(tmp_path))
    inst = replace(
        builders.instance(FLEET, "train", NODE, launched_at=NOW, instance_id="i-1"),
        host_id="h-new",
    )
    old = [(f"h-{i}", "xid:48", NOW - timedelta(minutes=i)) for i in range(MAX_HOST_FAULTS)]
    memory = builders.memory(
        FLEET,
        [NodeMemory(NODE, "train", "i-1", first_seen_at=NOW)],
        [builders.pool_memory("train", host_faults=old)],
    )
    cordon = Action(
        ActionKind.CORDON,
        "train",
        NODE,
        "XID 79",
        instance_id="i-1",
        payload=CordonPayload(fault=XID79),
        action_reason=ActionReason.UNHEALTHY,
    )
    executor = Executor(
        spec,
        {"sim": _Cloud(Capability.NONE)},  # type: ignore[dict-item]
        AuditLog(FileStore(tmp_path / "store"), FLEET, "run-1", NOW),
        instances={NODE: inst},
        inventory=(inst,),
        clock=lambda: NOW,
        run_id="run-1",
    )
    memory, _ = executor.execute(Plan(FLEET, NOW, (cordon,)), memory)
    kept = memory.pool("train").host_faults
    assert len(kept) == MAX_HOST_FAULTS
    assert kept[-1] == ("h-new", "xid:79", NOW) and kept[0][0] == "h-1"

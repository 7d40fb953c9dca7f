"""The executor's engine against a fake provider and a file store: one outcome per action,
of the kind its failure calls for and carrying the exception; the action boundary; the
audit log; the journal when it fails."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from navarch.errors import AuthError, LeaseLost, PreconditionFailed, RemoteError, TransientError
from navarch.fleet.load import load_fleet
from navarch.fleet.spec import FleetSpec
from navarch.inventory import Instance
from navarch.outcome import Outcome, OutcomeKind
from navarch.planner.model import (
    Action,
    ActionKind,
    ActionReason,
    DiagState,
    Memory,
    NodeMemory,
    Phase,
    Plan,
)
from navarch.planner.payloads import DiagnosePayload, DiagWhy, RemedyPayload, TagsPayload
from navarch.reconcile.executor import Executor, JournalPolicy
from navarch.reconcile.state import AuditLog
from navarch.report.health import Remedy
from navarch.stores.file import FileStore
from tests.planner import builders
from tests.support.journal import FLEET, write_fleet

NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def node(i: int) -> str:
    return f"{FLEET}-train-{i:04d}"


class FakeCloud:
    """A provider whose terminate/reboot/update_tags raise what `fail` names per instance."""

    def __init__(self, fail: dict[str, BaseException] | None = None) -> None:
        self.fail = fail or {}
        self.calls: list[tuple[str, str]] = []

    def _do(self, verb: str, instances: Sequence[Instance]) -> None:
        for inst in instances:
            self.calls.append((verb, inst.instance_id))
            if inst.instance_id in self.fail:
                raise self.fail[inst.instance_id]

    def terminate(self, instances: Sequence[Instance]) -> None:
        self._do("terminate", instances)

    def reboot(self, instances: Sequence[Instance]) -> None:
        self._do("reboot", instances)

    def update_tags(self, instance: Instance, tags: object) -> None:
        self._do("update_tags", [instance])


class FailingPlaybooks:
    """A playbook runner whose cordon fails on every node with a RemoteError."""

    def run(
        self, pool: object, kind: str, node: str, address: str | None, reason: str
    ) -> tuple[bool, str]:
        if kind == "cordon":
            raise RemoteError(node, "scontrol update State=DRAIN", 1, "slurm is down")
        return True, f"{kind} ok"


def scale_down(i: int) -> Action:
    """The termination of node i (instance i-<i>) that a scale-down plans."""
    return Action(
        ActionKind.TERMINATE,
        "train",
        node(i),
        "scale_down",
        instance_id=f"i-{i}",
        action_reason=ActionReason.SCALE_DOWN,
    )


def spec_of(tmp_path: Path, scheduler: str = "none") -> FleetSpec:
    path = write_fleet(tmp_path, target=4)
    path.write_text(path.read_text().replace("scheduler: none", f"scheduler: {scheduler}"))
    return load_fleet(path)


def world(n: int) -> tuple[dict[str, Instance], Memory]:
    instances = {
        node(i): builders.instance(
            FLEET, "train", node(i), launched_at=NOW, instance_id=f"i-{i}", provider="sim"
        )
        for i in range(1, n + 1)
    }
    memory = Memory(fleet=FLEET)
    for name, inst in instances.items():
        memory = memory.with_node(NodeMemory(name, "train", inst.instance_id, first_seen_at=NOW))
    return instances, memory


def execute(
    tmp_path: Path,
    spec: FleetSpec,
    cloud: FakeCloud,
    instances: dict[str, Instance],
    memory: Memory,
    *actions: Action,
    **kwargs: object,
) -> tuple[Memory, dict[tuple[ActionKind, str | None], Outcome]]:
    store = FileStore(tmp_path / "store")
    executor = Executor(
        spec,
        {"sim": cloud},  # type: ignore[dict-item]
        AuditLog(store, FLEET, "run-1", NOW),
        instances=instances,
        inventory=tuple(instances.values()),
        clock=lambda: NOW,
        run_id="run-1",
        **kwargs,
    )  # type: ignore[arg-type]
    memory, outcomes = executor.execute(Plan(FLEET, NOW, actions), memory)
    return memory, {(o.action.kind, o.action.node): o for o in outcomes}


def scale_down_all(
    tmp_path: Path, cloud: FakeCloud, n: int, **kwargs: object
) -> dict[tuple[ActionKind, str | None], Outcome]:
    """Terminate nodes 1 to n of a fresh world(n), as a scale-down plans (kwargs: the
    Executor's); the outcomes by (kind, node)."""
    instances, memory = world(n)
    actions = (scale_down(i) for i in range(1, n + 1))
    _, got = execute(tmp_path, spec_of(tmp_path), cloud, instances, memory, *actions, **kwargs)
    return got


def audit_records(tmp_path: Path) -> list[dict[str, object]]:
    chunks = sorted((tmp_path / "store" / "events").rglob("*.jsonl"))
    return [json.loads(line) for c in chunks for line in c.read_text().splitlines()]


def test_each_outcome_has_the_kind_its_failure_calls_for_and_carries_the_exception(
    tmp_path: Path,
) -> None:
    instances, memory = world(4)
    throttled = TransientError("RequestLimitExceeded", code="RequestLimitExceeded")
    denied = AuthError("UnauthorizedOperation", code="UnauthorizedOperation")
    cloud = FakeCloud({"i-2": throttled, "i-3": denied})
    memory = memory.with_node(replace(memory.node(node(4)), phase=Phase.CORDONED))
    _, got = execute(
        tmp_path,
        spec_of(tmp_path),
        cloud,
        instances,
        memory,
        scale_down(1),
        scale_down(2),
        Action(
            ActionKind.UPDATE_TAGS,
            "train",
            node(3),
            "drift",
            payload=TagsPayload(tags=(("team", "ml"),)),
            action_reason=ActionReason.DRIFT,
        ),
        Action(
            ActionKind.REBOOT,
            "train",
            node(4),
            "XID 79",
            payload=RemedyPayload(rung=Remedy.REBOOT),
            action_reason=ActionReason.UNHEALTHY,
        ),  # cordoned, not drained
    )
    ok = got[(ActionKind.TERMINATE, node(1))]
    assert ok.kind is OutcomeKind.OK and ok.ok and ok.exc is None and ok.error is None
    transient = got[(ActionKind.TERMINATE, node(2))]
    assert transient.kind is OutcomeKind.TRANSIENT and transient.exc is throttled
    assert transient.error == "TransientError" and not transient.ok
    permanent = got[(ActionKind.UPDATE_TAGS, node(3))]
    assert permanent.kind is OutcomeKind.PERMANENT and permanent.exc is denied
    refused = got[(ActionKind.REBOOT, node(4))]
    assert refused.kind is OutcomeKind.REFUSED and refused.exc is None
    assert refused.detail == "not drained (phase cordoned)"
    # The refused reboot never reached the cloud.
    assert ("reboot", "i-4") not in cloud.calls


def test_a_drain_after_a_failed_cordon_is_skipped_and_the_cordon_is_transient(
    tmp_path: Path,
) -> None:
    instances, memory = world(1)
    memory, got = execute(
        tmp_path,
        spec_of(tmp_path, "slurm"),
        FakeCloud(),
        instances,
        memory,
        Action(ActionKind.CORDON, "train", node(1), "XID 79", action_reason=ActionReason.UNHEALTHY),
        Action(ActionKind.DRAIN, "train", node(1), "XID 79", action_reason=ActionReason.UNHEALTHY),
        playbooks=FailingPlaybooks(),
    )
    cordon = got[(ActionKind.CORDON, node(1))]
    assert cordon.kind is OutcomeKind.TRANSIENT and isinstance(cordon.exc, RemoteError)
    drain = got[(ActionKind.DRAIN, node(1))]
    assert drain.kind is OutcomeKind.SKIPPED
    assert drain.detail == "not cordoned (its cordon failed this run)"
    assert memory.node(node(1)).phase is Phase.NONE


def test_an_exception_at_the_action_boundary_is_a_failed_outcome_and_others_go_on(
    tmp_path: Path,
) -> None:
    bug = KeyError("InstanceId")
    got = scale_down_all(tmp_path, FakeCloud({"i-1": bug}), 2)
    failed = got[(ActionKind.TERMINATE, node(1))]
    assert failed.kind is OutcomeKind.PERMANENT and failed.exc is bug
    assert failed.detail == "KeyError: 'InstanceId'"
    assert got[(ActionKind.TERMINATE, node(2))].ok


def test_the_audit_log_records_each_outcome_with_its_kind_and_error_name(
    tmp_path: Path,
) -> None:
    scale_down_all(tmp_path, FakeCloud({"i-2": TransientError("RequestLimitExceeded")}), 2)
    by_node = {r["node"]: r for r in audit_records(tmp_path)}
    assert by_node[node(1)]["ok"] is True and by_node[node(1)]["outcome"] == "ok"
    assert by_node[node(1)]["error"] is None and by_node[node(1)]["detail"] == "terminated i-1"
    assert by_node[node(2)]["outcome"] == "transient"
    assert by_node[node(2)]["error"] == "TransientError"
    assert by_node[node(2)]["detail"] == "RequestLimitExceeded"


def test_a_journal_that_fails_stops_the_run_and_its_error_is_raised(tmp_path: Path) -> None:
    lost = PreconditionFailed("state/jt.json", "another run wrote state")
    writes: list[Memory] = []

    def journal(m: Memory) -> Memory:
        writes.append(m)
        raise lost

    with pytest.raises(PreconditionFailed) as info:
        scale_down_all(
            tmp_path, FakeCloud(), 3, journal=journal, policy=JournalPolicy(every_actions=1)
        )
    assert info.value is lost
    # The first write failed: the run tried no other write (no state after a lost CAS),
    # and that write held the first finished action's result.
    assert len(writes) == 1
    assert sum(n.phase is Phase.TERMINATING for n in writes[0].nodes) == 1


def test_actions_done_before_a_journal_failure_are_in_the_audit_log(tmp_path: Path) -> None:
    cloud = FakeCloud()

    def journal(m: Memory) -> Memory:
        raise PreconditionFailed("state/jt.json", "another run wrote state")

    with pytest.raises(PreconditionFailed):
        scale_down_all(tmp_path, cloud, 3, journal=journal, policy=JournalPolicy(every_actions=1))
    terminated = {iid for verb, iid in cloud.calls if verb == "terminate"}
    assert terminated  # something was done before the failed write stopped the run
    recorded = {r["node"] for r in audit_records(tmp_path) if r["ok"]}
    assert recorded == {node(int(iid.split("-")[1])) for iid in terminated}


class LapsingLease:
    """A lease that holds for the first `holds` checks, then is lost."""

    def __init__(self, holds: int) -> None:
        self.holds = holds

    def check(self) -> None:
        if self.holds <= 0:
            raise LeaseLost("lease taken over by another run")
        self.holds -= 1

    def check_store(self) -> None:
        self.check()


def test_actions_done_before_the_lease_is_lost_are_in_the_audit_log(tmp_path: Path) -> None:
    cloud = FakeCloud()
    with pytest.raises(LeaseLost):
        scale_down_all(tmp_path, cloud, 3, lease=LapsingLease(holds=2), max_parallel={"sim": 1})
    assert len(cloud.calls) == 2
    assert {r["node"] for r in audit_records(tmp_path)} == {
        node(int(iid.split("-")[1])) for _, iid in cloud.calls
    }


class DiagnosingCloud(FakeCloud):
    """A provider that diagnoses its machines' GPUs itself, with the verdict `verdict`."""

    def __init__(self, verdict: str) -> None:
        super().__init__()
        self.verdict = verdict

    def diagnose(self, instance: Instance, level: int) -> tuple[str, str]:
        return self.verdict, "memory on GPU 1" if self.verdict == "fail" else ""


@pytest.mark.parametrize("verdict", ["running", "pass", "fail", "unavailable"])
def test_a_diagnose_outcome_carries_its_verdict_as_a_diag_state(
    tmp_path: Path, verdict: str
) -> None:
    """The notifier and the renderers read a diagnostic's verdict from the outcome as the
    DiagState the node's Memory records, never as text to compare."""
    instances, memory = world(1)
    memory = memory.with_node(replace(memory.node(node(1)), phase=Phase.REMEDIATING, phase_at=NOW))
    diagnose = Action(
        ActionKind.DIAGNOSE,
        "train",
        node(1),
        "return_requires_diag",
        instance_id="i-1",
        payload=DiagnosePayload(level=2, why=DiagWhy.RETURN),
        action_reason=ActionReason.DIAGNOSTICS,
    )
    memory, got = execute(
        tmp_path, spec_of(tmp_path), DiagnosingCloud(verdict), instances, memory, diagnose
    )
    outcome = got[(ActionKind.DIAGNOSE, node(1))]
    recorded = memory.node(node(1)).diag
    assert recorded is not None
    assert outcome.diag is DiagState(verdict) is recorded.state

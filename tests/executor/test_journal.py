"""Journaled apply: a failure of any kind in the
middle of an apply never loses the record of what it did; an apply with nothing to do keeps
the state serial; the audit log is written in chunks; actions run in parallel."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from navarch.errors import StoreError
from navarch.fleet.load import load_fleet
from navarch.inventory import Instance
from navarch.planner.model import ActionReason, Phase
from navarch.providers.base import ProvisionRequest
from navarch.reconcile.executor import JournalPolicy
from navarch.reconcile.run import Fleet, check_saved_plan, gather, run_apply, system_clock
from navarch.reconcile.state import STORE_CLOCK_SLACK_S, load_memory
from tests.support.journal import (
    FLEET,
    HeldApply,
    navarch,
    silence_lease,
    state_path,
    write_fleet,
)


class Spy:
    """Wraps a provider: counts provisions, can fail the n-th, can wait for company."""

    def __init__(
        self, inner: Any, *, fail_at: int | None = None, barrier: threading.Barrier | None = None
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self.fail_at = fail_at
        self.barrier = barrier
        self.calls = 0
        self.requests: list[ProvisionRequest] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.mutex = threading.Lock()

    def list_instances(self, fleet: str) -> Sequence[Instance]:
        return self.inner.list_instances(fleet)

    def provision(self, request: ProvisionRequest) -> Instance:
        with self.mutex:
            self.calls += 1
            n = self.calls
            self.requests.append(request)
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if n == self.fail_at:
                raise KeyError("zone")  # a bug, not a navarch error
            if self.barrier is not None and n <= self.barrier.parties:
                self.barrier.wait()
            return self.inner.provision(request)
        finally:
            with self.mutex:
                self.in_flight -= 1

    def terminate(self, instances: Sequence[Instance]) -> None:
        self.inner.terminate(instances)

    def update_tags(self, instance: Instance, tags: Mapping[str, str]) -> None:
        self.inner.update_tags(instance, tags)


class FlakyStore:
    """Wraps an ObjectStore: the puts listed in fail_puts (1-based, counted per key prefix)
    raise StoreError; records every put's key and size."""

    def __init__(self, inner: Any, prefix: str, fail_puts: set[int]) -> None:
        self.inner = inner
        self.url = inner.url
        self.parallel_gets = inner.parallel_gets
        self.prefix = prefix
        self.fail_puts = fail_puts
        self.count = 0
        self.puts: list[tuple[str, int]] = []

    def put(self, key: str, data: bytes, **kw: Any) -> str:
        if key.startswith(self.prefix):
            self.count += 1
            if self.count in self.fail_puts:
                raise StoreError(f"injected failure writing {key}")
        self.puts.append((key, len(data)))
        return self.inner.put(key, data, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def open_fleet(root: Path) -> Fleet:
    return Fleet.open(load_fleet(root / "fleet.yaml"))


def machines(root: Path) -> dict[str, str]:
    """navarch-node -> instance id of every local machine of the fleet (fails on duplicates)."""
    out: dict[str, str] = {}
    for d in sorted((root / "local" / FLEET / "machines").iterdir()):
        m = json.loads((d / "machine.json").read_text())
        node = m["tags"]["navarch-node"]
        assert node not in out, f"{node} launched twice"
        out[node] = m["instance_id"]
    return out


def known(root: Path) -> dict[str, str | None]:
    memory, _ = load_memory(open_fleet(root).store, FLEET)
    return {n.node: n.instance_id for n in memory.nodes}


def audit_records(root: Path) -> list[dict[str, Any]]:
    files = sorted((root / "store" / "events" / FLEET).rglob("*.jsonl"))
    return [json.loads(line) for f in files for line in f.read_text().splitlines()]


def test_keyerror_on_third_provision_keeps_the_first_two(tmp_path):
    write_fleet(tmp_path, target=4, max_parallel=1)
    fleet = open_fleet(tmp_path)
    spy = Spy(fleet.providers["sim"], fail_at=3)
    fleet.providers["sim"] = spy
    result = run_apply(fleet, command="apply (test)")
    failed = [o for o in result.outcomes if not o.ok]
    assert [(o.action.node, o.error) for o in failed] == [("jt-train-0003", "KeyError")]
    assert "KeyError" in failed[0].detail
    # The two launched before the failure and the one after are in the saved state.
    launched = machines(tmp_path)
    assert len(launched) == 3 and known(tmp_path) == launched
    # The next run launches only what is missing: nothing twice.
    again = run_apply(open_fleet(tmp_path), command="apply (test)")
    assert [o.action.kind.value for o in again.outcomes] == ["provision"]
    assert len(machines(tmp_path)) == 4 and known(tmp_path) == machines(tmp_path)


def test_store_error_on_second_audit_write_loses_nothing(tmp_path):
    write_fleet(tmp_path, target=4, max_parallel=1)
    fleet = open_fleet(tmp_path)
    fleet.store = FlakyStore(fleet.store, "events/", fail_puts={2})
    result = run_apply(fleet, command="apply (test)", policy=JournalPolicy(every_actions=1))
    assert all(o.ok for o in result.outcomes) and len(result.outcomes) == 4
    assert result.audit_error is None  # the failed chunk's records went out with the next
    assert known(tmp_path) == machines(tmp_path) and len(machines(tmp_path)) == 4
    assert sorted(r["node"] for r in audit_records(tmp_path)) == [
        f"jt-train-{i:04d}" for i in range(1, 5)
    ]


def test_audit_store_down_still_records_memory_and_fails_the_run(tmp_path):
    write_fleet(tmp_path, target=3, max_parallel=1)
    fleet = open_fleet(tmp_path)
    fleet.store = FlakyStore(fleet.store, "events/", fail_puts=set(range(2, 100)))
    result = run_apply(fleet, command="apply (test)", policy=JournalPolicy(every_actions=1))
    assert all(o.ok for o in result.outcomes)
    assert result.audit_error and "injected failure" in result.audit_error
    assert known(tmp_path) == machines(tmp_path) and len(machines(tmp_path)) == 3
    assert len(audit_records(tmp_path)) == 1  # the first chunk; the rest was reported


def test_sigkill_after_cordon_keeps_it_and_launches_nothing_twice(tmp_path):
    write_fleet(tmp_path, target=3, max_parallel=4, lock_ttl="1m")
    assert navarch(tmp_path, "apply", "fleet.yaml", "--auto-approve").returncode == 0
    assert navarch(tmp_path, "local", "tick", "fleet.yaml").returncode == 0
    inject = navarch(tmp_path, "local", "inject", "fleet.yaml", "jt-train-0002", "--xid", "79")
    assert inject.returncode == 0, inject.stderr
    assert navarch(tmp_path, "local", "tick", "fleet.yaml").returncode == 0
    before = json.loads(state_path(tmp_path).read_text())["serial"]

    # The child holds inside the replacement's launch until the state records the cordon
    # (scheduler none: journaled by the JournalPolicy.every_s timer), then is killed.
    held = HeldApply(tmp_path, "after-cordon")
    held.wait_holding()
    held.kill()
    doc = json.loads(state_path(tmp_path).read_text())
    assert doc["serial"] > before
    assert doc["nodes"]["jt-train-0002"]["phase"] in (Phase.CORDONED, Phase.DRAINING)

    # The next run (once the killed run's lease lapsed by the store's clock) still knows the
    # cordon and adopts the replacement the killed run launched: nothing is launched twice.
    silence_lease(tmp_path, 60 + STORE_CLOCK_SLACK_S + 1)
    run = navarch(tmp_path, "apply", "fleet.yaml", "--auto-approve")
    assert run.returncode == 0, run.stdout + run.stderr
    memory, _ = load_memory(open_fleet(tmp_path).store, FLEET)
    assert memory.node("jt-train-0002").phase in (Phase.CORDONED, Phase.DRAINING)
    assert "provision" not in run.stdout
    assert sorted(machines(tmp_path)) == [f"jt-train-{i:04d}" for i in range(1, 5)]


def test_apply_with_nothing_to_do_keeps_the_serial_and_saved_plans(tmp_path):
    write_fleet(tmp_path, target=2)
    assert navarch(tmp_path, "apply", "fleet.yaml", "--auto-approve").returncode == 0
    serial = json.loads(state_path(tmp_path).read_text())["serial"]
    fleet = open_fleet(tmp_path)
    saved = gather(fleet, system_clock()).plan
    for _ in range(2):
        run = navarch(tmp_path, "apply", "fleet.yaml", "--auto-approve")
        assert run.returncode == 0, run.stderr
    assert json.loads(state_path(tmp_path).read_text())["serial"] == serial
    check_saved_plan(saved, gather(fleet, system_clock()))  # not stale


def test_audit_log_is_chunked_and_bytes_per_action_are_bounded(tmp_path):
    write_fleet(tmp_path, target=120, max_parallel=4)
    fleet = open_fleet(tmp_path)
    store = FlakyStore(fleet.store, "events/", fail_puts=set())
    fleet.store = store
    result = run_apply(
        fleet, command="apply (test)", policy=JournalPolicy(every_actions=10, max_writes=1000)
    )
    assert len(result.outcomes) == 120 and all(o.ok for o in result.outcomes)
    audit = [(k, n) for k, n in store.puts if k.startswith("events/")]
    keys = [k for k, _ in audit]
    assert len(keys) == len(set(keys)) >= 12  # a new object per chunk, never a rewrite
    assert all(k.endswith(".jsonl") and k.rsplit("-", 1)[1][:4].isdigit() for k in keys)
    per_action = sum(n for _, n in audit) / len(result.outcomes)
    assert per_action < 600, per_action  # one record each, whatever the run's length
    assert len(audit_records(tmp_path)) == 120


def test_actions_run_in_parallel_and_one_thread_folds_memory(tmp_path):
    write_fleet(tmp_path, target=12, max_parallel=4)
    fleet = open_fleet(tmp_path)
    spy = Spy(fleet.providers["sim"], barrier=threading.Barrier(3, timeout=30))
    fleet.providers["sim"] = spy
    result = run_apply(fleet, command="apply (test)")
    assert all(o.ok for o in result.outcomes) and len(result.outcomes) == 12
    assert 3 <= spy.most_in_flight <= 4
    # Every launch knew from this run's inventory that its launch id was new.
    assert all(r.known_absent for r in spy.requests)
    memory, _ = load_memory(fleet.store, FLEET)
    assert {n.node: n.instance_id for n in memory.nodes} == machines(tmp_path)
    assert memory.pool("train").next_index == 13


def test_sequential_when_max_parallel_is_one(tmp_path):
    write_fleet(tmp_path, target=5, max_parallel=1)
    fleet = open_fleet(tmp_path)
    spy = Spy(fleet.providers["sim"])
    fleet.providers["sim"] = spy
    result = run_apply(fleet, command="apply (test)")
    assert spy.most_in_flight == 1
    assert [o.action.node for o in result.outcomes] == [f"jt-train-{i:04d}" for i in range(1, 6)]


@pytest.mark.parametrize("every", [1, 3])
def test_journal_writes_state_during_the_run(tmp_path, every):
    write_fleet(tmp_path, target=6, max_parallel=1)
    fleet = open_fleet(tmp_path)
    store = FlakyStore(fleet.store, "state/", fail_puts=set())
    fleet.store = store
    run_apply(fleet, command="apply (test)", policy=JournalPolicy(every_actions=every))
    writes = [k for k, _ in store.puts if k == f"state/{FLEET}.json"]
    assert len(writes) >= 6 // every


class RecordingPlaybooks:
    """A PlaybookRunner that records (kind, node, journal writes so far) in call order."""

    def __init__(self, journal_writes: list[int]) -> None:
        self.calls: list[tuple[str, str, int]] = []
        self.writes = journal_writes
        self.mutex = threading.Lock()

    def run(self, pool, kind, node, address, reason):
        with self.mutex:
            self.calls.append((kind, node, len(self.writes)))
        return True, f"{kind} ok"


def test_playbook_cordons_are_journaled_at_once_and_drain_follows_cordon(tmp_path):
    from datetime import UTC, datetime

    from navarch.planner.model import Action, ActionKind, Memory, NodeMemory, Plan
    from navarch.reconcile.executor import Executor
    from navarch.reconcile.state import AuditLog
    from navarch.stores.file import FileStore

    path = write_fleet(tmp_path, target=6, max_parallel=4)
    text = path.read_text().replace("scheduler: none", "scheduler: slurm")
    path.write_text(text)
    spec = load_fleet(path)
    now = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
    nodes = [f"jt-train-{i:04d}" for i in range(1, 7)]
    memory = Memory(fleet=FLEET)
    for n in nodes:
        memory = memory.with_node(
            NodeMemory(node=n, pool="train", instance_id=f"i-{n}", first_seen_at=now)
        )
    actions = tuple(
        Action(kind, "train", n, "test", action_reason=ActionReason.UNHEALTHY)
        for n in nodes
        for kind in (ActionKind.CORDON, ActionKind.DRAIN)
    )
    writes: list[int] = []

    def journal(m: Memory) -> Memory:
        writes.append(sum(n.phase is not Phase.NONE for n in m.nodes))
        return m

    playbooks = RecordingPlaybooks(writes)
    store = FileStore(tmp_path / "store")
    executor = Executor(
        spec,
        {},
        AuditLog(store, FLEET, "run-1", now),
        instances={},
        inventory=(),
        clock=lambda: now,
        run_id="run-1",
        playbooks=playbooks,
        journal=journal,
    )
    memory, outcomes = executor.execute(Plan(FLEET, now, actions), memory)
    assert all(o.ok for o in outcomes) and len(outcomes) == 12
    assert {memory.node(n).phase for n in nodes} == {Phase.DRAINING}
    for n in nodes:
        kinds = [k for k, node, _ in playbooks.calls if node == n]
        assert kinds == ["cordon", "drain"]
    # A write after each playbook action (12), each seeing at least as much as the last.
    assert len(writes) >= 12 and writes == sorted(writes)

"""Active diagnostics: the built-in dcgmi diag playbook over a real sshd with a
dcgmi stand-in printing DCGM's JSON, and the parser on DCGM's shapes."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from navarch.planner.payloads import DiagnosePayload
from navarch.remote.adapter import SSHPlaybooks
from navarch.remote.diagnostics import (
    DiagOutcome,
    DiagResult,
    diagnostics_playbook,
    parse_dcgmi_diag,
    run_diagnostics,
)
from navarch.remote.runner import PlaybookTarget, SSHRunner
from tests.support.fake_agent import fake_agent_config

from .conftest import Sshd, Standin

TARGET = PlaybookTarget(
    fleet="prod",
    pool="train",
    node="gpu-1",
    address="127.0.0.1",
    reason="return to service after reboot",
)


def run(sshd: Sshd, level: int, playbook=None) -> DiagResult:
    """Run the playbook as successive reconcile runs would until it gives a verdict: the
    built-in starts dcgmi detached (RUNNING) and a later run collects the result."""
    runner = SSHRunner(sshd.ssh(), base_dir=Path.cwd())
    playbook = playbook or diagnostics_playbook("slurm")
    for _ in range(200):
        result = run_diagnostics(runner, playbook, TARGET, level)
        if result.outcome is not DiagOutcome.RUNNING:
            return result
        time.sleep(0.05)
    raise AssertionError(f"dcgmi diag -r {level} still running: {result.detail}")


def test_the_builtin_starts_detached_then_collects(sshd: Sshd, standin: Standin) -> None:
    """A run never waits for dcgmi: the first run starts it and says so; while it runs a run
    says so (one dcgmi started); the first run after it finished reads its JSON."""
    standin.set_state({"dcgmi": {"mode": "pass"}, "gate": "go"})
    runner = SSHRunner(sshd.ssh(), base_dir=Path.cwd())
    first = run_diagnostics(runner, diagnostics_playbook("none"), TARGET, 2)
    assert first.outcome is DiagOutcome.RUNNING and not first.fault
    assert first.detail == "dcgmi diag -r 2 started"
    second = run_diagnostics(runner, diagnostics_playbook("none"), TARGET, 2)
    assert second.outcome is DiagOutcome.RUNNING and second.detail == "dcgmi diag -r 2 running"
    standin.wait_for_calls("dcgmi", 1)
    (standin.dir / "go").touch()  # dcgmi finishes
    result = run(sshd, 2)
    assert result.outcome is DiagOutcome.PASS
    assert standin.calls("dcgmi") == [["diag", "-r", "2", "-j"]]  # started once


def test_a_result_left_by_an_earlier_diagnostic_is_not_collected_as_a_new_one(
    sshd: Sshd,
    standin: Standin,
) -> None:
    """A diagnostic that finished before a remedy (nobody collected it) must not pass for
    the one started after it: each result belongs to the run that started it."""
    standin.set_state({"dcgmi": {"mode": "pass"}})
    runner = SSHRunner(sshd.ssh(), base_dir=Path.cwd())
    before = run_diagnostics(
        runner, diagnostics_playbook("none"), TARGET, 2, token="20260302T110000Z"
    )
    assert before.outcome is DiagOutcome.RUNNING
    standin.wait_for_calls("dcgmi", 1)
    standin.set_state({"dcgmi": {"mode": "fail_level2"}})  # the GPU broke since
    after = run_diagnostics(
        runner, diagnostics_playbook("none"), TARGET, 2, token="20260302T120000Z"
    )
    assert after.outcome is DiagOutcome.RUNNING and after.detail == "dcgmi diag -r 2 started"
    for _ in range(200):
        result = run_diagnostics(
            runner, diagnostics_playbook("none"), TARGET, 2, token="20260302T120000Z"
        )
        if result.outcome is not DiagOutcome.RUNNING:
            break
        time.sleep(0.05)
    assert result.outcome is DiagOutcome.FAIL
    assert len(standin.calls("dcgmi")) == 2


@pytest.mark.parametrize("fmt", [4, 3])
@pytest.mark.parametrize("level", [1, 2, 3])
def test_pass_at_every_level(sshd: Sshd, standin: Standin, level: int, fmt: int) -> None:
    standin.set_state({"dcgmi": {"mode": "pass", "format": fmt}})
    result = run(sshd, level)
    assert result.outcome is DiagOutcome.PASS and not result.fault
    assert standin.calls("dcgmi") == [["diag", "-r", str(level), "-j"]]
    assert len(result.tests) == {1: 1, 2: 3, 3: 7}[level]
    assert {t.status for t in result.tests} == {"pass"}
    assert result.version == ("4.2.3" if fmt == 4 else "3.3.9")


@pytest.mark.parametrize("fmt", [4, 3])
def test_fail_at_level_2_names_the_test_and_gpu(sshd: Sshd, standin: Standin, fmt: int) -> None:
    standin.set_state({"dcgmi": {"mode": "fail_level2", "format": fmt}})
    assert run(sshd, 1).outcome is DiagOutcome.PASS
    result = run(sshd, 2)
    assert result.outcome is DiagOutcome.FAIL and result.fault
    (failed,) = result.failed
    assert failed.category == "Hardware" and failed.failed_gpus == (1,)
    assert failed.name == ("memory" if fmt == 4 else "GPU Memory")
    assert failed.messages[0].startswith("GPU 1: A memory mismatch was detected")
    assert result.detail.startswith(f"dcgmi diag -r 2: failed: {failed.name} on GPU 1 (")
    assert DiagResult.from_json(json.loads(json.dumps(result.to_json()))) == result


def test_not_installed_is_unavailable_not_a_fault(sshd: Sshd, standin: Standin) -> None:
    standin.set_state({"dcgmi": {"mode": "not_installed"}})
    result = run(sshd, 2)
    assert result.outcome is DiagOutcome.UNAVAILABLE and not result.fault
    assert "not installed" in result.detail


def test_host_engine_down_is_an_error_not_a_fault(sshd: Sshd, standin: Standin) -> None:
    standin.set_state({"dcgmi": {"mode": "no_hostengine"}})
    result = run(sshd, 1)
    assert result.outcome is DiagOutcome.ERROR and not result.fault
    assert "Unable to connect to host engine" in result.detail


def test_unreachable_node_is_an_error(sshd: Sshd, standin: Standin) -> None:
    runner = SSHRunner(sshd.ssh(port=1, connect_timeout="2s"), base_dir=Path.cwd())
    result = run_diagnostics(runner, diagnostics_playbook("none"), TARGET, 2)
    assert result.outcome is DiagOutcome.ERROR and not result.fault
    assert standin.calls("dcgmi") == []


def test_a_pools_own_playbook_replaces_the_builtin(
    sshd: Sshd, standin: Standin, tmp_path: Path
) -> None:
    standin.set_state({"dcgmi": {"mode": "fail_level2"}})
    own = tmp_path / "diag.yaml"
    own.write_text(
        "playbooks:\n  diagnostics:\n    steps:\n"
        "      - run: dcgmi diag -r {{ level }} -j || true\n"
    )
    result = run(sshd, 3, diagnostics_playbook("slurm", own))
    assert result.outcome is DiagOutcome.FAIL and len(result.tests) == 7


def test_level_outside_1_to_3_is_refused(sshd: Sshd) -> None:
    with pytest.raises(ValueError, match="level"):
        run(sshd, 4)


@pytest.mark.parametrize(
    ("stdout", "outcome"),
    [
        ("", DiagOutcome.ERROR),
        ("Error: dcgmi diag timed out\n", DiagOutcome.ERROR),
        ('{"something": "else"}', DiagOutcome.ERROR),
        ('{"DCGM Diagnostic": {"test_categories": []}}', DiagOutcome.ERROR),
        (
            'Successfully ran diagnostic for group.\n{"DCGM GPU Diagnostic": {"test_categories": '
            '[{"category": "Deployment", "tests": [{"name": "Denylist", "results": '
            '[{"status": "Pass"}]}]}]}}',
            DiagOutcome.PASS,
        ),
        (
            '{"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": '
            '[{"name": "memory", "results": [{"entity_group": "GPU", "entity_group_id": 1, '
            '"entity_id": 0, "status": "Warn"}, {"entity_group": "GPU", "entity_group_id": 1, '
            '"entity_id": 1, "status": "Skip"}], "test_summary": {"status": "Warn"}}]}]}}',
            DiagOutcome.PASS,
        ),
    ],
)
def test_parser_verdicts(stdout: str, outcome: DiagOutcome) -> None:
    assert parse_dcgmi_diag(stdout, level=1, exit_code=0).outcome is outcome


def test_the_executors_runner_diagnoses_a_pools_node(
    sshd: Sshd, standin: Standin, tmp_path: Path
) -> None:
    import yaml

    from navarch.fleet.load import load_fleet
    from navarch.remote.adapter import SSHPlaybooks

    doc = yaml.safe_load((Path(__file__).resolve().parents[2] / "fleet.example.yaml").read_text())
    doc["pools"]["train"]["ssh"] = sshd.ssh()
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    spec = load_fleet(tmp_path / "fleet.yaml")
    standin.set_state({"dcgmi": {"mode": "fail_level2"}})
    playbooks = SSHPlaybooks(spec)
    result = playbooks.diagnose(spec.pool("train"), "gpu-1", "127.0.0.1", 2, "after reboot")
    assert result.outcome is DiagOutcome.RUNNING
    for _ in range(200):
        result = playbooks.diagnose(spec.pool("train"), "gpu-1", "127.0.0.1", 2, "after reboot")
        if result.outcome is not DiagOutcome.RUNNING:
            break
        time.sleep(0.05)
    assert result.fault and result.failed[0].failed_gpus == (1,)
    bad = SSHPlaybooks(spec)
    spec_pool = spec.pool("train")
    from dataclasses import replace

    broken = replace(spec_pool, playbooks={"diagnostics": "missing.yaml"})
    result = bad.diagnose(broken, "gpu-1", "127.0.0.1", 2, "after reboot")
    assert result.outcome is DiagOutcome.ERROR and "cannot read playbook file" in result.detail


class _Cloud:
    """A provider without diagnostics of its own: the executor goes over SSH."""

    def reboot(self, instances: object) -> None:
        raise AssertionError("diagnostics reboot nothing")


@pytest.mark.parametrize(
    ("mode", "state"),
    [
        ("pass", "pass"),
        ("fail_level2", "fail"),
        ("not_installed", "unavailable"),
    ],
)
def test_the_executor_starts_then_collects_and_records_the_diag(
    sshd: Sshd, standin: Standin, tmp_path: Path, mode: str, state: str
) -> None:
    """DIAGNOSE through the executor: the first run records running (started on the node,
    nothing waited for), a later run the verdict, in the node's Memory."""
    from dataclasses import replace
    from datetime import UTC, datetime, timedelta

    from navarch.planner.model import (
        Action,
        ActionKind,
        ActionReason,
        DiagState,
        DiagWhy,
        Memory,
        NodeMemory,
        Phase,
        Plan,
    )
    from navarch.reconcile.executor import Executor
    from navarch.reconcile.state import AuditLog
    from navarch.stores.file import FileStore
    from tests.planner import builders

    from .test_adapter import fleet

    standin.set_state({"dcgmi": {"mode": mode}, "gate": "go"})
    spec, pool = fleet(tmp_path, sshd.ssh())
    t0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
    clock = [t0]
    node = f"{spec.name}-train-0001"
    inst = replace(
        builders.instance(
            spec.name, "train", node, launched_at=t0, instance_id="i-1", provider=pool.provider
        ),
        address="127.0.0.1",
    )
    memory = Memory(fleet=spec.name).with_node(
        NodeMemory(node=node, pool="train", instance_id="i-1", phase=Phase.REMEDIATING, phase_at=t0)
    )
    action = Action(
        ActionKind.DIAGNOSE,
        "train",
        node,
        "return_requires_diag",
        instance_id="i-1",
        payload=DiagnosePayload(level=2, why=DiagWhy.RETURN),
        action_reason=ActionReason.DIAGNOSTICS,
    )
    executor = Executor(
        spec,
        {pool.provider: _Cloud()},  # type: ignore[dict-item]
        AuditLog(FileStore(tmp_path / "store"), spec.name, "run-1", t0),
        instances={node: inst},
        inventory=(inst,),
        clock=lambda: clock[0],
        run_id="run-1",
        playbooks=SSHPlaybooks(spec),
    )
    memory, (outcome,) = executor.execute(Plan(spec.name, t0, (action,)), memory)
    diag = memory.node(node).diag
    assert outcome.ok and diag.state is DiagState.RUNNING and diag.started_at == t0
    assert diag.why is DiagWhy.RETURN and diag.level == 2
    standin.wait_for_calls("dcgmi", 1)
    (standin.dir / "go").touch()
    for i in range(1, 200):
        clock[0] = t0 + timedelta(minutes=i)
        memory, (outcome,) = executor.execute(Plan(spec.name, clock[0], (action,)), memory)
        diag = memory.node(node).diag
        if diag.state is not DiagState.RUNNING:
            break
        time.sleep(0.05)
    assert diag.state.value == state, diag
    assert diag.started_at == t0  # the run that started it, not the one that collected it
    if state == "fail":
        assert "memory on GPU 1" in diag.detail
    assert standin.calls("dcgmi") == [["diag", "-r", "2", "-j"]]  # started once


@pytest.mark.parametrize(
    ("overrides", "outcome", "words"),
    [
        ({}, DiagOutcome.PASS, "acceptance passed: dcgm_diag, nccl_all_reduce"),
        (
            {"nccl_busbw_gbps": 120},
            DiagOutcome.FAIL,
            "nccl_all_reduce 120 GB/s (threshold 200 GB/s)",
        ),
        ({"nccl_busbw_gbps": "missing"}, DiagOutcome.ERROR, "acceptance no verdict"),
    ],
)
def test_a_pools_acceptance_tests_run_by_the_nodes_agent_in_the_diagnostics_window(
    sshd: Sshd,
    standin: Standin,
    tmp_path: Path,
    overrides: dict[str, object],
    outcome: DiagOutcome,
    words: str,
) -> None:
    """diagnostics.tests: the built-in playbook starts `navarch agent acceptance` detached
    instead of dcgmi, and a later run collects its JSON into a verdict."""
    standin.set_state(
        {
            "navarch": {
                "python": sys.executable,
                "pythonpath": os.pathsep.join(sys.path),
                "config": str(fake_agent_config(tmp_path, overrides, fleet="prod", node="gpu-1")),
            }
        }
    )
    runner = SSHRunner(sshd.ssh(), base_dir=Path.cwd())
    playbook = diagnostics_playbook("slurm")
    for _ in range(400):
        result = run_diagnostics(
            runner, playbook, TARGET, 2, tests=("dcgm_diag", "nccl_all_reduce")
        )
        if result.outcome is not DiagOutcome.RUNNING:
            break
        time.sleep(0.05)
    assert result.outcome is outcome, result.detail
    assert words in result.detail
    assert standin.calls("dcgmi") == []
    (call,) = standin.calls("navarch")
    assert call == ["agent", "acceptance", "--tests", "dcgm_diag,nccl_all_reduce", "--level", "2"]

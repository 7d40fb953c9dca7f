"""The ladder's GPU reset: the built-in playbooks/reset_gpu.yaml over a real
sshd with an nvidia-smi stand-in, through SSHPlaybooks (the executor's runner)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from navarch.planner.payloads import RemedyPayload
from navarch.remote.adapter import SSHPlaybooks
from navarch.remote.playbook import PlaybookKind, load_playbook

from .conftest import Sshd, Standin
from .test_adapter import fleet

QUERY = ["--query-compute-apps=pid", "--format=csv,noheader"]


def _marker(sshd: Sshd) -> Path:
    return sshd.state_dir / "agent" / "gpu-reset"


def _reset(
    sshd: Sshd, standin: Standin, tmp_path: Path, nvidia_smi: dict[str, Any]
) -> tuple[bool, str]:
    """Run the built-in reset_gpu playbook on gpu-1 over the real sshd, with the
    nvidia-smi stand-in in the given state -> (ok, detail)."""
    standin.set_state({"nvidia-smi": nvidia_smi})
    spec, pool = fleet(tmp_path, sshd.ssh())
    return SSHPlaybooks(spec).run(pool, "reset_gpu", "gpu-1", "127.0.0.1", "XID 48")


@pytest.mark.parametrize("scheduler", ["none", "slurm", "kubernetes"])
def test_the_builtin_runs_on_the_node_for_every_scheduler(scheduler: str) -> None:
    playbook = load_playbook(scheduler, PlaybookKind.RESET_GPU)
    assert playbook is not None and playbook.source.endswith("reset_gpu.yaml")
    assert [s.host.value for s in playbook.steps] == ["node", "node", "node"]


def test_reset_checks_processes_resets_and_tells_the_agent(
    sshd: Sshd, standin: Standin, tmp_path: Path
) -> None:
    ok, detail = _reset(sshd, standin, tmp_path, {"reset": "ok"})
    assert ok, detail
    assert detail.startswith("reset_gpu ok: 127.0.0.1$ test -z")
    assert "sudo -n -- sh -c 'nvidia-smi -r' -> exit 0" in detail
    assert standin.calls("nvidia-smi") == [QUERY, ["-r"]]
    assert standin.calls("sudo")  # the reset and the marker run as root
    assert _marker(sshd).read_text().strip().isdigit()


def test_gpu_processes_refuse_the_reset(sshd: Sshd, standin: Standin, tmp_path: Path) -> None:
    ok, detail = _reset(sshd, standin, tmp_path, {"processes": [4242]})
    assert not ok
    assert "GPU processes remain: no reset" in detail
    assert standin.calls("nvidia-smi") == [QUERY]  # never reached -r
    assert not _marker(sshd).exists()


def test_a_failed_reset_does_not_tell_the_agent(
    sshd: Sshd, standin: Standin, tmp_path: Path
) -> None:
    ok, detail = _reset(sshd, standin, tmp_path, {"reset": "fails"})
    assert not ok
    assert "exit 255" in detail and "Unable to reset GPU" in detail
    assert standin.calls("nvidia-smi") == [QUERY, ["-r"]]
    assert not _marker(sshd).exists()


class _CloudWithoutReset:
    """A provider with no reset of its own (EC2, GCE, ...): the executor must use the
    playbook, and never reboot or terminate for a reset."""

    def reboot(self, instances: object) -> None:
        raise AssertionError("a reset is no reboot")

    def terminate(self, instances: object) -> None:
        raise AssertionError("a reset terminates nothing")


@pytest.mark.parametrize("procs", [[], [4242]])
def test_the_executor_resets_through_the_playbook(
    sshd: Sshd, standin: Standin, tmp_path: Path, procs: list[int]
) -> None:
    from dataclasses import replace
    from datetime import UTC, datetime

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
    from navarch.reconcile.executor import Executor
    from navarch.reconcile.state import AuditLog
    from navarch.report.health import FaultKey, Remedy
    from navarch.stores.file import FileStore
    from tests.planner import builders

    standin.set_state({"nvidia-smi": {"processes": procs}})
    spec, pool = fleet(tmp_path, sshd.ssh())
    now = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
    node = f"{spec.name}-train-0001"
    inst = builders.instance(
        spec.name, "train", node, launched_at=now, instance_id="i-1", provider=pool.provider
    )
    inst = replace(inst, address="127.0.0.1")
    fault = Fault(FaultKey("xid:48", 0), Remedy.RESET_GPU, "boot-1", 10)
    memory = Memory(fleet=spec.name).with_node(
        NodeMemory(
            node=node,
            pool="train",
            instance_id="i-1",
            phase=Phase.DRAINING,
            phase_at=now,
            fault=fault,
        )
    )
    action = Action(
        ActionKind.RESET_GPU,
        "train",
        node,
        "XID 48, first occurrence",
        instance_id="i-1",
        payload=RemedyPayload(fault=fault, rung=Remedy.RESET_GPU),
        action_reason=ActionReason.REMEDY,
    )
    executor = Executor(
        spec,
        {pool.provider: _CloudWithoutReset()},  # type: ignore[dict-item]
        AuditLog(FileStore(tmp_path / "store"), spec.name, "run-1", now),
        instances={node: inst},
        inventory=(inst,),
        clock=lambda: now,
        run_id="run-1",
        playbooks=SSHPlaybooks(spec),
    )
    memory, (outcome,) = executor.execute(Plan(spec.name, now, (action,)), memory)
    nm = memory.node(node)
    assert nm is not None
    if procs:  # refused on the node: nothing changes, a later run retries
        assert not outcome.ok and "GPU processes remain" in outcome.detail
        assert nm.phase is Phase.DRAINING and nm.rung is None
        return
    assert outcome.ok, outcome.detail
    assert nm.phase is Phase.REMEDIATING and nm.rung is Remedy.RESET_GPU and nm.rung_at == now
    assert nm.rung_fault == "xid:48"
    assert standin.calls("nvidia-smi") == [QUERY, ["-r"]]

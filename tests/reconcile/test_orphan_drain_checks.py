"""A run drains a removed Slurm pool's nodes through the scheduler the pool had: the
playbook runner is opened for it although no declared pool needs one, the cordon and
drain playbooks and the drain check run with the pool's recorded settings, and the drain
check decides when the node is terminated."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from navarch.fleet.load import load_fleet
from navarch.fleet.spec import PoolSpec
from navarch.reconcile.run import Fleet, gather, run_apply
from navarch.remote.adapter import SSHPlaybooks
from tests.support.journal import FLEET, write_fleet

NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


class Scheduler:
    """A playbook runner standing in for Slurm: records (kind, node, pool's scheduler,
    pool's head node); the drain check answers `drained`."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, str, str, str]] = []
        self.drained = False

    def run(
        self, pool: PoolSpec, kind: str, node: str, address: str | None, reason: str
    ) -> tuple[bool, str]:
        self.ran.append((kind, node, pool.scheduler, str(pool.ssh.get("head_node"))))
        return (self.drained if kind == "drain_check" else True), f"{kind} ok"


def _edit(root: Path, change: Callable[[dict[str, Any]], object]) -> None:
    path = root / "fleet.yaml"
    doc = yaml.safe_load(path.read_text())
    change(doc)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def _open(root: Path, scheduler: Scheduler | None = None) -> Fleet:
    fleet = Fleet.open(load_fleet(root / "fleet.yaml"))
    if scheduler is not None:
        fleet.playbooks = scheduler
    return fleet


def test_removed_slurm_pools_node_is_drained_through_slurm(tmp_path: Path) -> None:
    write_fleet(tmp_path, target=2)

    def slurm(doc: dict[str, Any]) -> None:
        doc["pools"]["train"]["scheduler"] = "slurm"
        doc["pools"]["train"]["ssh"] = {"head_node": "slurm-head"}

    _edit(tmp_path, slurm)
    run_apply(_open(tmp_path, Scheduler()), command="apply (test)", clock=lambda: NOW)
    _edit(tmp_path, lambda doc: doc.update(pools={}))

    fleet = _open(tmp_path)
    assert fleet.playbooks is None  # no declared pool has a scheduler
    gather(fleet, NOW)
    assert isinstance(fleet.playbooks, SSHPlaybooks)  # the removed pool's orphans need one

    slurm_head = Scheduler()
    first = run_apply(_open(tmp_path, slurm_head), command="apply (test)", clock=lambda: NOW)
    assert first is not None
    node = f"{FLEET}-train-0001"
    assert [(o.action.kind.value, o.action.node) for o in first.outcomes] == [
        ("cordon", node),
        ("drain", node),
    ]
    assert slurm_head.ran == [
        ("cordon", node, "slurm", "slurm-head"),
        ("drain", node, "slurm", "slurm-head"),
    ]

    slurm_head.ran.clear()
    waiting = run_apply(_open(tmp_path, slurm_head), command="apply (test)", clock=lambda: NOW)
    assert waiting is not None and waiting.outcomes == ()
    assert slurm_head.ran == [("drain_check", node, "slurm", "slurm-head")]

    slurm_head.drained = True
    done = run_apply(_open(tmp_path, slurm_head), command="apply (test)", clock=lambda: NOW)
    assert done is not None
    assert [(o.action.kind.value, o.action.node, o.ok) for o in done.outcomes] == [
        ("terminate", node, True)
    ]

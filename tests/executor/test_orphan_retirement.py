"""The executor retires a removed pool's nodes with the settings navarch recorded while the
pool was declared: its scheduler's playbooks run with them, and the first cordon marks the
pool's retirement as under way (the orphan guard is not asked again)."""

from __future__ import annotations

from pathlib import Path

from navarch.fleet.spec import PoolSpec, Scheduler
from navarch.inventory import Instance
from navarch.planner.context import cordon_then_drain
from navarch.planner.model import (
    Action,
    ActionKind,
    ActionReason,
    Memory,
    NodeMemory,
    Phase,
    PoolMemory,
    PoolSettings,
)
from tests.executor.test_executor import NOW, FakeCloud, execute, spec_of
from tests.planner import builders
from tests.support.journal import FLEET

ORPHAN = f"{FLEET}-infer-0001"
SLURM = PoolSettings(
    scheduler=Scheduler.SLURM,
    ssh=(("head_node", "slurm-head"), ("user", "ops")),
    drain_timeout_s=2700,
    max_unavailable=1,
)


class RecordingPlaybooks:
    """A playbook runner that records the pool each playbook ran for."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, PoolSpec]] = []

    def run(
        self, pool: PoolSpec, kind: str, node: str, address: str | None, reason: str
    ) -> tuple[bool, str]:
        self.ran.append((kind, pool))
        return True, f"{kind} ok"


def orphan_world(settings: PoolSettings | None) -> tuple[dict[str, Instance], Memory]:
    inst = builders.instance(
        FLEET, "infer", ORPHAN, launched_at=NOW, instance_id="i-9", provider="sim"
    )
    memory = Memory(fleet=FLEET).with_node(
        NodeMemory(ORPHAN, "infer", inst.instance_id, first_seen_at=NOW)
    )
    memory = memory.with_pool(PoolMemory("infer", next_index=2, settings=settings))
    return {ORPHAN: inst}, memory


def retire(pool: str = "infer") -> tuple[Action, Action]:
    return cordon_then_drain(
        Action(
            ActionKind.CORDON,
            pool,
            ORPHAN,
            "orphan: pool infer was removed from fleet.yaml; draining before terminate",
            instance_id="i-9",
            action_reason=ActionReason.ORPHAN,
        )
    )


def test_orphan_is_cordoned_and_drained_with_its_removed_pools_scheduler(tmp_path: Path) -> None:
    spec = spec_of(tmp_path)  # declares pool train only: infer was removed
    instances, memory = orphan_world(SLURM)
    playbooks = RecordingPlaybooks()
    memory, outcomes = execute(
        tmp_path, spec, FakeCloud(), instances, memory, *retire(), playbooks=playbooks
    )
    assert all(o.ok for o in outcomes.values())
    assert [kind for kind, _ in playbooks.ran] == ["cordon", "drain"]
    pool = playbooks.ran[0][1]
    assert (pool.name, pool.scheduler, pool.ssh["head_node"]) == ("infer", "slurm", "slurm-head")
    assert pool.health.drain_timeout_s == 2700
    nm = memory.node(ORPHAN)
    assert nm is not None and nm.phase is Phase.DRAINING
    assert memory.pool("infer").retiring_since == NOW


def test_orphan_of_a_pool_with_unknown_settings_is_drained_in_navarch(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, scheduler="slurm")  # the declared pool's scheduler is not used
    instances, memory = orphan_world(None)
    playbooks = RecordingPlaybooks()
    memory, outcomes = execute(
        tmp_path, spec, FakeCloud(), instances, memory, *retire(), playbooks=playbooks
    )
    assert [o.detail for o in outcomes.values()] == [
        "recorded in navarch (scheduler none)",
        "recorded in navarch (scheduler none)",
    ]
    assert playbooks.ran == []
    nm = memory.node(ORPHAN)
    assert nm is not None and nm.phase is Phase.DRAINING

"""The acceptance cordon at the executor's scheduler boundary: the cordon runs the pool's
cordon playbook and records an acceptance NodeMemory.cordon without a phase (the node runs acceptance,
it is not out for a fault); an uncordon that fails leaves the flag, so the next run's plan
uncordons it again; one that succeeds clears it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from navarch.outcome import OutcomeKind
from navarch.planner.model import Action, ActionKind, ActionReason, Cordon, Phase

from .test_executor import FakeCloud, execute, node, spec_of, world


class SchedulerPlaybooks:
    """A playbook runner that records each playbook run and fails the kinds in `failing`
    the way a refused scontrol does (ok False, its output)."""

    def __init__(self, failing: frozenset[str] = frozenset()) -> None:
        self.failing = failing
        self.ran: list[tuple[str, str, str]] = []

    def run(
        self, pool: object, kind: str, node: str, address: str | None, reason: str
    ) -> tuple[bool, str]:
        self.ran.append((kind, node, reason))
        if kind in self.failing:
            return False, f"scontrol update NodeName={node} State=RESUME -> exit 1"
        return True, f"{kind} ok"


def _action(kind: ActionKind, reason: ActionReason) -> Action:
    return Action(kind, "train", node(1), str(reason), instance_id="i-1", action_reason=reason)


def test_an_acceptance_cordon_drains_in_the_scheduler_and_is_remembered_without_a_phase(
    tmp_path: Path,
) -> None:
    instances, memory = world(1)
    runner = SchedulerPlaybooks()
    memory, got = execute(
        tmp_path,
        spec_of(tmp_path, "slurm"),
        FakeCloud(),
        instances,
        memory,
        _action(ActionKind.CORDON, ActionReason.ACCEPTANCE),
        playbooks=runner,
    )
    assert got[(ActionKind.CORDON, node(1))].kind is OutcomeKind.OK
    assert [r[:2] for r in runner.ran] == [("cordon", node(1))]
    nm = memory.node(node(1))
    assert nm.cordon is not None and nm.cordon.acceptance and not nm.cordon.repair
    assert nm.phase is Phase.NONE


def test_an_acceptance_cordon_ends_the_boot_timeout_phase_of_a_late_booting_node(
    tmp_path: Path,
) -> None:
    instances, memory = world(1)
    late = replace(
        memory.node(node(1)),
        phase=Phase.DRAINING,
        phase_reason="no report within boot_timeout (15m)",
        cordon=Cordon(ActionReason.BOOT_TIMEOUT, repair=True),
    )
    memory, got = execute(
        tmp_path,
        spec_of(tmp_path, "slurm"),
        FakeCloud(),
        instances,
        memory.with_node(late),
        _action(ActionKind.CORDON, ActionReason.ACCEPTANCE),
        playbooks=SchedulerPlaybooks(),
    )
    assert got[(ActionKind.CORDON, node(1))].kind is OutcomeKind.OK
    nm = memory.node(node(1))
    # Its suite now decides: out of the drain that would have ended in its termination.
    assert nm.cordon is not None and nm.cordon.acceptance
    assert nm.phase is Phase.NONE


def test_a_failed_acceptance_uncordon_keeps_the_flag_so_the_next_run_retries_it(
    tmp_path: Path,
) -> None:
    instances, memory = world(1)
    spec = spec_of(tmp_path, "slurm")
    memory, _ = execute(
        tmp_path,
        spec,
        FakeCloud(),
        instances,
        memory,
        _action(ActionKind.CORDON, ActionReason.ACCEPTANCE),
        playbooks=SchedulerPlaybooks(),
    )
    uncordon = _action(ActionKind.UNCORDON, ActionReason.ACCEPTANCE_PASSED)
    memory, got = execute(
        tmp_path,
        spec,
        FakeCloud(),
        instances,
        memory,
        uncordon,
        playbooks=SchedulerPlaybooks(frozenset({"uncordon"})),
    )
    assert got[(ActionKind.UNCORDON, node(1))].kind is OutcomeKind.TRANSIENT
    assert memory.node(node(1)).cordon.acceptance  # still cordoned: planned again

    memory, got = execute(
        tmp_path, spec, FakeCloud(), instances, memory, uncordon, playbooks=SchedulerPlaybooks()
    )
    assert got[(ActionKind.UNCORDON, node(1))].kind is OutcomeKind.OK
    assert memory.node(node(1)).cordon is None

"""navarch's built-in Slurm playbooks (playbooks/slurm.yaml) against a real Slurm 22.05.

Each playbook runs the way the executor runs it: SSHPlaybooks over a real sshd, the real
`scontrol` on the head node (127.0.0.1), a one-node cluster whose node demo-train-0002
runs real (gated) jobs. The states asserted are what Slurm itself reports:
`scontrol show node` State= and `sinfo %T`.
"""

from __future__ import annotations

from pathlib import Path

from navarch.remote.adapter import SSHPlaybooks
from tests.support.slurm import SlurmCluster
from tests.support.sshd import Sshd

from .conftest import NODE, slurm_fleet

REASON = 'XID 79: GPU has fallen off the bus on 0000:18:00 ("GPU 3"); it\'s gone $(id) `id`\nagain'
#: What Slurm keeps: the reason as sent, its newline folded to a space by the playbook.
SHOWN = f"navarch: {' '.join(REASON.split())}"


def _run(
    sshd: Sshd, tmp_path: Path, kind: str, node: str = NODE, reason: str = REASON
) -> tuple[bool, str]:
    spec = slurm_fleet(tmp_path, sshd)
    return SSHPlaybooks(spec).run(spec.pool("train"), kind, node, "127.0.0.1", reason)


def test_cordon_drains_the_node_with_navarchs_reason_intact(
    slurm: SlurmCluster, slurm_sshd: Sshd, tmp_path: Path
) -> None:
    ok, detail = _run(slurm_sshd, tmp_path, "cordon")
    assert ok, detail
    assert slurm.state() == "IDLE+DRAIN"  # no job: drained at once
    assert slurm.sinfo_state() == "drained"
    assert slurm.reason() == SHOWN  # quotes, spaces, $( ) and ` ` as sent


def test_drain_check_is_not_drained_while_a_job_runs_then_drained_after_it(
    slurm: SlurmCluster, slurm_sshd: Sshd, tmp_path: Path
) -> None:
    gate = tmp_path / "job-may-end"
    job = slurm.submit_gated(gate)
    assert slurm.state() == "MIXED"

    assert _run(slurm_sshd, tmp_path, "cordon")[0]
    assert _run(slurm_sshd, tmp_path, "drain")[0]  # re-asserting DRAIN is accepted
    assert slurm.state() == "MIXED+DRAIN"
    assert slurm.sinfo_state() == "draining"
    assert slurm.jobs() == [(job, "RUNNING")]  # a cordon never stops running work
    ok, detail = _run(slurm_sshd, tmp_path, "drain_check")
    assert not ok and "does not match" in detail, detail

    gate.touch()
    slurm.wait(lambda: not slurm.jobs(), "job end")
    slurm.wait_state("IDLE+DRAIN")
    assert slurm.sinfo_state() == "drained"
    ok, detail = _run(slurm_sshd, tmp_path, "drain_check")
    assert ok, detail


def test_uncordon_resumes_the_node_to_idle(
    slurm: SlurmCluster, slurm_sshd: Sshd, tmp_path: Path
) -> None:
    assert _run(slurm_sshd, tmp_path, "cordon")[0]
    ok, detail = _run(slurm_sshd, tmp_path, "uncordon")
    assert ok, detail
    slurm.wait_state("IDLE")  # IDLE+NOT_RESPONDING until slurmd answers the ping
    assert slurm.sinfo_state() == "idle"
    assert slurm.reason() == ""
    job = slurm.submit_gated(tmp_path / "gate")  # it takes work again
    assert slurm.jobs() == [(job, "RUNNING")]


def test_uncordon_of_a_node_already_in_service_succeeds(
    slurm: SlurmCluster, slurm_sshd: Sshd, tmp_path: Path
) -> None:
    # Someone resumed the node by hand: scontrol refuses RESUME of an IDLE node
    # ("Invalid node state specified"), yet the node is in service, which is all
    # uncordon is for; a failure here would leave navarch retrying forever.
    ok, detail = _run(slurm_sshd, tmp_path, "uncordon")
    assert ok, detail
    assert "State=RESUME -> exit 1" in detail  # refused, and recorded in the audit line
    assert slurm.state() == "IDLE"


def test_a_down_node_drains_at_once_and_resumes(
    slurm: SlurmCluster, slurm_sshd: Sshd, tmp_path: Path
) -> None:
    job = slurm.submit_gated(tmp_path / "gate")
    slurm.run("scontrol", "update", f"NodeName={NODE}", "State=DOWN", "Reason=lost by hand")
    slurm.wait_state("DOWN")
    # Slurm took the job off the DOWN node and requeued it: nothing runs there.
    assert dict(slurm.jobs())[job] == "PENDING"

    ok, detail = _run(slurm_sshd, tmp_path, "cordon")
    assert ok, detail
    assert (slurm.state(), slurm.sinfo_state()) == ("DOWN+DRAIN", "drained")
    assert slurm.reason() == SHOWN
    ok, detail = _run(slurm_sshd, tmp_path, "drain_check")
    assert ok, detail  # no job is left on a DOWN node

    slurm.run("scancel", job)
    ok, detail = _run(slurm_sshd, tmp_path, "uncordon")
    assert ok, detail
    slurm.wait_state("IDLE")


def test_a_node_unknown_to_slurm_fails_every_playbook_clearly(
    slurm: SlurmCluster, slurm_sshd: Sshd, tmp_path: Path
) -> None:
    for kind, message in [
        ("cordon", "Invalid node name specified"),
        ("drain", "Invalid node name specified"),
        ("drain_check", "Node demo-train-0404 not found"),
        ("uncordon", "not found"),
    ]:
        ok, detail = _run(slurm_sshd, tmp_path, kind, node="demo-train-0404")
        assert not ok, (kind, detail)
        assert message in detail and "exit 1" in detail, (kind, detail)
    assert slurm.state() == "IDLE"  # the real node is untouched

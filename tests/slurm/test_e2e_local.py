"""End to end: the `navarch` CLI on the embedded local provider with `scheduler: slurm`
against a real Slurm cluster, reached over a real sshd.

The Slurm node is named after the local node demo-train-0002, so navarch's playbooks
address it by the name the local provider gives the machine. A fatal XID is injected
while a real job runs on the node; each step asserts the state Slurm itself reports.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import run_navarch
from tests.support.slurm import SlurmCluster
from tests.support.sshd import Sshd

from .conftest import NODE, write_slurm_fleet


def navarch(workdir: Path, *args: str) -> str:
    proc = run_navarch(args, cwd=workdir)
    assert proc.returncode == 0, (
        f"navarch {' '.join(args)}: {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    )
    return proc.stdout


def cycle(workdir: Path) -> str:
    """Every node's agent reports once, then one apply; returns the apply's output."""
    navarch(workdir, "local", "tick", "fleet.yaml")
    return navarch(workdir, "apply", "fleet.yaml", "--auto-approve")


def node_status(workdir: Path, node: str) -> dict:
    status = json.loads(navarch(workdir, "status", "fleet.yaml", "--json"))
    return next(n for p in status["pools"] for n in p["nodes"] if n["node"] == node)


@pytest.mark.parametrize(("xid", "remedy"), [("79", "reboot"), ("48", "reset_gpu")])
def test_a_fatal_xid_while_a_job_runs_cordons_waits_for_the_job_remedies_and_resumes(
    slurm: SlurmCluster, slurm_sshd: Sshd, tmp_path: Path, xid: str, remedy: str
) -> None:
    # No surge replacement: every train node that navarch touches is the Slurm node.
    write_slurm_fleet(
        tmp_path,
        slurm_sshd,
        replacement="after-terminate",
        return_after=1,
        remediation=["reset_gpu", "reboot", "replace"],
    )
    navarch(tmp_path, "apply", "fleet.yaml", "--auto-approve")
    cycle(tmp_path)
    instance = node_status(tmp_path, NODE)["instance_id"]
    gate = tmp_path / "job-may-end"
    job = slurm.submit_gated(gate)
    assert (slurm.state(), slurm.sinfo_state()) == ("MIXED", "mixed")

    navarch(tmp_path, "local", "inject", "fleet.yaml", NODE, "--xid", xid)
    out = cycle(tmp_path)  # cordon: DRAIN on the Slurm node, the job runs on
    assert f"~ cordon {NODE}" in out and f"{NODE}: cordon ok" in out, out
    assert (slurm.state(), slurm.sinfo_state()) == ("MIXED+DRAIN", "draining")
    assert slurm.reason().startswith(f"navarch: XID {xid}"), slurm.reason()
    assert slurm.jobs() == [(job, "RUNNING")]

    out = cycle(tmp_path)  # drain_check: MIXED+DRAIN is not drained, so no remedy yet
    assert f"~ {remedy} {NODE}" not in out and f"{NODE}: {remedy}" not in out, out
    assert f"- terminate {NODE}" not in out
    assert slurm.state() == "MIXED+DRAIN" and slurm.jobs() == [(job, "RUNNING")]

    gate.touch()  # the job ends; Slurm shows the node drained
    slurm.wait(lambda: not slurm.jobs(), "job end")
    assert (slurm.wait_state("IDLE+DRAIN"), slurm.sinfo_state()) == ("IDLE+DRAIN", "drained")

    out = cycle(tmp_path)  # drained: the ladder's rung for this XID, in place
    assert f"~ {remedy} {NODE}" in out and f"{NODE}: {remedy} ok" in out, out
    assert f"- terminate {NODE}" not in out
    assert slurm.state() == "IDLE+DRAIN"  # out of service until the node proves healthy
    assert node_status(tmp_path, NODE)["lifecycle"] == "remediating"

    out = cycle(tmp_path)  # healthy after the remedy (return_after 1): uncordon, RESUME
    assert f"~ uncordon {NODE}" in out and f"{NODE}: uncordon ok" in out, out
    assert slurm.wait_state("IDLE") == "IDLE" and slurm.reason() == ""
    status = node_status(tmp_path, NODE)
    assert (status["lifecycle"], status["instance_id"]) == ("healthy", instance)


def test_replace_terminates_only_after_the_job_has_ended(
    slurm: SlurmCluster, slurm_sshd: Sshd, tmp_path: Path
) -> None:
    write_slurm_fleet(tmp_path, slurm_sshd, replacement="after-terminate", remediation=["replace"])
    navarch(tmp_path, "apply", "fleet.yaml", "--auto-approve")
    cycle(tmp_path)
    gate = tmp_path / "job-may-end"
    job = slurm.submit_gated(gate)
    navarch(tmp_path, "local", "inject", "fleet.yaml", NODE, "--xid", "79")
    out = cycle(tmp_path)
    assert f"{NODE}: cordon ok" in out and slurm.state() == "MIXED+DRAIN", out

    out = cycle(tmp_path)  # the job runs on: nothing is terminated
    assert f"- terminate {NODE}" not in out, out
    assert slurm.jobs() == [(job, "RUNNING")]

    gate.touch()
    slurm.wait(lambda: not slurm.jobs(), "job end")
    slurm.wait_state("IDLE+DRAIN")
    out = cycle(tmp_path)
    assert f"- terminate {NODE}" in out and f"{NODE}: terminate ok" in out, out
    # Slurm keeps the gone machine's node drained, with navarch's reason for the operator.
    assert slurm.state() == "IDLE+DRAIN" and slurm.reason().startswith("navarch: XID 79")


def test_a_node_unknown_to_slurm_stays_in_place_with_a_clear_failure(
    slurm: SlurmCluster, slurm_sshd: Sshd, tmp_path: Path
) -> None:
    write_slurm_fleet(tmp_path, slurm_sshd, replacement="after-terminate")
    navarch(tmp_path, "apply", "fleet.yaml", "--auto-approve")
    cycle(tmp_path)
    unknown = "demo-train-0001"  # a machine of the pool that Slurm has never heard of
    navarch(tmp_path, "local", "inject", "fleet.yaml", unknown, "--xid", "79")
    for _ in range(2):  # each run tries the cordon again; nothing else happens to it
        out = run_navarch(["local", "tick", "fleet.yaml"], cwd=tmp_path)
        run = run_navarch(["apply", "fleet.yaml", "--auto-approve"], cwd=tmp_path)
        text = run.stdout + run.stderr
        assert run.returncode == 1 and f"{unknown}: cordon FAILED" in text, text
        assert "slurm_update error: Invalid node name specified" in text
        assert f"- terminate {unknown}" not in text and f"reboot {unknown}" not in text
    assert out.returncode == 0
    assert node_status(tmp_path, unknown)["instance_id"] is not None
    assert slurm.state() == "IDLE"  # the real Slurm node was never touched

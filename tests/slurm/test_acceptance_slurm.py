"""Acceptance against a real Slurm 22.05, through the `navarch` CLI on the local provider: a
node whose acceptance suite is running is drained in Slurm (no job can land on it while
the suite loads its GPUs) and resumed once the suite passed. Each step asserts the state
Slurm itself reports."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.support.slurm import SlurmCluster
from tests.support.sshd import Sshd

from .conftest import NODE, write_slurm_fleet
from .test_e2e_local import navarch, node_status


def test_a_node_in_acceptance_is_drained_in_slurm_until_its_suite_passes(
    slurm: SlurmCluster, slurm_sshd: Sshd, tmp_path: Path
) -> None:
    path = write_slurm_fleet(tmp_path, slurm_sshd)
    doc = yaml.safe_load(path.read_text())
    doc["pools"]["train"]["acceptance"] = {"enabled": True}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    navarch(tmp_path, "apply", "fleet.yaml", "--auto-approve")
    # Each fake tool run takes 30 s of the agent's 60 s tick: the suite spans ticks.
    navarch(tmp_path, "local", "inject", "fleet.yaml", NODE, "--acceptance", "tool_time_s=30")
    navarch(tmp_path, "local", "tick", "fleet.yaml")
    assert node_status(tmp_path, NODE)["lifecycle"] == "acceptance"
    assert slurm.state() == "IDLE"  # slurmd registered: Slurm would give it work

    out = navarch(tmp_path, "apply", "fleet.yaml", "--auto-approve")
    assert f"~ cordon {NODE}" in out and f"{NODE}: cordon ok" in out, out
    assert (slurm.state(), slurm.sinfo_state()) == ("IDLE+DRAIN", "drained")
    assert slurm.reason().startswith("navarch: in acceptance"), slurm.reason()

    for _ in range(5):
        navarch(tmp_path, "local", "tick", "fleet.yaml")
        out = navarch(tmp_path, "apply", "fleet.yaml", "--auto-approve")
        if node_status(tmp_path, NODE)["lifecycle"] != "acceptance":
            break
        assert f"cordon {NODE}" not in out, out  # cordoned once, held while it runs
        assert slurm.state() == "IDLE+DRAIN"
    assert f"~ uncordon {NODE}" in out and f"{NODE}: uncordon ok" in out, out
    assert slurm.wait_state("IDLE") == "IDLE" and slurm.reason() == ""
    assert node_status(tmp_path, NODE)["lifecycle"] == "healthy"
    job = slurm.submit_gated(tmp_path / "gate")  # it takes work again
    assert slurm.jobs() == [(job, "RUNNING")]
    (tmp_path / "gate").touch()

"""End to end on the local provider with `scheduler: slurm`: the `navarch` CLI as a
subprocess reaches the Slurm stand-in on the real sshd for cordon, drain and drain_check."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from tests.support.cli import run_navarch

from .conftest import Sshd, Standin

REPO = Path(__file__).resolve().parents[2]
NODE = "demo-train-0002"


def navarch(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    proc = run_navarch(args, cwd=workdir)
    assert proc.returncode == 0, (
        f"navarch {' '.join(args)}: {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    )
    return proc


def test_xid79_on_a_slurm_pool_is_drained_through_scontrol(
    sshd: Sshd, standin: Standin, tmp_path: Path
) -> None:
    doc = yaml.safe_load((REPO / "fleet.example.yaml").read_text())
    train = doc["pools"]["train"]
    train["scheduler"] = "slurm"
    train["ssh"] = sshd.ssh()
    train["health"]["remediation"] = ["replace"]  # the replace path (the ladder reboots first)
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    nodes = [f"demo-train-000{i}" for i in range(1, 5)]
    world = {
        "slurm": {
            n: {"base": "MIXED", "flags": [], "reason": "", "busy_checks": 1, "style": "flags"}
            for n in nodes
        }
    }
    standin.set_state(world)

    navarch(tmp_path, "apply", "fleet.yaml", "--auto-approve")
    navarch(tmp_path, "local", "tick", "fleet.yaml")
    assert standin.calls() == []  # healthy nodes: nothing runs remotely

    navarch(tmp_path, "local", "inject", "fleet.yaml", NODE, "--xid", "79")
    navarch(tmp_path, "local", "tick", "fleet.yaml")

    # Run 1: cordon (scontrol DRAIN on the head) and drain; the replacement is provisioned.
    run1 = navarch(tmp_path, "apply", "fleet.yaml", "--auto-approve").stdout
    assert f"{NODE}: cordon ok" in run1 and f"{NODE}: drain ok" in run1
    calls = standin.calls("scontrol")
    assert calls[0][:3] == ["update", f"NodeName={NODE}", "State=DRAIN"]
    assert calls[0][3].startswith("Reason=navarch: ") and "79" in calls[0][3]
    assert standin.state()["slurm"][NODE]["flags"] == ["DRAIN"]
    assert "demo-train-0004" in run1

    # Run 2: drain_check sees jobs still running (MIXED+DRAIN): nothing is terminated.
    navarch(tmp_path, "local", "tick", "fleet.yaml")
    run2 = navarch(tmp_path, "apply", "fleet.yaml", "--auto-approve").stdout
    assert f"terminate {NODE}" not in run2
    assert standin.calls("scontrol")[-1] == ["show", "node", NODE]

    # Run 3: the jobs have finished (IDLE+DRAIN): the node is terminated.
    run3 = navarch(tmp_path, "apply", "fleet.yaml", "--auto-approve").stdout
    assert f"- terminate {NODE}" in run3
    shows = [c for c in standin.calls("scontrol") if c[:2] == ["show", "node"]]
    assert shows == [["show", "node", NODE]] * 2

    navarch(tmp_path, "local", "tick", "fleet.yaml")
    status = json.loads(navarch(tmp_path, "status", "fleet.yaml", "--json").stdout)
    train_nodes = next(p for p in status["pools"] if p["pool"] == "train")["nodes"]
    assert sorted(n["node"] for n in train_nodes) == [
        "demo-train-0001",
        "demo-train-0003",
        "demo-train-0004",
    ]
    assert {n["lifecycle"] for n in train_nodes} == {"healthy"}

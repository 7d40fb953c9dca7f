"""`navarch ssh` against a real sshd on 127.0.0.1: the node's address from the local
provider, the pool's user, port, key and known_hosts from fleet.yaml, ssh's exit code."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tests.support.sshd import Sshd

REPO = Path(__file__).resolve().parents[2]


def _navarch(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NAVARCH_")}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-m", "navarch", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_ssh_runs_a_command_on_the_node_and_returns_its_exit_code(
    sshd: Sshd, tmp_path: Path
) -> None:
    shutil.copy(REPO / "fleet.example.yaml", tmp_path / "fleet.yaml")
    doc = yaml.safe_load((tmp_path / "fleet.yaml").read_text())
    doc["pools"]["train"]["ssh"] = sshd.ssh(head_node=None)
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    assert _navarch(tmp_path, "apply", "fleet.yaml", "--auto-approve").returncode == 0

    run = _navarch(tmp_path, "ssh", "fleet.yaml", "demo-train-0001", "--", "echo", "on-the-node")
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "on-the-node"
    run = _navarch(tmp_path, "ssh", "fleet.yaml", "demo-train-0001", "--", "exit", "3")
    assert run.returncode == 3, run.stderr


def test_ssh_refuses_a_host_key_that_does_not_match(sshd: Sshd, tmp_path: Path) -> None:
    shutil.copy(REPO / "fleet.example.yaml", tmp_path / "fleet.yaml")
    doc = yaml.safe_load((tmp_path / "fleet.yaml").read_text())
    doc["pools"]["train"]["ssh"] = sshd.ssh(head_node=None, known_hosts=str(sshd.wrong_known_hosts))
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    assert _navarch(tmp_path, "apply", "fleet.yaml", "--auto-approve").returncode == 0
    run = _navarch(tmp_path, "ssh", "fleet.yaml", "demo-train-0001", "--", "true")
    assert run.returncode == 255 and "HOST IDENTIFICATION HAS CHANGED" in run.stderr, run.stderr

"""SSHPlaybooks: the executor's PlaybookRunner, from a loaded fleet.yaml to (ok, detail)."""

from __future__ import annotations

from pathlib import Path

import yaml

from navarch.fleet.load import load_fleet
from navarch.remote.adapter import SSHPlaybooks

from .conftest import Sshd, Standin

REPO = Path(__file__).resolve().parents[2]


def fleet(tmp_path: Path, ssh: dict, playbooks: dict | None = None):
    doc = yaml.safe_load((REPO / "fleet.example.yaml").read_text())
    train = doc["pools"]["train"]
    train["scheduler"] = "slurm"
    train["ssh"] = ssh
    if playbooks:
        train["playbooks"] = playbooks
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    spec = load_fleet(tmp_path / "fleet.yaml")
    return spec, spec.pool("train")


def test_runs_the_builtin_and_summarizes_each_step(
    sshd: Sshd, standin: Standin, tmp_path: Path
) -> None:
    standin.set_state({"slurm": {"gpu-1": {"base": "MIXED", "flags": [], "reason": ""}}})
    spec, pool = fleet(tmp_path, sshd.ssh())
    runner = SSHPlaybooks(spec)
    ok, detail = runner.run(pool, "cordon", "gpu-1", "127.0.0.1", "xid 79")
    assert ok
    assert detail.startswith("cordon ok: 127.0.0.1$ scontrol update NodeName=gpu-1")
    assert "-> exit 0" in detail
    assert runner.last[("gpu-1", "cordon")].steps[0].exit_code == 0


def test_override_relative_to_fleet_yaml_and_failures_are_data(
    sshd: Sshd, standin: Standin, tmp_path: Path
) -> None:
    standin.set_state({"slurm": {}})
    (tmp_path / "site.yaml").write_text(
        "playbooks:\n  uncordon:\n    steps:\n"
        "      - run: scontrol update NodeName={{ node }} State=RESUME\n        host: head\n"
    )
    spec, pool = fleet(tmp_path, sshd.ssh(), {"uncordon": "site.yaml"})
    runner = SSHPlaybooks(spec)
    ok, detail = runner.run(pool, "uncordon", "gpu-404", None, "back")
    assert not ok
    assert detail.startswith("uncordon failed: 127.0.0.1$ scontrol update NodeName=gpu-404")
    assert "Invalid node name specified" in detail
    assert standin.calls("scontrol") == [["update", "NodeName=gpu-404", "State=RESUME"]]


def test_a_config_mistake_is_a_failed_outcome_not_an_exception(
    sshd: Sshd, standin: Standin, tmp_path: Path
) -> None:
    spec, pool = fleet(tmp_path, sshd.ssh(head_node=None))
    ok, detail = SSHPlaybooks(spec).run(pool, "cordon", "gpu-1", "127.0.0.1", "xid 79")
    assert not ok
    assert "ssh.head_node is not set" in detail
    assert standin.calls() == []

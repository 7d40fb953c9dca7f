"""SSH configuration errors name the pool's real key path (pools.train.ssh.key_file)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from navarch.errors import ConfigError
from navarch.fleet.load import load_fleet
from navarch.remote.adapter import SSHPlaybooks
from navarch.remote.runner import SSHRunner

REPO = Path(__file__).resolve().parents[2]


def test_a_missing_key_file_names_the_pool(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found") as info:
        SSHRunner({"key_file": "keys/train.pem"}, base_dir=tmp_path, pool="train")
    assert info.value.key_path == "pools.train.ssh.key_file"


def test_a_playbook_run_reports_the_pools_key_path(tmp_path: Path) -> None:
    shutil.copy(REPO / "fleet.example.yaml", tmp_path / "fleet.yaml")
    doc = yaml.safe_load((tmp_path / "fleet.yaml").read_text())
    doc["pools"]["train"]["scheduler"] = "slurm"
    doc["pools"]["train"]["ssh"] = {"key_file": "keys/train.pem", "head_node": "127.0.0.1"}
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    spec = load_fleet(tmp_path / "fleet.yaml")
    ok, detail = SSHPlaybooks(spec).run(
        spec.pool("train"), "cordon", "demo-train-0001", "127.0.0.1", "test"
    )
    assert not ok
    assert "pools.train.ssh.key_file" in detail and "<pool>" not in detail, detail

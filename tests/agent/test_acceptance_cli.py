"""`navarch agent acceptance`: the named acceptance tests, now, as one JSON line (what the
diagnostics playbook runs on a cordoned node in a scheduled idle window)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.fake_agent import fake_agent_config

REPO = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "navarch", "agent", "acceptance", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env=dict(os.environ),
    )


def test_the_named_tests_run_at_once_and_print_their_verdicts(tmp_path: Path) -> None:
    cfg = fake_agent_config(tmp_path, {"nccl_busbw_gbps": 120})
    run = _run("--config", str(cfg), "--tests", "nccl_all_reduce,dcgm_diag", "--level", "2")
    assert run.returncode == 0, run.stderr
    results = json.loads(run.stdout)["navarch_acceptance"]
    assert [r["test"] for r in results] == ["nccl_all_reduce", "dcgm_diag"]
    nccl, diag = results
    assert (nccl["status"], nccl["figure"], nccl["threshold"]) == ("fail", 120.0, 200.0)
    assert diag["status"] == "pass" and diag["detail"]["level"] == "2"
    # The acceptance's run of the boot is the agent's alone: this writes no state.
    assert not (tmp_path / "state.json").exists()


def test_an_unknown_test_name_is_one_line_naming_the_tools(tmp_path: Path) -> None:
    run = _run("--config", str(fake_agent_config(tmp_path, {})), "--tests", "nccl,dcgm_diag")
    assert run.returncode == 2
    assert "unknown acceptance test(s) nccl" in run.stderr and "nccl_all_reduce" in run.stderr
    assert "Traceback" not in run.stderr and run.stdout == ""

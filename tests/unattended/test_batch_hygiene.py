"""Batch-job hygiene (issue 12 item 5): JSON logs with the run id on every line and a final
one-line summary, no traceback when stdout is closed early, no colour under NO_COLOR."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.cli import _child_env, run_navarch


def test_json_logs_carry_the_run_id_and_end_with_a_summary(example_dir: Path) -> None:
    run = run_navarch(["apply", "fleet.yaml", "--auto-approve", "--log-format", "json"],
                      cwd=example_dir)
    assert run.returncode == 0, run.stderr
    lines = [json.loads(line) for line in run.stderr.splitlines()]
    assert lines, "no log lines"
    run_ids = {line["run_id"] for line in lines}
    assert len(run_ids) == 1 and run_ids != {""}
    (run_id,) = run_ids
    assert f"(run {run_id})" in run.stdout  # the audit log's run id is the logs' run id
    assert sum(1 for line in lines if line.get("action") == "provision" and line["ok"]) == 5
    summary = lines[-1]
    assert summary["summary"] is True and summary["exit_code"] == 0
    assert summary["actions"] == 5 and summary["failed"] == 0
    assert summary["message"].startswith("apply finished: exit 0")
    audit = list((example_dir / ".navarch/store/events/demo").rglob(f"{run_id}-*.jsonl"))
    assert audit, "no audit chunk carries the run id"


def test_global_log_format_flag_before_the_command(example_dir: Path) -> None:
    run = run_navarch(["--log-format", "json", "apply", "fleet.yaml", "--auto-approve"],
                      cwd=example_dir)
    assert run.returncode == 0, run.stderr
    assert all(json.loads(line)["run_id"] for line in run.stderr.splitlines())


def test_closed_stdout_ends_quietly(example_dir: Path) -> None:
    """`navarch status ... | head -1`: the reader leaves early; no BrokenPipeError traceback."""
    assert run_navarch(["apply", "fleet.yaml", "--auto-approve"], cwd=example_dir).returncode == 0
    for args in (["status", "fleet.yaml"], ["status", "fleet.yaml", "--json"],
                 ["plan", "fleet.yaml"]):
        proc = subprocess.Popen([sys.executable, "-m", "navarch", *args], cwd=example_dir,
                                env=_child_env(None, True), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()  # like `head` exiting before navarch writes
        err = proc.stderr.read().decode()
        proc.wait(timeout=120)
        assert "Traceback" not in err and "BrokenPipeError" not in err, err
        assert proc.returncode == 1


def test_no_color_means_no_escape_sequences(example_dir: Path) -> None:
    for env in ({"NO_COLOR": "1"}, {}):
        run = run_navarch(["apply", "fleet.yaml", "--auto-approve"], cwd=example_dir, env=env)
        assert run.returncode == 0
        assert "\x1b[" not in run.stdout + run.stderr

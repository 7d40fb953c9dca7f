"""Batch-job hygiene: JSON logs with the run id on every line and a final
one-line summary, no traceback when stdout is closed early, no colour under NO_COLOR."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.support.cli import _child_env, run_navarch


def test_json_logs_carry_the_run_id_and_end_with_a_summary(example_dir: Path) -> None:
    run = run_navarch(
        ["apply", "fleet.yaml", "--auto-approve", "--log-format", "json"], cwd=example_dir
    )
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
    run = run_navarch(
        ["--log-format", "json", "apply", "fleet.yaml", "--auto-approve"], cwd=example_dir
    )
    assert run.returncode == 0, run.stderr
    assert all(json.loads(line)["run_id"] for line in run.stderr.splitlines())


def test_closed_stdout_ends_quietly(example_dir: Path) -> None:
    """`navarch status ... | head -1`: the reader leaves early; no BrokenPipeError traceback."""
    assert run_navarch(["apply", "fleet.yaml", "--auto-approve"], cwd=example_dir).returncode == 0
    for args in (
        ["status", "fleet.yaml"],
        ["status", "fleet.yaml", "--json"],
        ["plan", "fleet.yaml"],
    ):
        proc = subprocess.Popen(
            [sys.executable, "-m", "navarch", *args],
            cwd=example_dir,
            env=_child_env(None, True),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
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


def _apply_on_a_terminal(workdir: Path, env: dict[str, str]) -> str:
    """Run apply with stderr on a pseudo-terminal (stdout piped) -> what the terminal got."""
    import os
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "navarch", "apply", "fleet.yaml", "--auto-approve"],
        cwd=workdir,
        env={**_child_env(None, True), "TERM": "xterm-256color", **env},
        stdout=subprocess.PIPE,
        stderr=slave,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    proc.communicate(timeout=120)
    os.close(master)
    assert proc.returncode == 0
    return b"".join(chunks).decode(errors="replace")


def test_progress_on_a_terminal_only_and_colourless_under_no_color(tmp_path: Path) -> None:
    import shutil

    from tests.unattended.helpers import REPO

    colour = re.compile(r"\x1b\[[0-9;]*(3[0-9]|4[0-9]|9[0-7])[0-9;]*m")
    for name, env in (("plain", {}), ("nocolor", {"NO_COLOR": "1"})):
        d = tmp_path / name
        d.mkdir()
        shutil.copy(REPO / "fleet.example.yaml", d / "fleet.yaml")
        seen = _apply_on_a_terminal(d, env)
        assert "applying" in seen, seen  # the progress bar was drawn on the terminal
        if env:
            assert not colour.search(seen), repr(seen[:400])
        else:
            assert colour.search(seen), "the bar has colour unless NO_COLOR is set"

"""Where one line is promised, one line: each of these inputs ends with a single `Error:`
line (no traceback) and exit 1, naming what was wrong and what to do."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from navarch import api
from navarch.errors import ConfigError


def _one_error_line(err: str) -> str:
    assert "Traceback" not in err, err
    (line,) = err.strip().splitlines()
    assert line.startswith("Error: "), line
    return line


def test_navarch_ssh_without_the_ssh_extra_names_the_extra_in_one_line(fleet_dir: Path) -> None:
    # fabric, paramiko and invoke absent: an import of any of them fails as if uninstalled.
    absent = "import sys; sys.modules.update(fabric=None, paramiko=None, invoke=None); "
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            absent + "import runpy; runpy.run_module('navarch', run_name='__main__')",
            "ssh",
            "fleet.yaml",
            "demo-train-0001",
            "--",
            "true",
        ],
        cwd=fleet_dir,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    line = _one_error_line(run.stderr)
    assert "navarch ssh needs navarch[ssh]" in line and "pip install 'navarch[ssh]'" in line


def test_history_since_further_back_than_the_calendar_is_one_line_exit_1(navarch) -> None:
    run = navarch("history", "fleet.yaml", "--since", "99999999d")
    assert run.code == 1, run.out + run.err
    line = _one_error_line(run.err)
    assert "--since '99999999d' reaches back before the year 1" in line


def test_a_fleet_file_that_is_not_utf8_names_the_file_line_and_byte_offset(
    navarch, fleet_dir: Path
) -> None:
    path = fleet_dir / "fleet.yaml"
    text = path.read_bytes()
    at = text.index(b"\n") + 1 + text[text.index(b"\n") + 1 :].index(b"\n") + 1  # line 3
    path.write_bytes(text[:at] + b"# caf\xe9\n" + text[at:])
    expected = f"fleet.yaml:3: not UTF-8 text: byte 0xe9 at byte offset {at + 5}"
    for argv in (
        ("validate", "fleet.yaml"),
        ("plan", "fleet.yaml"),
        ("apply", "fleet.yaml", "--auto-approve"),
        ("status", "fleet.yaml"),
    ):
        run = navarch(*argv)
        assert run.code == 1, (argv, run.out, run.err)
        assert "Traceback" not in run.err and expected in run.err, (argv, run.err)
        assert "save the file as UTF-8" in run.err


def test_api_history_takes_since_as_text_like_the_cli(fleet_dir: Path) -> None:
    fleet = api.load_fleet(fleet_dir / "fleet.yaml")
    now = datetime(2026, 11, 27, 3, 0, tzinfo=UTC)
    doc = api.history(fleet, since="1h", now=now).to_json()
    assert doc["since"] == "2026-11-27T02:00:00Z"
    doc = api.history(fleet, since="2026-11-26T00:00:00Z", now=now).to_json()
    assert doc["since"] == "2026-11-26T00:00:00Z"
    assert api.history(fleet, since=timedelta(hours=2), now=now).to_json()["since"] == (
        "2026-11-27T01:00:00Z"
    )
    with pytest.raises(ConfigError, match="since '1 hour' is neither a duration"):
        api.history(fleet, since="1 hour", now=now)

"""The test suite's own tiers: a CLI run in this process leaves the process as it found it
and answers as `python -m navarch` does, and `-m "not system"` leaves out exactly the tests
that start a daemon."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _process_state() -> tuple[object, ...]:
    navarch_log = logging.getLogger("navarch")
    agent_log = logging.getLogger("navarch.agent")
    return (
        dict(os.environ),
        os.getcwd(),
        sys.stdin,
        sys.stdout,
        sys.stderr,
        list(navarch_log.handlers),
        navarch_log.level,
        list(agent_log.handlers),
        agent_log.level,
        agent_log.propagate,
    )


def test_an_in_process_run_leaves_environment_cwd_streams_and_logging_as_it_found_them(
    navarch,
) -> None:
    before = _process_state()
    run = navarch(
        "apply",
        "fleet.yaml",
        "--auto-approve",
        "--log-format",
        "json",
        env={"NAVARCH_NOW": "2026-11-01T12:00:00Z", "NO_COLOR": "1"},
    )
    assert run.code == 0, run.err
    assert '"run_id"' in run.err  # the JSON log lines were captured, not lost
    assert navarch("agent", "run", "--help").code == 0
    assert _process_state() == before
    assert "NAVARCH_NOW" not in os.environ


def test_in_process_and_subprocess_runs_answer_alike(navarch) -> None:
    for args in (
        ("validate", "fleet.yaml"),
        ("plan", "fleet.yaml", "--no-such-flag"),  # a usage error: argparse's SystemExit
        ("status", "no-such.yaml"),
    ):
        inside, child = navarch(*args), navarch(*args, subprocess=True)
        assert (inside.code, inside.out, inside.err) == (child.code, child.out, child.err), args
    usage = navarch("plan", "fleet.yaml", "--no-such-flag")
    assert usage.code == 1 and "unrecognized arguments: --no-such-flag" in usage.err


def test_not_system_leaves_out_the_tests_on_a_daemon_and_keeps_the_rest() -> None:
    collected = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            # Plugins that neither mark nor deselect a test, left out for the CPU they cost.
            "-p",
            "no:hypothesispytest",
            "-p",
            "no:unraisableexception",
            "--collect-only",
            "-n",
            "0",  # collected here: no workers to start
            "-q",
            "-m",
            "not system",
            "tests/contracts/test_store_contract.py",
            "tests/metrics/test_alert_rules.py",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    ids = [line for line in collected.stdout.splitlines() if "::" in line]
    assert ids, collected.stdout + collected.stderr
    # The store contract on a directory stays; on moto, fake-gcs-server or Azurite it goes.
    assert all("[file_store_url]" in i for i in ids if "test_store_contract" in i), ids
    assert any("test_store_contract" in i for i in ids), ids
    # promtool and Prometheus are system packages: none of those tests stays.
    assert not any("test_alert_rules" in i for i in ids), ids

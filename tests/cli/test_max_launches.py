"""safety.max_launches_per_run: a plan that would launch more nodes than the cap launches
none of them and stops for a human (exit 3) naming the count and `--allow-launches N`;
that flag lets one run proceed."""

from __future__ import annotations

import re
from pathlib import Path


def _machines(fleet_dir: Path) -> list[Path]:
    return sorted((fleet_dir / ".navarch" / "local").glob("*/machines/*"))


def _set(fleet_dir: Path, old: str, new: str) -> None:
    path = fleet_dir / "fleet.yaml"
    text = path.read_text()
    assert text.count(old) == 1
    path.write_text(text.replace(old, new))


def test_a_typo_target_plans_no_launch_and_exits_3_naming_count_and_flag(navarch, fleet_dir):
    _set(
        fleet_dir, "nodes: {min: 2, target: 3, max: 5}", "nodes: {min: 2, target: 2000, max: 2000}"
    )
    run = navarch("plan", "fleet.yaml")
    assert run.code == 3, run.err
    assert "safety.max_launches_per_run (100)" in run.err
    assert "2,002 nodes" in run.err
    assert "--allow-launches 2002" in run.err
    assert "to provision" not in run.out
    assert "Traceback" not in run.err


def test_apply_over_the_cap_launches_nothing_and_exits_3(navarch, fleet_dir):
    _set(fleet_dir, "max_launches_per_run: 100", "max_launches_per_run: 3")
    run = navarch("apply", "fleet.yaml", "--auto-approve")
    assert run.code == 3, run.out + run.err
    assert "the plan would provision 5 nodes" in run.err
    assert "--allow-launches 5" in run.err
    assert _machines(fleet_dir) == []  # the example fleet wants 5: not one launched
    # A second run (a cron) launches nothing either: the guard stops, it does not slow.
    assert navarch("apply", "fleet.yaml", "--auto-approve").code == 3
    assert _machines(fleet_dir) == []


def test_allow_launches_lets_the_run_launch_past_the_cap(navarch, fleet_dir):
    _set(fleet_dir, "max_launches_per_run: 100", "max_launches_per_run: 3")
    short = navarch("apply", "fleet.yaml", "--auto-approve", "--allow-launches", "4")
    assert short.code == 3, short.out + short.err
    assert "--allow-launches 4 allows 4" in short.err
    assert _machines(fleet_dir) == []
    run = navarch("apply", "fleet.yaml", "--auto-approve", "--allow-launches", "5")
    assert run.code == 0, run.out + run.err
    assert re.search(r"Apply complete: 5 succeeded, 0 failed", run.out)
    assert len(_machines(fleet_dir)) == 5


def test_allow_launches_refuses_what_is_not_a_count(navarch, fleet_dir):
    run = navarch("plan", "fleet.yaml", "--allow-launches", "0")
    assert run.code == 1
    assert "--allow-launches" in run.err and "whole number" in run.err

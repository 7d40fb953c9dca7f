"""safety.max_launches_per_run: a plan that would launch more nodes than the cap stops for
a human (exit 3) naming the key, and apply --auto-approve launches no node beyond it."""

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


def test_a_typo_target_stops_the_plan_with_exit_3_naming_the_key(navarch, fleet_dir):
    _set(
        fleet_dir, "nodes: {min: 2, target: 3, max: 5}", "nodes: {min: 2, target: 2000, max: 2000}"
    )
    run = navarch("plan", "fleet.yaml")
    assert run.code == 3, run.err
    assert "safety.max_launches_per_run (100)" in run.err
    assert "2,002 nodes" in run.err or "2002 nodes" in run.err
    assert "Plan: 100 to provision" in run.out
    assert "Traceback" not in run.err


def test_apply_auto_approve_launches_nothing_beyond_max_launches_per_run(navarch, fleet_dir):
    _set(fleet_dir, "max_launches_per_run: 100", "max_launches_per_run: 3")
    run = navarch("apply", "fleet.yaml", "--auto-approve")
    assert run.code == 3, run.out + run.err
    assert "safety.max_launches_per_run" in run.err
    assert len(_machines(fleet_dir)) == 3  # the example fleet wants 5
    assert re.search(r"Apply complete: 3 succeeded, 0 failed", run.out)
    # Raising the key lets the next run finish the launch.
    _set(fleet_dir, "max_launches_per_run: 3", "max_launches_per_run: 100")
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    assert len(_machines(fleet_dir)) == 5

"""`apply --replace NODE` held back by the disruption budget or the repair rate limit
exits 3 and says what holds it and how to proceed (docs/runbook.md#replace-held), where it
used to exit 0 with the node untouched."""

from __future__ import annotations

from pathlib import Path

SICK, ASKED = "demo-train-0001", "demo-train-0002"


def _set(fleet_dir: Path, old: str, new: str) -> None:
    path = fleet_dir / "fleet.yaml"
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))


def _one_repair_under_way(navarch) -> None:
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    navarch.ok("local", "inject", "fleet.yaml", SICK, "--xid", "79")
    navarch.ok("local", "tick", "fleet.yaml")
    first = navarch("apply", "fleet.yaml", "--auto-approve")
    assert f"~ cordon {SICK}" in first.out, first.out + first.err


def test_replace_held_by_the_disruption_budget_exits_3_naming_it(navarch, fleet_dir) -> None:
    _one_repair_under_way(navarch)  # max_unavailable 1: taken by the sick node
    for verb in ("plan", "apply"):
        extra = ("--auto-approve",) if verb == "apply" else ()
        run = navarch(verb, "fleet.yaml", "--replace", ASKED, *extra)
        assert run.code == 3, (verb, run.out, run.err)
        assert f"--replace {ASKED} held by the disruption budget (train)" in run.err, run.err
        assert "max_unavailable 1 reached" in run.err
        assert "health.max_unavailable" in run.err and "docs/runbook.md#replace-held" in run.err
        assert f"~ cordon {ASKED}" not in run.out


def test_replace_held_by_the_repair_rate_limit_exits_3_naming_it(navarch, fleet_dir) -> None:
    _set(fleet_dir, "repairs_per_pool_per_hour: 4", "repairs_per_pool_per_hour: 1")
    _set(fleet_dir, "max_unavailable: 1", "max_unavailable: 2")
    _one_repair_under_way(navarch)
    run = navarch("apply", "fleet.yaml", "--auto-approve", "--replace", ASKED)
    assert run.code == 3, run.out + run.err
    assert f"--replace {ASKED} held by the repair rate limit (train)" in run.err, run.err
    assert "safety.repairs_per_pool_per_hour" in run.err
    assert f"~ cordon {ASKED}" not in run.out


def test_replace_within_budget_still_exits_0(navarch) -> None:
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    run = navarch("apply", "fleet.yaml", "--auto-approve", "--replace", ASKED)
    assert run.code == 0, run.out + run.err
    assert f"~ cordon {ASKED}" in run.out

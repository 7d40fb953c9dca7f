"""Input that would validate and then fail later is one clear error at once: exit 1, the
file, line or flag named, and nothing written (no secret, no store, no machine)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.test_drift import edit_fleet

REPO = Path(__file__).resolve().parents[2]


def _nothing_written(fleet_dir: Path) -> None:
    assert not (fleet_dir / ".navarch").exists(), sorted(fleet_dir.rglob("*"))


@pytest.mark.parametrize(
    ("change", "where"),
    [
        (lambda d: d["providers"]["sim"].update(type="lokal"), "providers.sim.type"),
        (lambda d: d["safety"].update(lock_ttl="0s"), "safety.lock_ttl"),
        (
            lambda d: d["pools"]["train"]["health"].update(stale_after="0s"),
            "pools.train.health.stale_after",
        ),
    ],
    ids=["unknown_provider_type", "zero_lock_ttl", "zero_stale_after"],
)
def test_fleet_that_cannot_run_fails_validate_with_its_line(
    navarch, fleet_dir: Path, change, where: str
) -> None:
    edit_fleet(fleet_dir / "fleet.yaml", change)
    for argv in (("validate", "fleet.yaml"), ("plan", "fleet.yaml")):
        run = navarch(*argv)
        assert run.code == 1, run.out + run.err
        assert "fleet.yaml:" in run.err and where in run.err, run.err
    _nothing_written(fleet_dir)


@pytest.mark.parametrize(
    "argv",
    [
        ("plan", "fleet.yaml", "--pool", "nope"),
        ("apply", "fleet.yaml", "--auto-approve", "--pool", "nope"),
        ("plan", "fleet.yaml", "--replace", "nope"),
        ("apply", "fleet.yaml", "--auto-approve", "--replace", "nope"),
    ],
)
def test_a_flag_naming_no_pool_or_node_is_an_error_not_no_changes(
    navarch, fleet_dir: Path, argv: tuple[str, ...]
) -> None:
    run = navarch(*argv)
    assert run.code == 1, run.out + run.err
    assert f"{argv[-2]} nope" in run.err and "No changes" not in run.out
    _nothing_written(fleet_dir)


def test_replace_of_a_well_formed_absent_node_is_an_error(navarch) -> None:
    run = navarch("plan", "fleet.yaml", "--replace", "demo-train-0042")
    assert run.code == 1 and "--replace demo-train-0042" in run.err


def _saved_plan(navarch, fleet_dir: Path) -> dict:
    navarch.ok("plan", "fleet.yaml", "--out", "plan.json")
    return json.loads((fleet_dir / "plan.json").read_text())


def _machines(fleet_dir: Path) -> list[Path]:
    return sorted((fleet_dir / ".navarch" / "local").glob("*/machines/*"))


def test_a_saved_plan_without_a_reason_is_refused_before_apply(navarch, fleet_dir: Path) -> None:
    doc = _saved_plan(navarch, fleet_dir)
    del doc["actions"][0]["reason"]
    (fleet_dir / "plan.json").write_text(json.dumps(doc))
    run = navarch("apply", "plan.json")
    assert run.code == 1 and "plan.json" in run.err and "reason" in run.err, run.err
    assert "Traceback" not in run.err
    assert _machines(fleet_dir) == []


def test_a_saved_plan_naming_a_foreign_node_launches_nothing(navarch, fleet_dir: Path) -> None:
    doc = _saved_plan(navarch, fleet_dir)
    doc["actions"][0]["node"] = "demo-train-abc"
    (fleet_dir / "plan.json").write_text(json.dumps(doc))
    run = navarch("apply", "plan.json")
    assert run.code == 1 and "demo-train-abc" in run.err and "actions.0.node" in run.err
    assert "Traceback" not in run.err
    assert _machines(fleet_dir) == []


@pytest.mark.parametrize("key", ["reconcile_period", "duration", "agent_period"])
def test_simulate_with_a_zero_period_is_an_error(navarch, tmp_path: Path, key: str) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        f"fleet: {REPO / 'examples' / 'simulate' / 'fleet-100.yaml'}\n"
        f"duration: 1h\nreconcile_period: 5m\nagent_period: 5m\n".replace(
            f"{key}: " + ("1h" if key == "duration" else "5m"), f"{key}: 0s"
        )
    )
    run = navarch("simulate", str(scenario))
    assert run.code == 1, run.out + run.err
    assert "s.yaml" in run.err and key in run.err and "ZeroDivision" not in run.err


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (("--xid", "79", "--gpu", "42"), "--gpu 42"),
        (("--temperature", "-5"), "--temperature -5"),
        (("--utilization", "140"), "--utilization 140"),
    ],
)
def test_local_inject_refuses_values_no_gpu_reports(
    navarch, fleet_dir: Path, flags: tuple[str, ...], named: str
) -> None:
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    before = {p: p.read_bytes() for m in _machines(fleet_dir) for p in m.iterdir() if p.is_file()}
    run = navarch("local", "inject", "fleet.yaml", "demo-train-0001", *flags)
    assert run.code == 1 and named in run.err, run.out + run.err
    after = {p: p.read_bytes() for m in _machines(fleet_dir) for p in m.iterdir() if p.is_file()}
    assert after == before

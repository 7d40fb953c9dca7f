"""Issue 16 items 3, 4, 5 and 13 through the CLI, as a subprocess on the local provider."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

STORE_HEALTH = ".navarch/store/health/demo"


def _at(minutes: int) -> str:
    return (datetime.now(UTC) + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _node(navarch, name: str) -> dict:
    return next(n for n in navarch.nodes() if n["node"] == name)


# -- item 4 --------------------------------------------------------------------------------
def test_16_4_hostile_reports_are_counted_in_status_not_a_traceback(navarch):
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    health = navarch.workdir / STORE_HEALTH / "train"
    (health / "demo-train-0001.json").write_bytes(b"[" * 100_000)
    good = json.loads((health / "demo-train-0002.json").read_text())
    good["checks"] = [{"name": "x", "status": "degraded", "action": "none", "message": "\ud800"}]
    (health / "demo-train-0002.json").write_text(json.dumps(good))  # "\\ud800" escape
    plan = navarch("plan", "fleet.yaml")
    assert plan.code == 0 and "Traceback" not in plan.err, plan.err
    status = navarch.status()
    assert status["rejections"] == {"malformed": 2}
    assert {_node(navarch, n)["rejected"] for n in ("demo-train-0001", "demo-train-0002")} == {
        "malformed"}
    text = navarch.ok("status", "fleet.yaml").out
    assert "Rejected reports (all time): malformed=2" in text


# -- item 5 --------------------------------------------------------------------------------
def test_16_5_node_clock_lagging_11_minutes_is_not_cordoned(navarch):
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    # The agents' clocks run 11 minutes late (the local tick takes its clock from
    # NAVARCH_NOW); the store stamps each object with its own time.
    navarch.ok("local", "tick", "fleet.yaml", env={"NAVARCH_NOW": _at(-11)})
    plan = navarch("plan", "fleet.yaml", "--detailed-exitcode")
    assert plan.code == 0, plan.out + plan.err
    assert "cordon" not in plan.out
    node = _node(navarch, "demo-train-0001")
    assert node["lifecycle"] == "healthy"
    assert "clock skew: node clock 11m" in node["reason"] and "behind" in node["reason"]
    assert -700 < node["clock_skew_s"] < -600
    assert "clock skew" in navarch.ok("status", "fleet.yaml").out


def test_16_5_node_clock_10_minutes_ahead_is_not_rejected_as_future(navarch):
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml", env={"NAVARCH_NOW": _at(10)})
    status = navarch.status()
    assert status["rejections"] == {}
    node = _node(navarch, "demo-train-0002")
    assert node["lifecycle"] == "healthy" and node["rejected"] is None
    assert "ahead of the store's" in node["reason"]
    assert "cordon" not in navarch.ok("plan", "fleet.yaml").out

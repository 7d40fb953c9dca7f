"""`navarch pause` and `navarch resume` end to end on the local provider: while paused,
every apply plans and reports as usual, acts on nothing, says who paused, when and why,
and exits 0 (cron must not page for a pause a person asked for); status shows the pause;
both verbs are in the audit log; resume lets the next run act."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from navarch.fleet.schemas import validator_for

NODE = "demo-train-0002"


def test_a_paused_fleet_plans_and_reports_but_acts_on_nothing_and_says_why(navarch) -> None:
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    navarch.ok("local", "inject", "fleet.yaml", NODE, "--xid", "79")
    navarch.ok("local", "tick", "fleet.yaml")
    out = navarch.ok("pause", "fleet.yaml", "--reason", "driver rollout, INC-1234").out
    assert "Fleet demo paused by " in out and "driver rollout, INC-1234" in out, out

    run = navarch("apply", "fleet.yaml", "--auto-approve")
    assert run.code == 0, run.out + run.err
    assert "Paused: fleet demo was paused by " in run.err, run.err  # beside the plan's text
    assert "driver rollout, INC-1234" in run.out
    assert f"cordon {NODE} held (XID 79" in run.out, run.out  # what it would have done
    assert f"{NODE}: cordon ok" not in run.out
    assert {n["node"]: n["lifecycle"] for n in navarch.nodes("train")}[NODE] == "unhealthy"

    plan = navarch("plan", "fleet.yaml", "--json")
    assert plan.code == 0, plan.err
    doc = json.loads(plan.out)
    validator_for("plan.schema.json").validate(doc)
    assert doc["actions"] == [] and {h["rule"] for h in doc["halts"]} == {"paused"}
    assert navarch("plan", "fleet.yaml", "--detailed-exitcode").code == 2  # held, not converged

    status = navarch.status()
    assert status["paused"]["reason"] == "driver rollout, INC-1234"
    assert "@" in status["paused"]["by"]
    assert "PAUSED by " in navarch.ok("status", "fleet.yaml").out

    assert "resumed by " in navarch.ok("resume", "fleet.yaml").out
    assert navarch.status()["paused"] is None
    navarch.ok("local", "tick", "fleet.yaml")
    acted = navarch.ok("apply", "fleet.yaml", "--auto-approve").out
    assert f"{NODE}: cordon ok" in acted and "paused" not in acted, acted

    history = json.loads(navarch.ok("history", "fleet.yaml", "--json").out)
    verbs = [(e["action"], e["actor"], e["reason"]) for e in history["events"]]
    assert ("pause", "operator", "driver rollout, INC-1234") in verbs
    assert ("resume", "operator", "") in verbs
    who = {e["action"]: (e.get("by") or {}).get("kind") for e in history["events"]}
    assert who["pause"] == who["resume"] == "person", who  # who acted, not only "operator"


def test_pause_takes_the_fleet_lease_and_needs_a_reason(navarch, fleet_dir: Path) -> None:
    from navarch.reconcile.state import acquire_lock
    from navarch.stores.file import FileStore

    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    blank = navarch("pause", "fleet.yaml", "--reason", "  ")
    assert blank.code == 1 and "give a reason" in blank.err, blank.err
    store = FileStore(fleet_dir / ".navarch" / "store")
    acquire_lock(store, "demo", "apply fleet.yaml", 3600, datetime.now(UTC), holder="cron")
    held = navarch("pause", "fleet.yaml", "--reason", "x")
    assert held.code == 4 and "locked" in held.err, held.err
    assert navarch.status()["paused"] is None

"""Removing a pool from fleet.yaml drains its nodes before they are terminated, end to end
on the embedded local provider: the running jobs of a deleted (or renamed) pool are not
killed by the next apply."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml


def _remove_infer(fleet_dir: Path) -> None:
    path = fleet_dir / "fleet.yaml"
    doc = yaml.safe_load(path.read_text())
    del doc["pools"]["infer"]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def _lifecycles(navarch) -> dict[str, str]:
    """node -> lifecycle of every node the plan sees, orphans included."""
    plan = json.loads(navarch.ok("plan", "fleet.yaml", "--json").out)
    return {n["node"]: n["lifecycle"] for n in plan["nodes"]}


def _audit(fleet_dir: Path) -> list[dict[str, Any]]:
    """Every audit record in the store, in time order."""
    records = [
        json.loads(line)
        for chunk in sorted((fleet_dir / ".navarch" / "store" / "events").rglob("*.jsonl"))
        for line in chunk.read_text().splitlines()
        if line.strip()
    ]
    return sorted(records, key=lambda r: r["time"])


def test_removed_pool_node_is_drained_before_it_is_terminated(navarch, fleet_dir: Path) -> None:
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "inject", "fleet.yaml", "demo-infer-0001", "--processes", "2")
    navarch.ok("local", "tick", "fleet.yaml")  # a job runs on demo-infer-0001
    _remove_infer(fleet_dir)

    first = navarch.ok("apply", "fleet.yaml", "--auto-approve").out
    assert "~ cordon demo-infer-0001" in first and "~ drain demo-infer-0001" in first
    assert "pool infer was removed from fleet.yaml; draining before terminate" in first
    assert "terminate demo-infer" not in first
    # max_unavailable 1, remembered from the removed pool: its other node keeps serving.
    assert "cordon demo-infer-0002" not in first
    assert "1 orphan of removed pool infer wait (demo-infer-0002)" in first
    assert _lifecycles(navarch)["demo-infer-0001"] == "draining"
    refused = navarch("uncordon", "fleet.yaml", "demo-infer-0001")
    assert refused.code == 1 and "no longer in fleet.yaml" in refused.err, refused.err

    # Still running its GPU process: the next apply leaves it draining.
    navarch.ok("local", "tick", "fleet.yaml")
    waiting = navarch.ok("apply", "fleet.yaml", "--auto-approve").out
    assert "terminate demo-infer" not in waiting
    assert {o["node"] for o in navarch.status()["orphans"]} == {
        "demo-infer-0001",
        "demo-infer-0002",
    }

    navarch.ok("local", "inject", "fleet.yaml", "demo-infer-0001", "--clear")
    navarch.ok("local", "tick", "fleet.yaml")
    done = navarch.ok("apply", "fleet.yaml", "--auto-approve").out
    assert "- terminate demo-infer-0001" in done and "drain finished" in done
    assert "terminate demo-infer-0002" not in done
    assert "demo-infer-0001" not in {o["node"] for o in navarch.status()["orphans"]}

    done_for = [(r["action"], r["node"]) for r in _audit(fleet_dir) if r["ok"]]
    order = [a for a, n in done_for if n == "demo-infer-0001"]
    assert order == ["provision", "cordon", "drain", "terminate"]
    state = json.loads((fleet_dir / ".navarch" / "store" / "state" / "demo.json").read_text())
    assert state["pools"]["infer"]["settings"]["scheduler"] == "none"
    assert state["pools"]["infer"]["retiring_since"]

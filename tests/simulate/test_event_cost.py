"""The simulator's cost follows events, not ticks: heartbeats that change nothing are
accounted, not built, and a run is executed only when something it reads changed."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from navarch.simulate import node
from navarch.simulate.engine import START, simulate
from navarch.simulate.report import to_json
from navarch.simulate.scenario import load_scenario

HERE = Path(__file__).parent / "scenarios"
SETTLED = HERE / "settled-spares.yaml"  # composed for these tests


def test_a_settled_node_runs_no_agent_check_while_runs_answer_other_nodes_faults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # After the first hour every first-generation node that never failed and never left
    # the spare set is settled: its heartbeats repeat its last report, so the runs that
    # answer the other nodes' faults read them without its agent building one.
    checks: Counter[str] = Counter()
    real = node.SimAgent.run

    def counted(self: node.SimAgent, now: datetime, store: Any) -> dict[str, Any]:
        if (now - START).total_seconds() >= 3600:
            checks[self.config.node] += 1
        return real(self, now, store)

    monkeypatch.setattr(node.SimAgent, "run", counted)
    doc = simulate(load_scenario(SETTLED))
    assert doc["faults"] >= 3 and doc["engine"]["runs_executed"] > 50
    moved = {e["node"] for e in doc["timeline"] if e["kind"] in ("uncordon", "cordon")}
    moved |= {f["node"] for f in doc["fault_list"]}
    settled = [f"sim20-train-{i:04d}" for i in range(1, 21)]
    settled = [n for n in settled if n not in moved]
    assert len(settled) >= 12
    assert {n: checks[n] for n in settled if checks[n]} == {}
    assert doc["engine"]["heartbeats_accounted"] > doc["engine"]["agent_checks"] // 2


def test_spares_and_event_runs_skip_what_changes_nothing_and_give_the_exhaustive_document() -> None:
    # Warm spares, event-started runs, replacements booting: reports that repeat their
    # verdict start no run, and a booting node is waited for until its boot_timeout; the
    # document is the one of the engine that runs every check and every run.
    scenario = load_scenario(SETTLED)
    lazy, full = simulate(scenario), simulate(scenario, lazy=False)
    assert lazy["faults"] >= 3 and lazy["served_by"].get("spare", 0) >= 3
    assert lazy["events"]["runs_started"] > 20
    assert lazy["engine"]["runs_executed"] * 5 < full["engine"]["runs_executed"] * 2
    lazy.pop("engine"), full.pop("engine")
    assert to_json(lazy) == to_json(full)

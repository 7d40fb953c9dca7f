"""navarch simulate: the shipped small scenarios hold, runs are deterministic, the real
planner is what runs (breaking a safety rule is caught), the CLI writes JSON and HTML."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from navarch.cli import main
from navarch.simulate.engine import check_asserts, simulate
from navarch.simulate.report import to_json
from navarch.simulate.scenario import load_scenario
from navarch.simulate.world import World
from navarch.spec import HealthPolicy

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "simulate"
HERE = Path(__file__).parent / "scenarios"
REQUIRED_KEYS = (
    "availability",
    "wrongful_terminations",
    "faults",
    "p50_fault_to_serving_s",
    "p95_fault_to_serving_s",
    "p95_fault_to_cordon_s",
)


def run(path: Path, **overrides: Any) -> dict[str, Any]:
    scenario = dataclasses.replace(load_scenario(path), **overrides)
    doc = simulate(scenario)
    doc["asserts"] = check_asserts(doc, scenario.asserts)
    return doc


def failed(doc: dict[str, Any]) -> list[str]:
    return [a["assert"] for a in doc["asserts"] if not a["ok"]]


def test_steady_state_small_at_the_llama3_rate() -> None:
    doc = run(EXAMPLES / "steady-state-small.yaml")
    assert set(REQUIRED_KEYS) <= set(doc)
    assert 0 < doc["availability"] <= 1
    assert doc["faults"] > 0 and doc["wrongful_terminations"] == 0
    assert doc["p95_fault_to_serving_s"] is not None
    assert failed(doc) == []


def test_store_outage_breaker_holds_and_nothing_is_terminated(
    caplog: pytest.LogCaptureFixture,
) -> None:
    doc = run(EXAMPLES / "store-outage.yaml", duration_s=3 * 86400)
    assert doc["terminations"] == 0 and doc["breaker_runs"] > 0
    assert "circuit breaker holds" in caplog.text
    assert failed(doc) == []


def test_application_xid_storm_causes_nothing() -> None:
    doc = run(EXAMPLES / "app-xid-storm.yaml", duration_s=86400)
    assert doc["terminations"] == 0 and doc["actions"].get("cordon", 0) == 0
    assert failed(doc) == []


def test_zone_stockout_recovers_through_fallback() -> None:
    # h100x8 runs out in both zones from day 1: replacements fall over to a100x8 (safety
    # rule 6), no node is lost to capacity, and the recovery latencies are measured.
    doc = run(EXAMPLES / "zone-stockout.yaml", duration_s=3 * 86400)
    assert doc["instance_hours"].get("a100x8", 0) > 0
    assert doc["nodes_lost_to_capacity"] == 0 and doc["wrongful_terminations"] == 0
    assert doc["p95_fault_to_serving_s"] is not None
    assert doc["max_capacity_recovery_s"] is not None
    assert failed(doc) == []


def test_same_seed_same_bytes() -> None:
    scenario = dataclasses.replace(load_scenario(HERE / "rack.yaml"), duration_s=4 * 3600)
    assert to_json(simulate(scenario)) == to_json(simulate(scenario))


def test_rack_failure_respects_the_disruption_budget() -> None:
    doc = run(HERE / "rack.yaml")
    assert doc["faults"] == 20 and doc["terminations"] >= 5
    assert failed(doc) == []


def test_breaking_the_disruption_budget_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # The planner, not the simulator, enforces the budget: disable it and the scenario's
    # own assertion fails.
    monkeypatch.setattr(HealthPolicy, "max_unavailable_nodes", lambda self, target: 10**6)
    doc = run(HERE / "rack.yaml")
    assert "peak_disrupted <= 5" in failed(doc)


def test_cli_writes_json_and_html_and_exits_1_on_a_failed_assert(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        (HERE / "rack.yaml")
        .read_text()
        .replace("../../../examples/simulate/fleet-100.yaml", str(EXAMPLES / "fleet-100.yaml"))
        .replace("duration: 12h", "duration: 3h")
        .replace("peak_disrupted <= 5", "terminations >= 1000")
    )
    out, html = tmp_path / "out.json", tmp_path / "out.html"
    code = main(["simulate", str(scenario), "--json", str(out), "--html", str(html)])
    assert code == 1
    doc = json.loads(out.read_text())
    assert set(REQUIRED_KEYS) <= set(doc)
    page = html.read_text()
    assert "<svg" in page and "terminations &gt;= 1000" in page
    assert "<script src" not in page and "<link" not in page  # self-contained


def test_compare_runs_two_policies_on_one_seed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The same rack failure under two disruption budgets: --compare runs both on --seed,
    # prints both, and writes {"runs": [a, b]} and one page with both side by side.
    wide_fleet = tmp_path / "fleet-wide.yaml"
    wide_fleet.write_text(
        (EXAMPLES / "fleet-100.yaml")
        .read_text()
        .replace("max_unavailable: 5", "max_unavailable: 20")
        .replace("max_surge: 5", "max_surge: 20")
    )
    rack = (HERE / "rack.yaml").read_text().replace("duration: 12h", "duration: 6h")
    narrow, wide = tmp_path / "narrow.yaml", tmp_path / "wide.yaml"
    narrow.write_text(
        rack.replace("name: rack", "name: narrow").replace(
            "../../../examples/simulate/fleet-100.yaml", str(EXAMPLES / "fleet-100.yaml")
        )
    )
    wide.write_text(
        rack.replace("name: rack", "name: wide").replace(
            "../../../examples/simulate/fleet-100.yaml", str(wide_fleet)
        )
    )
    out, html = tmp_path / "out.json", tmp_path / "out.html"
    code = main(
        [
            "simulate",
            str(narrow),
            "--compare",
            str(wide),
            "--seed",
            "11",
            "--json",
            str(out),
            "--html",
            str(html),
        ]
    )
    assert code == 1  # the wide budget breaks the scenario's `peak_disrupted <= 5`
    a, b = json.loads(out.read_text())["runs"]
    assert (a["scenario"], b["scenario"]) == ("narrow", "wide")
    assert a["seed"] == b["seed"] == 11
    assert set(REQUIRED_KEYS) <= set(a) and set(REQUIRED_KEYS) <= set(b)
    # Same seed, same world: the same rack dies; only the policy's answer differs.
    assert a["faults"] == b["faults"] == 20
    assert a["peak_disrupted"] <= 5 < b["peak_disrupted"]
    assert [x["ok"] for x in a["asserts"]] == [True, True]
    assert "peak_disrupted <= 5" in failed(b)
    printed = capsys.readouterr().out
    assert "scenario narrow (seed 11)" in printed and "scenario wide (seed 11)" in printed
    page = html.read_text()
    assert "narrow (seed 11)" in page and "wide (seed 11)" in page
    assert page.count("<svg") >= 6  # three plots each


def _impair_dead_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cloud lists a host that died impaired at once (World.impair), as EC2's status
    checks list a dead host; the simulator's own model of that delay is not needed here."""
    inject = World.inject

    def inject_and_impair(self: World, n: Any, cause: str) -> None:
        inject(self, n, cause)
        if cause == "host_down":
            self.impair(n)

    monkeypatch.setattr(World, "inject", inject_and_impair)


def test_dead_hosts_the_cloud_lists_impaired_are_cordoned_long_before_offline_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scenario = load_scenario(HERE / "rack.yaml")
    three = (dataclasses.replace(scenario.rack_failures[0], nodes=3),)
    silent = run(HERE / "rack.yaml", duration_s=6 * 3600, rack_failures=three)
    _impair_dead_hosts(monkeypatch)
    seen = run(HERE / "rack.yaml", duration_s=6 * 3600, rack_failures=three)
    # offline_after is 2h in this fleet, counted from the last report (agents every 30m):
    # without the cloud's word a dead host waits at least 1h30m.
    assert silent["p95_fault_to_cordon_s"] >= 90 * 60
    # Seen impaired at the first run after the death, acted on at the next (5m periods).
    assert seen["p95_fault_to_cordon_s"] <= 15 * 60
    assert seen["wrongful_terminations"] == 0 and seen["faults"] == 3

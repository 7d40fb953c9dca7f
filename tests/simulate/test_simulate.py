"""navarch simulate: the shipped small scenarios hold, runs are deterministic, the real
planner is what runs (breaking a safety rule is caught), the CLI writes JSON and HTML."""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path
from typing import Any

import pytest

from navarch.cli import main
from navarch.fleet.spec import HealthPolicy
from navarch.simulate.engine import ServedBy, simulate
from navarch.simulate.report import check_asserts, to_json
from navarch.simulate.scenario import load_scenario

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


def test_steady_state_small_at_the_product_defaults_holds_its_assertions() -> None:
    doc = run(EXAMPLES / "steady-state-small.yaml")
    assert set(REQUIRED_KEYS) <= set(doc)
    assert (doc["agent_period_s"], doc["heartbeat_s"], doc["reconcile_period_s"]) == (30, 300, 60)
    assert 0 < doc["availability"] <= 1
    assert doc["faults"] > 0 and doc["wrongful_terminations"] == 0
    assert doc["p95_fault_to_serving_s"] is not None
    assert failed(doc) == []


def test_store_outage_is_held_by_the_breaker_before_any_node_is_cordoned(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Reports age out spread over the 5-minute heartbeat: the breaker counts the stale
    # ones, so it holds before the first crosses offline_after and nothing is cordoned.
    # No launch that never boots: its boot_timeout cordon is not the outage's. The
    # 100-node, 4-day cut is examples/simulate/store-outage.yaml, in the nightly tier.
    doc = run(HERE / "store-outage-20.yaml", never_boots_rate=0.0)
    assert doc["breaker_runs"] > 0 and "circuit breaker holds" in caplog.text
    assert doc["actions"].get("cordon", 0) == 0 and doc["terminations"] == 0
    assert failed(doc) == []


def test_a_store_outage_terminates_no_node_on_any_seed() -> None:
    # A 20-node fleet, 20 minutes without the store, on more seeds than the test above
    # (launches that never boot included): were a node to pass offline_after before the
    # breaker opens (its last heartbeat fell due the moment the store went dark), its
    # silence is all that says it is sick, so it is never terminated. Seeds 1-8 gave the
    # same answer; three keep the suite fast.
    scenario = load_scenario(HERE / "store-outage-20.yaml")
    for seed in range(2, 5):
        doc = simulate(scenario, seed=seed)
        doc["asserts"] = check_asserts(doc, scenario.asserts)
        assert doc["wrongful_terminations"] == 0, (seed, doc["wrongful_termination_causes"])
        assert failed(doc) == [], seed


def test_application_xid_storm_causes_nothing() -> None:
    doc = run(HERE / "app-xid-storm-20.yaml")
    assert doc["terminations"] == 0 and doc["actions"].get("cordon", 0) == 0
    assert failed(doc) == []


def test_zone_stockout_recovers_through_fallback() -> None:
    # h100x8 runs out in both zones from 30 minutes in: replacements fall over to a100x8
    # (safety rule 6), no node is lost to capacity, and the recovery latencies are measured.
    doc = run(HERE / "zone-stockout-20.yaml")
    assert doc["instance_hours"].get("a100x8", 0) > 0
    assert doc["nodes_lost_to_capacity"] == 0 and doc["wrongful_terminations"] == 0
    assert doc["p95_fault_to_serving_s"] is not None
    assert doc["max_capacity_recovery_s"] is not None
    assert failed(doc) == []


@functools.cache
def _busy_lazy_json() -> str:
    """busy-10.yaml's document from the event-driven engine, run once per process."""
    return to_json(simulate(load_scenario(HERE / "busy-10.yaml")))


def test_same_seed_same_bytes() -> None:
    # Faults, lemons, application XIDs, agent crashes and cut-offs all drawn: a second run
    # on the seed writes the same bytes.
    assert to_json(simulate(load_scenario(HERE / "busy-10.yaml"))) == _busy_lazy_json()


def test_rack_failure_respects_the_disruption_budget() -> None:
    doc = run(HERE / "rack-20.yaml")
    assert doc["faults"] == 6 and doc["terminations"] >= 3
    assert failed(doc) == []


def test_breaking_the_disruption_budget_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # The planner, not the simulator, enforces the budget: disable it and the scenario's
    # own assertion fails.
    monkeypatch.setattr(HealthPolicy, "max_unavailable_nodes", lambda self, target: 10**6)
    doc = run(HERE / "rack-20.yaml")
    assert "peak_disrupted <= 3" in failed(doc)


def test_cli_writes_json_and_html_and_exits_1_on_a_failed_assert(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        (HERE / "rack-20.yaml")
        .read_text()
        .replace("fleet: fleet-20.yaml", f"fleet: {HERE / 'fleet-20.yaml'}")
        .replace("duration: 2h", "duration: 1h")
        .replace("peak_disrupted <= 3", "terminations >= 1000")
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
        (HERE / "fleet-20.yaml")
        .read_text()
        .replace("max_unavailable: 3", "max_unavailable: 10")
        .replace("max_surge: 3", "max_surge: 10")
    )
    rack = (HERE / "rack-20.yaml").read_text().replace("duration: 2h", "duration: 1h")
    narrow, wide = tmp_path / "narrow.yaml", tmp_path / "wide.yaml"
    narrow.write_text(
        rack.replace("name: rack-20", "name: narrow").replace(
            "fleet: fleet-20.yaml", f"fleet: {HERE / 'fleet-20.yaml'}"
        )
    )
    wide.write_text(
        rack.replace("name: rack-20", "name: wide").replace(
            "fleet: fleet-20.yaml", f"fleet: {wide_fleet}"
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
    assert code == 1  # the wide budget breaks the scenario's `peak_disrupted <= 3`
    a, b = json.loads(out.read_text())["runs"]
    assert (a["scenario"], b["scenario"]) == ("narrow", "wide")
    assert a["seed"] == b["seed"] == 11
    assert set(REQUIRED_KEYS) <= set(a) and set(REQUIRED_KEYS) <= set(b)
    # Same seed, same world: the same rack dies; only the policy's answer differs.
    assert a["faults"] == b["faults"] == 6
    assert a["peak_disrupted"] <= 3 < b["peak_disrupted"]
    assert [x["ok"] for x in a["asserts"]] == [True, True]
    assert "peak_disrupted <= 3" in failed(b)
    printed = capsys.readouterr().out
    assert "scenario narrow (seed 11)" in printed and "scenario wide (seed 11)" in printed
    page = html.read_text()
    assert "narrow (seed 11)" in page and "wide (seed 11)" in page
    assert page.count("<svg") >= 6  # three plots each


def test_dead_hosts_are_cordoned_through_the_cloud_status_within_five_minutes() -> None:
    # host-down-20.yaml: five host deaths in 3 hours on 20 nodes (the 100-node, 2-day cut,
    # examples/simulate/host-down.yaml, is the nightly tier's).
    doc = run(HERE / "host-down-20.yaml")
    assert doc["faults"] >= 3 and set(doc["faults_by_cause"]) == {"host_down"}
    # The cloud lists a dead host impaired at its next status check (every minute); the
    # next run (every minute) cordons it: well before offline_after (10m).
    assert doc["max_fault_to_cordon_s"] <= 2 * 60
    assert doc["wrongful_terminations"] == 0 and failed(doc) == []
    # Per fault: cordoned within the same bound, and its capacity back through a replacement
    # or another node standing in; never the dead host itself (no reboot answers it).
    for fault in doc["fault_list"]:
        if fault["t_s"] > doc["duration_s"] - 15 * 60:
            continue  # struck in the run's last minutes
        assert 0 < fault["to_cordon_s"] <= 2 * 60, fault
        assert fault.get("served_by") != ServedBy.ITSELF.value, fault


def test_dead_hosts_the_cloud_never_lists_wait_for_offline_after() -> None:
    doc = run(HERE / "host-down-20.yaml", impair_min_s=86400, impair_max_s=86400)
    # Without the cloud's word only offline_after (10m since the last report) catches them.
    assert doc["faults"] >= 3
    assert min(doc["fault_to_cordon_s"]) >= 5 * 60
    assert doc["max_fault_to_cordon_s"] > 10 * 60 - 5 * 60


def test_the_event_driven_engine_gives_the_exhaustive_document() -> None:
    # Every agent check of every node and every reconcile tick, against the engine that
    # skips quiescent checks, unread heartbeats and the ticks of a clean world: the same
    # document, only the engine's own counts differ.
    scenario = load_scenario(HERE / "busy-10.yaml")
    lazy, full = json.loads(_busy_lazy_json()), simulate(scenario, lazy=False)
    assert lazy["faults"] >= 4 and lazy["actions"].get("reboot", 0) >= 1
    assert "host_down" in lazy["faults_by_cause"]
    assert lazy["engine"]["agent_checks"] * 5 < full["engine"]["agent_checks"]
    assert lazy["engine"]["runs_executed"] * 3 < full["engine"]["runs_executed"] * 2
    lazy.pop("engine"), full.pop("engine")
    assert to_json(lazy) == to_json(full)


def test_the_event_driven_engine_skips_the_ticks_of_a_pool_holding_its_spares_exactly() -> None:
    # busy-10.yaml with two warm spares: a pool holding its declared spares is at rest, so
    # ticks are skipped as without spares, and the document is the exhaustive engine's.
    scenario = load_scenario(HERE / "busy-spares-10.yaml")
    lazy, full = simulate(scenario), simulate(scenario, lazy=False)
    assert lazy["faults"] >= 3 and lazy["served_by"].get("spare", 0) >= 1
    assert lazy["spare_instance_hours"] > 0
    assert lazy["engine"]["runs_executed"] * 3 < full["engine"]["runs_executed"] * 2
    lazy.pop("engine"), full.pop("engine")
    assert to_json(lazy) == to_json(full)


def test_an_agent_back_from_a_crash_writes_its_heartbeats_again_in_the_event_driven_engine() -> (
    None
):
    # Seed 4: a node's agent crashes, a job ending during the crash wakes its checks, and
    # the node is drained later; its heartbeat after the drain is what ends the drain. The
    # event-driven engine once kept the crash's start and never wrote that heartbeat, so the
    # drained node was never terminated (the exhaustive engine terminates it at 7,260 s).
    scenario = dataclasses.replace(load_scenario(HERE / "busy-spares-10.yaml"), seed=4)
    lazy, full = simulate(scenario), simulate(scenario, lazy=False)
    assert any(e["kind"] == "terminate" for e in full["timeline"])
    lazy.pop("engine"), full.pop("engine")
    assert to_json(lazy) == to_json(full)


def test_two_policies_on_one_seed_face_the_same_faults(tmp_path: Path) -> None:
    # Common random numbers: the fault schedule comes from streams of its own, so a
    # reboot-first ladder and replace-only see the same faults on the same initial nodes
    # while both keep them (a reboot's cure draw cannot reshuffle later faults; a node the
    # ladder rebooted goes on faulting, where replace-only terminated it).
    replace_only = tmp_path / "fleet-10-replace.yaml"
    replace_only.write_text(
        (HERE / "fleet-10.yaml")
        .read_text()
        .replace(
            "      auto_replace: true", "      auto_replace: true\n      remediation: [replace]"
        )
    )
    scenario = load_scenario(HERE / "busy-10.yaml")
    reboot_first = json.loads(_busy_lazy_json())
    replacing = simulate(dataclasses.replace(scenario, fleet_path=replace_only))
    assert reboot_first["actions"].get("reboot", 0) >= 1
    assert replacing["actions"].get("reboot", 0) == 0
    initial = {f"sim10-train-{i:04d}" for i in range(1, 11)}

    def on_initial(doc: dict[str, Any]) -> list[tuple[str, str, float]]:
        # what struck, where and when; what answered it differs by policy
        return [
            (f["node"], f["cause"], f["t_s"]) for f in doc["fault_list"] if f["node"] in initial
        ]

    def first(faults: list[tuple[str, str, float]]) -> dict[str, tuple[str, str, float]]:
        return {f[0]: f for f in reversed(faults)}

    kept, replaced = on_initial(reboot_first), on_initial(replacing)
    assert first(kept) == first(replaced) != {}
    assert set(replaced) <= set(kept)


def test_fault_to_serving_is_measured_when_the_replacement_names_nothing(tmp_path: Path) -> None:
    # With replacement: after-terminate the provision after a terminate does not name the
    # node it replaces: the tally matches terminated faulty nodes to the pool's next
    # provisions first in, first out, so every fault still gets its fault -> serving.
    fleet = tmp_path / "fleet-20-after-terminate.yaml"
    fleet.write_text(
        (HERE / "fleet-20.yaml")
        .read_text()
        .replace("replacement: surge", "replacement: after-terminate")
    )
    scenario = dataclasses.replace(load_scenario(HERE / "busy.yaml"), fleet_path=fleet)
    doc = simulate(scenario)
    assert doc["actions"].get("terminate", 0) >= 3
    assert doc["faults_open_at_end"] == 0
    assert len(doc["fault_to_serving_s"]) == doc["faults"] >= 4


@pytest.mark.slow
@pytest.mark.parametrize("name", ["busy.yaml", "busy-spares.yaml"])
def test_the_event_driven_engine_gives_the_exhaustive_document_at_length(name: str) -> None:
    # The 20-node, 8-hour cuts of busy-10.yaml and busy-spares-10.yaml (the normal suite's):
    # more faults of every kind, and longer quiet spells between them, for the nightly tier.
    scenario = load_scenario(HERE / name)
    lazy, full = simulate(scenario), simulate(scenario, lazy=False)
    assert lazy["faults"] >= 4
    assert lazy["engine"]["runs_executed"] * 3 < full["engine"]["runs_executed"] * 2
    lazy.pop("engine"), full.pop("engine")
    assert to_json(lazy) == to_json(full)

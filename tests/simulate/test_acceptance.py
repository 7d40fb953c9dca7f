"""The simulator's acceptance model: machines that arrive with a fault only the suite
sees (doa_rate), the suite's time on the simulated clock, and the figures it reports."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from navarch.simulate.engine import simulate
from navarch.simulate.report import check_asserts, to_json
from navarch.simulate.scenario import load_scenario

HERE = Path(__file__).parent / "scenarios"
DOA = HERE / "doa.yaml"


def run(path: Path, pool: dict[str, Any] | None = None, **overrides: Any) -> dict[str, Any]:
    scenario = load_scenario(path)
    if pool is not None:
        overrides["pool_overrides"] = pool
    return simulate(dataclasses.replace(scenario, **overrides))


def without_acceptance(path: Path) -> dict[str, Any]:
    pool = {k: v for k, v in load_scenario(path).pool_overrides.items() if k != "acceptance"}
    return run(path, pool=pool)


def test_with_acceptance_no_faulty_node_serves_and_without_it_they_do_on_the_same_seed() -> None:
    on, off = run(DOA), without_acceptance(DOA)
    assert on["latent_faults"] >= 2 and off["latent_faults"] >= 2
    assert on["served_faulty_nodes"] == 0
    assert off["served_faulty_nodes"] > 0 and off["dead_on_arrival"] == 0
    assert on["wrongful_terminations"] == 0
    # The same machines arrive with the same faults until the runs part ways: the first
    # launch is common to both.
    assert set(on["latent_faults_by_kind"]) & set(off["latent_faults_by_kind"])


def test_a_dead_on_arrival_node_is_replaced_and_counted_dead_on_arrival() -> None:
    doc = run(DOA)
    # Every node with a latent fault failed its acceptance and was replaced; no healthy one.
    assert doc["dead_on_arrival"] == doc["latent_faults"] >= 2
    assert doc["dead_on_arrival_without_latent_fault"] == 0
    terminated = {e["node"] for e in doc["timeline"] if e["kind"] == "terminate"}
    provisions = sum(1 for e in doc["timeline"] if e["kind"] == "provision")
    assert doc["actions"].get("terminate", 0) >= doc["dead_on_arrival"]
    assert len(terminated) >= doc["dead_on_arrival"]
    assert provisions >= doc["target_nodes"] + doc["dead_on_arrival"]
    assert doc["availability"] > 0.99


def test_the_suite_takes_its_tools_time_on_the_simulated_clock() -> None:
    # The quick suite's tools take about two minutes (dcgmi diag -r 1 30 s, three
    # nvbandwidth testcases 30 s, all_reduce_perf 60 s): a node serves no sooner.
    quick = run(DOA)
    assert quick["acceptance_runs"] >= quick["target_nodes"]
    assert 120 <= quick["p50_acceptance_s"] <= 300
    # dcgmi diag level 3 alone takes about 15 minutes: past the default 10-minute tool
    # timeout it is killed and unknown, so the deep suite needs a longer one.
    deep_pool = dict(load_scenario(DOA).pool_overrides)
    deep_pool["acceptance"] = {**deep_pool["acceptance"], "depth": "deep", "timeout": "20m"}
    deep = run(DOA, pool=deep_pool, duration_s=2 * 3600)
    assert deep["p50_acceptance_s"] >= 900 + quick["p50_acceptance_s"] - 60
    assert deep["served_faulty_nodes"] == 0


def test_a_scenario_without_doa_rate_has_no_latent_faults_and_reports_the_figures() -> None:
    doc = run(DOA, pool={}, doa_rate=0.0, duration_s=2 * 3600)
    assert (doc["latent_faults"], doc["served_faulty_nodes"], doc["dead_on_arrival"]) == (0, 0, 0)
    assert doc["p95_acceptance_s"] is None
    checks = check_asserts(doc, ("served_faulty_nodes == 0", "p95_acceptance <= 5m"))
    assert all(c["ok"] for c in checks)


def test_the_event_driven_engine_gives_the_exhaustive_document_with_acceptance_runs() -> None:
    # Reports that land when the tools are done, and checks that wait for them, must not
    # change what the lazy engine skips.
    scenario = dataclasses.replace(load_scenario(DOA), duration_s=45 * 60)
    lazy, full = simulate(scenario), simulate(scenario, lazy=False)
    assert lazy["acceptance_runs"] >= lazy["target_nodes"]
    # A node whose suite has finished on this boot runs no tool again: its heartbeats are
    # accounted, not checked (they were all checked while any tool was on the machine).
    assert lazy["engine"]["heartbeats_accounted"] > 0
    assert lazy["engine"]["agent_checks"] < full["engine"]["agent_checks"]
    lazy.pop("engine"), full.pop("engine")
    assert to_json(lazy) == to_json(full)


def test_an_arriving_machine_carries_hardware_faults_never_the_images_driver() -> None:
    # A driver other than the pool's is a finding about the image, held for a person by
    # the planner; drawn for one machine in 33 it held that node in acceptance for good and
    # the spare set never refilled (seed 901, 100 nodes with spares and acceptance).
    import random

    from navarch.simulate.acceptance import draw_latent

    rng = random.Random("latent")
    kinds = {draw_latent(rng, 1.0) for _ in range(400)}
    assert kinds == {"dcgm_diag", "nccl_half", "pcie_x8"}

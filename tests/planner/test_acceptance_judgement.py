"""Acceptance judged on imperfect input (navarch.planner.acceptance through observe and plan): one
node's figure never sets another's bar, a figure above the GPU's published ceiling counts
for nothing, a baseline that new nodes keep failing is suspected, and a finding about the
image (a setting DCGM names, version drift, a declared version no node has) holds acceptance
replacements instead of replacing node after node."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from navarch.agent.acceptance_tools.host import ToolOutput
from navarch.agent.acceptance_tools.suite import run_dcgm_diag
from navarch.notify.events import EventKind, plan_conditions
from navarch.planner.acceptance import choose_peer
from navarch.planner.model import Acceptance, ActionKind, ActionReason, HaltRule, Lifecycle, Memory
from navarch.planner.observe import observe
from navarch.planner.plan import plan
from navarch.report.acceptance import (
    AcceptancePolicy,
    AcceptanceResult,
    AcceptanceRun,
    AcceptanceStatus,
    SuiteDepth,
)
from navarch.report.timefmt import ts
from tests.agent.test_acceptance_suite import ScriptedHost
from tests.planner.builders import (
    BASE_NOW,
    fleet_doc,
    fleet_from_dict,
    instance,
    memory,
    observation,
    pool_doc,
    summary,
)

NOW = BASE_NOW
PASS, FAIL = AcceptanceStatus.PASS, AcceptanceStatus.FAIL
P5 = "p5.48xlarge"  # 8x H100 SXM: NVLink 4, 900 GB/s per GPU
FIXTURES = Path(__file__).parents[1] / "fixtures" / "acceptance"


def _spec(target: int, acceptance: dict[str, Any] | None = None, scheduler: str = "none"):
    pool = pool_doc(target=target, max_nodes=8, instance_types=(P5,), scheduler=scheduler)
    if scheduler == "slurm":
        pool["ssh"] = {"user": "ops", "head_node": "head.example"}
    pool["acceptance"] = {"enabled": True, **(acceptance or {})}
    return fleet_from_dict(fleet_doc("f", {"p": pool}))


def _run(busbw: float = 480.0, *extra: AcceptanceResult, driver: str = "550.54.15"):
    results = (
        AcceptanceResult("gpu_count", PASS, 8, 8, "GPUs"),
        AcceptanceResult("versions", PASS, detail={"driver": driver}),
        AcceptanceResult("nccl_all_reduce", PASS, busbw, None, "GB/s"),
        *extra,
    )
    return AcceptanceRun(
        "boot-1", SuiteDepth.QUICK, ts(NOW - timedelta(seconds=60)), ts(NOW), results=results
    )


def _world(spec, runs: dict[str, AcceptanceRun], mem: Memory | None = None, sequence: int = 5):
    inv, reports = [], {}
    for name, run in runs.items():
        inv.append(
            instance("f", "p", name, launched_at=NOW - timedelta(minutes=10), instance_type=P5)
        )
        s = replace(
            summary(sequence=sequence, generated_at=NOW - timedelta(seconds=10)), acceptance=run
        )
        reports[name] = observation(name, "p", s)
    return observe(spec, inv, reports, mem or memory("f"), NOW)


def _serving(spec, runs: dict[str, AcceptanceRun]):
    """Memory with the nodes of `runs` past acceptance on their boot (they passed with an
    honest 480 GB/s and no peers to be judged by; what they report later is not judged
    again on that boot, as a node that turns hostile once serving)."""
    obs = _world(spec, {n: _run(480.0) for n in runs}, sequence=4)
    assert {v.lifecycle for v in obs.views} == {Lifecycle.HEALTHY}
    return obs.memory


def _view(obs, name: str):
    return next(v for v in obs.views if v.node == name)


def _acted_on(p, node: str) -> set[ActionKind]:
    return {a.kind for a in p.actions if a.node == node}


def test_a_two_node_pool_with_a_peer_claiming_100000_gbps_keeps_its_healthy_replacement():
    spec = _spec(target=3)
    peers = {"f-p-0001": _run(480.0), "f-p-0002": _run(100_000.0)}
    mem = _serving(spec, peers)
    obs = _world(spec, {**peers, "f-p-0003": _run(480.0)}, mem)
    v = _view(obs, "f-p-0003")
    assert (v.lifecycle, v.acceptance) == (Lifecycle.HEALTHY, Acceptance.PASSED)
    p = plan(spec, obs.views, obs.memory, NOW)
    assert not _acted_on(p, "f-p-0003") & {ActionKind.CORDON, ActionKind.TERMINATE}
    assert not [a for a in p.actions if a.action_reason is ActionReason.ACCEPTANCE_FAILED]


def test_one_outlier_among_four_peers_does_not_move_the_pools_baseline():
    # 1700 GB/s is under any GPU's ceiling on an unknown type, so only the MAD band drops it.
    spec = fleet_from_dict(
        fleet_doc("f", {"p": {**pool_doc(target=5, max_nodes=8), "acceptance": {"enabled": True}}})
    )
    peers = {f"f-p-000{i}": _run(b) for i, b in enumerate((470.0, 480.0, 490.0, 1700.0), 1)}
    inv = [instance("f", "p", n, launched_at=NOW - timedelta(minutes=10)) for n in peers]

    def world(runs, mem):
        reports = {
            n: observation(n, "p", replace(summary(sequence=5, generated_at=NOW), acceptance=r))
            for n, r in runs.items()
        }
        more = [instance("f", "p", n, launched_at=NOW) for n in runs if n not in peers]
        return observe(spec, inv + more, reports, mem, NOW)

    first = world(peers, memory("f"))
    obs = world({**peers, "f-p-0005": _run(100.0)}, first.memory)
    v = _view(obs, "f-p-0005")
    assert v.acceptance is Acceptance.FAILED
    # The median of all four would be 485; the outlier left out, the baseline is 480.
    assert "baseline 480 GB/s" in v.reason


def test_an_implausible_figure_reads_unknown_and_flags_the_node_that_reported_it():
    spec = _spec(target=5)
    peers = {f"f-p-000{i}": _run(480.0) for i in (1, 2, 3)}
    peers["f-p-0004"] = _run(100_000.0)
    mem = _serving(spec, peers)
    obs = _world(spec, {**peers, "f-p-0005": _run(100_000.0)}, mem)
    new = _view(obs, "f-p-0005")
    assert (new.lifecycle, new.acceptance) == (Lifecycle.ACCEPTANCE, Acceptance.RUNNING)
    assert "above the published ceiling 900 GB/s" in new.reason and "(unknown)" in new.reason
    flagged = _view(obs, "f-p-0004")
    assert flagged.lifecycle is Lifecycle.HEALTHY and flagged.finding.startswith("flagged:")
    assert "flagged: nccl_all_reduce 100000 GB/s" in flagged.reason
    p = plan(spec, obs.views, obs.memory, NOW)
    assert any(n.startswith("f-p-0004: flagged") for n in p.notes)
    assert not _acted_on(p, "f-p-0005") & {ActionKind.CORDON, ActionKind.TERMINATE}


def test_the_known_good_peer_is_never_chosen_by_a_figure_it_reports_of_itself():
    spec = _spec(4, {"multi_node": True}, scheduler="slurm")
    peers = {"f-p-0001": _run(480.0), "f-p-0002": _run(100_000.0), "f-p-0003": _run(470.0)}
    mem = _serving(spec, peers)
    obs = _world(spec, peers, mem)
    pool = spec.pool("p")
    assert choose_peer(pool, obs.views, "f-p-0004") == "f-p-0001"
    first_gone = [v for v in obs.views if v.node != "f-p-0001"]
    assert choose_peer(pool, first_gone, "f-p-0004") == "f-p-0003"  # 0002 flagged: never


def test_three_new_nodes_in_a_row_below_the_same_baseline_halt_acceptance_replacements():
    spec = _spec(target=4)
    # Serving nodes that all claim 800 GB/s (plausible on H100): a baseline healthy 480 GB/s
    # replacements cannot reach.
    peers = {f"f-p-000{i}": _run(800.0) for i in (1, 2, 3)}
    mem = _serving(spec, peers)
    for new in ("f-p-0004", "f-p-0005"):
        obs = _world(spec, {**peers, new: _run(480.0)}, mem)
        assert _view(obs, new).acceptance is Acceptance.FAILED
        mem = obs.memory
    obs = _world(spec, {**peers, "f-p-0006": _run(480.0)}, mem)
    v = _view(obs, "f-p-0006")
    assert (v.lifecycle, v.acceptance) == (Lifecycle.ACCEPTANCE, Acceptance.HELD)
    assert "3 new nodes in a row below the pool's baseline" in v.reason
    p = plan(spec, obs.views, obs.memory, NOW)
    assert not _acted_on(p, "f-p-0006") & {ActionKind.CORDON, ActionKind.TERMINATE}
    (halt,) = [h for h in p.halts if h.rule is HaltRule.ACCEPTANCE_HELD]
    assert "the baseline is suspect" in halt.message and "f-p-0006" in halt.message
    events = plan_conditions(p)
    assert [e.kind for e in events.values()] == [EventKind.ACCEPTANCE_HELD]


def _suite_dcgm_result() -> AcceptanceResult:
    """The agent's dcgm_diag result for the verbatim persistence-mode document."""
    doc = (FIXTURES / "dcgmi_diag_r1_dcgm4_gb10_persistence_verbatim.json").read_text()
    return run_dcgm_diag(AcceptancePolicy(), ScriptedHost({"dcgmi": ToolOutput(226, doc)}))


def test_the_persistence_mode_dcgm_document_is_a_setting_finding_not_a_replacement():
    diag = _suite_dcgm_result()
    assert diag.status is FAIL and diag.detail["finding"] == "setting"
    assert "Persistence mode for GPU 0 is disabled" in diag.reason
    persistence = AcceptanceResult("persistence_mode", FAIL, 0.0, 8.0, "GPUs", reason="off")
    spec = _spec(target=5)
    peers = {f"f-p-000{i}": _run(480.0) for i in (1, 2, 3)}
    mem = _serving(spec, peers)
    new = {n: _run(480.0, diag, persistence) for n in ("f-p-0004", "f-p-0005")}
    obs = _world(spec, {**peers, **new}, mem)
    for name in new:
        v = _view(obs, name)
        assert (v.lifecycle, v.acceptance) == (Lifecycle.ACCEPTANCE, Acceptance.HELD)
        assert "a finding about the image, not the hardware" in v.reason
    p = plan(spec, obs.views, obs.memory, NOW)
    for name in new:
        assert not _acted_on(p, name) & {ActionKind.CORDON, ActionKind.TERMINATE}
    assert not [a for a in p.actions if a.fault is not None]  # no strike against a host
    # One finding for the pool, however many nodes it holds.
    (halt,) = [h for h in p.halts if h.rule is HaltRule.ACCEPTANCE_HELD]
    assert "dcgm_diag, persistence_mode" in halt.message
    assert "f-p-0004, f-p-0005" in halt.message


def test_a_declared_driver_no_serving_node_has_halts_acceptance_instead_of_failing_nodes():
    spec = _spec(4, {"versions": {"driver": "560.35.03"}})
    peers = {f"f-p-000{i}": _run(480.0) for i in (1, 2, 3)}
    # The agent holds each node to the declared driver: its own versions test fails.
    drifted = AcceptanceResult(
        "versions",
        FAIL,
        reason="driver 550.54.15 (baseline 560.35.03)",
        detail={"driver": "550.54.15"},
    )
    run = replace(_run(480.0), results=(_run(480.0).results[0], drifted, _run().results[2]))
    obs = _world(spec, {**peers, "f-p-0004": run})
    for v in obs.views:
        assert (v.lifecycle, v.acceptance) == (Lifecycle.ACCEPTANCE, Acceptance.HELD), v.node
    p = plan(spec, obs.views, obs.memory, NOW)
    assert not [a for a in p.actions if a.kind in (ActionKind.CORDON, ActionKind.TERMINATE)]
    (halt,) = [h for h in p.halts if h.rule is HaltRule.ACCEPTANCE_HELD]
    assert "declared acceptance versions (driver 560.35.03) match no serving node" in halt.message

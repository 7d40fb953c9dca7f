"""Acceptance in the planner (navarch.planner.acceptance through observe and plan): a launched or
remedied node is kept out of service until its acceptance run for its boot passed, judged
on its own and against its pool's serving nodes; a failure, or no pass by the deadline,
replaces it; a node that reports no run at all is held and its pool notified."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from navarch.fleet.spec import Scheduler
from navarch.notify.events import EventKind, plan_conditions
from navarch.planner.acceptance import choose_peer
from navarch.planner.model import (
    Acceptance,
    ActionKind,
    ActionReason,
    HaltRule,
    Lifecycle,
    Memory,
    PoolMemory,
)
from navarch.planner.observe import observe
from navarch.planner.plan import plan
from navarch.reconcile.codec import memory_from_json, memory_to_json
from navarch.report.acceptance import AcceptanceResult, AcceptanceRun, AcceptanceStatus, SuiteDepth
from navarch.report.timefmt import ts
from tests.planner.builders import (
    BASE_NOW,
    fleet_doc,
    fleet_from_dict,
    instance,
    memory,
    node_memory,
    observation,
    pool_doc,
    summary,
)

NOW = BASE_NOW
PASS, FAIL, UNKNOWN = AcceptanceStatus.PASS, AcceptanceStatus.FAIL, AcceptanceStatus.UNKNOWN


def _spec(acceptance: dict[str, Any] | None = None, target: int = 3, **health: Any):
    pool = pool_doc(target=target, max_nodes=6, health=health or None)
    pool["acceptance"] = {"enabled": True, **(acceptance or {})}
    return fleet_from_dict(fleet_doc("f", {"p": pool}))


def _run(
    boot: str = "boot-1",
    *,
    busbw: float = 240.0,
    driver: str = "550.54.15",
    status: AcceptanceStatus = PASS,
    finished: bool = True,
    started_ago_s: float = 60,
) -> AcceptanceRun:
    results = (
        AcceptanceResult("gpu_count", PASS, 8, 8, "GPUs"),
        AcceptanceResult("versions", PASS, detail={"driver": driver}),
        AcceptanceResult("nccl_all_reduce", status, busbw, None, "GB/s"),
    )
    return AcceptanceRun(
        boot,
        SuiteDepth.QUICK,
        ts(NOW - timedelta(seconds=started_ago_s)),
        ts(NOW) if finished else None,
        results=results,
    )


def _world(
    runs: dict[str, AcceptanceRun | None],
    mem: Memory | None = None,
    spec=None,
    nodes=None,
    launched_ago_min: float = 10,
):
    """Observe nodes f-p-0001.. with the given runs (healthy reports of boot-1)."""
    spec = spec or _spec()
    inv, reports = [], {}
    for name, run in runs.items():
        inv.append(instance("f", "p", name, launched_at=NOW - timedelta(minutes=launched_ago_min)))
        s = replace(summary(sequence=5, generated_at=NOW - timedelta(seconds=10)), acceptance=run)
        reports[name] = observation(name, "p", s)
    obs = observe(spec, inv, reports, mem or memory("f", nodes or ()), NOW)
    return spec, obs


def _view(obs, name: str):
    return next(v for v in obs.views if v.node == name)


def test_a_node_whose_suite_is_still_running_runs_acceptance_counts_against_max_and_does_not_serve():
    spec, obs = _world({"f-p-0001": _run(), "f-p-0002": _run(), "f-p-0003": _run(finished=False)})
    v = _view(obs, "f-p-0003")
    assert v.lifecycle is Lifecycle.ACCEPTANCE and v.acceptance is Acceptance.RUNNING
    p = plan(spec, obs.views, obs.memory, NOW)
    # Counted toward the pool's 3: nothing launched beside it, nothing uncordoned.
    assert not [a for a in p.actions if a.kind in (ActionKind.PROVISION, ActionKind.UNCORDON)]


def test_an_inconclusive_acceptance_is_held_until_the_deadline_then_replaced():
    held = _run(status=UNKNOWN, started_ago_s=600)
    _, obs = _world({"f-p-0001": _run(), "f-p-0002": _run(), "f-p-0003": held})
    assert _view(obs, "f-p-0003").lifecycle is Lifecycle.ACCEPTANCE
    late = _run(status=UNKNOWN, started_ago_s=3600)
    spec, obs = _world({"f-p-0001": _run(), "f-p-0002": _run(), "f-p-0003": late})
    v = _view(obs, "f-p-0003")
    assert (v.lifecycle, v.acceptance) == (Lifecycle.UNHEALTHY, Acceptance.TIMED_OUT)
    assert "acceptance deadline 30m" in v.reason
    p = plan(spec, obs.views, obs.memory, NOW)
    cordon = next(a for a in p.actions if a.kind is ActionKind.CORDON)
    assert (cordon.node, cordon.action_reason) == ("f-p-0003", ActionReason.ACCEPTANCE_TIMEOUT)


def test_a_figure_below_min_fraction_of_the_serving_nodes_baseline_fails_and_is_replaced():
    spec = _spec(target=4)
    # The first nodes pass (no serving peers yet) and are remembered as accepted.
    first_runs = {"f-p-0001": _run(), "f-p-0002": _run(busbw=230.0), "f-p-0003": _run(busbw=235.0)}
    _, first = _world(first_runs, spec=spec)
    assert all(v.lifecycle is Lifecycle.HEALTHY for v in first.views)
    runs = {**first_runs, "f-p-0004": _run(busbw=120.0)}
    _, obs = _world(runs, mem=first.memory, spec=spec)
    v = _view(obs, "f-p-0004")
    assert (v.lifecycle, v.acceptance) == (Lifecycle.UNHEALTHY, Acceptance.FAILED)
    assert "nccl_all_reduce 120 GB/s" in v.reason and "baseline 235 GB/s" in v.reason
    assert "threshold 188 GB/s" in v.reason
    p = plan(spec, obs.views, obs.memory, NOW)
    codes = {(a.kind, a.node): a.action_reason for a in p.actions}
    assert codes[(ActionKind.CORDON, "f-p-0004")] is ActionReason.ACCEPTANCE_FAILED
    assert (ActionKind.PROVISION, "f-p-0005") in codes


def test_a_node_past_acceptance_is_not_judged_again_on_its_boot():
    spec = _spec()
    _, first = _world({"f-p-0001": _run(), "f-p-0002": _run(busbw=100.0)}, spec=spec)
    # 0002 passed while it had no peers; its figure is not held against it later.
    _, obs = _world(
        {"f-p-0001": _run(), "f-p-0002": _run(busbw=100.0)}, mem=first.memory, spec=spec
    )
    assert {v.lifecycle for v in obs.views} == {Lifecycle.HEALTHY}


def test_a_failed_test_on_the_node_fails_acceptance_naming_test_figure_and_threshold():
    bad = replace(
        _run(),
        results=(AcceptanceResult("nccl_all_reduce", FAIL, 120.0, 200.0, "GB/s", reason="slow"),),
    )
    _, obs = _world({"f-p-0001": bad})
    v = _view(obs, "f-p-0001")
    assert v.lifecycle is Lifecycle.UNHEALTHY
    assert "nccl_all_reduce 120 GB/s (threshold 200 GB/s): slow" in v.reason


def test_version_drift_names_the_component_and_the_policy_decides_whether_it_blocks():
    # Drift is the image's, not the node's: blocked means held in acceptance, never replaced.
    for drift, lifecycle in (("block", Lifecycle.ACCEPTANCE), ("warn", Lifecycle.HEALTHY)):
        spec = _spec({"drift": drift})
        _, first = _world({"f-p-0001": _run(), "f-p-0002": _run()}, spec=spec)
        runs = {"f-p-0001": _run(), "f-p-0002": _run(), "f-p-0003": _run(driver="550.54.14")}
        _, obs = _world(runs, mem=first.memory, spec=spec)
        v = _view(obs, "f-p-0003")
        assert v.lifecycle is lifecycle, drift
        assert "drift: driver 550.54.14 (pool 550.54.15, majority of 2 serving nodes)" in v.reason


def test_a_declared_baseline_wins_over_the_majority():
    spec = _spec({"versions": {"driver": "560.0"}})
    _, obs = _world({"f-p-0001": _run()}, spec=spec)
    assert "drift: driver 550.54.15 (pool 560.0, declared)" in _view(obs, "f-p-0001").reason


def test_a_pool_without_acceptance_does_not_acceptance():
    plain = fleet_from_dict(fleet_doc("f", {"p": pool_doc(target=1)}))
    _, obs = _world({"f-p-0001": _run(finished=False)}, spec=plain)
    assert _view(obs, "f-p-0001").lifecycle is Lifecycle.HEALTHY
    assert obs.memory.pool("p").acceptance_since is None


def _asked(ago_min: float = 60, nodes=()) -> Memory:
    """Memory of a pool that has asked for acceptance since `ago_min` minutes before NOW."""
    since = NOW - timedelta(minutes=ago_min)
    return memory("f", nodes, [PoolMemory(pool="p", acceptance_since=since)])


def test_a_node_launched_before_its_pool_asked_for_acceptance_serves_without_a_run():
    # The first run that sees the pool with acceptance records when it asked; the nodes it
    # already had were given no suite, and are not taken out of service for want of one.
    _, obs = _world({"f-p-0001": None})
    assert _view(obs, "f-p-0001").lifecycle is Lifecycle.HEALTHY
    assert obs.memory.pool("p").acceptance_since == NOW
    kept = memory_from_json(memory_to_json(obs.memory))
    assert kept.pool("p").acceptance_since == NOW
    _, later = _world({"f-p-0001": None}, mem=obs.memory, launched_ago_min=5)
    assert _view(later, "f-p-0001").lifecycle is Lifecycle.HEALTHY  # launched 5m before NOW


def test_a_node_of_an_acceptance_pool_whose_reports_carry_no_run_never_serves():
    spec = _slurm_spec(multi_node=False)
    cordoned = node_memory("f-p-0003", "p", acceptance_cordon=True)
    runs = {"f-p-0001": _run(), "f-p-0002": _run(), "f-p-0003": None}
    _, obs = _world(runs, mem=_asked(nodes=[cordoned]), spec=spec)
    v = _view(obs, "f-p-0003")
    assert (v.lifecycle, v.acceptance) == (Lifecycle.ACCEPTANCE, Acceptance.RUNNING)
    assert "waiting for the agent's first acceptance run (10m of deadline 30m)" in v.reason
    p = plan(spec, obs.views, obs.memory, NOW)
    assert not [a for a in p.actions if a.node == "f-p-0003"]  # no uncordon, no replacement
    assert not [a for a in p.actions if a.kind is ActionKind.PROVISION]  # counted toward 3
    assert not p.halts


def test_no_run_past_the_deadline_holds_the_node_replaces_nothing_and_notifies_the_pool():
    runs = {"f-p-0001": _run(), "f-p-0002": _run(), "f-p-0003": None}
    spec, obs = _world(runs, mem=_asked(ago_min=180), launched_ago_min=120)
    v = _view(obs, "f-p-0003")
    assert (v.lifecycle, v.acceptance) == (Lifecycle.ACCEPTANCE, Acceptance.NO_RUN)
    assert "no acceptance run from f-p-0003 by deadline (30m)" in v.reason
    p = plan(spec, obs.views, obs.memory, NOW)
    # A setting of the image, not dead hardware: no cordon, termination or replacement,
    # so no dead-on-arrival count and no strike against the node's host.
    assert not [a for a in p.actions if a.node == "f-p-0003"]
    assert not [a for a in p.actions if a.kind is ActionKind.PROVISION]
    [halt] = p.halts
    assert (halt.pool, halt.rule) == ("p", HaltRule.NO_ACCEPTANCE_RUN)
    assert "the agent config/image lacks acceptance" in halt.message
    [event] = plan_conditions(p).values()
    assert (event.kind, event.pool) == (EventKind.NO_ACCEPTANCE_RUN, "p")
    assert "f-p-0003" in event.message


def test_a_rebooted_node_without_a_run_is_held_not_returned_and_not_replaced():
    held = _remediating(None, mem_pools=True)
    assert not [a for a in held.actions if a.node == "f-p-0001"]
    assert any("first acceptance run" in line for line in held.pending)


def _remediating(run: AcceptanceRun | None, mem_pools: bool = False):
    spec = _spec(target=1, return_after=1)
    nm = node_memory(
        "f-p-0001",
        "p",
        phase="remediating",
        phase_at=NOW - timedelta(minutes=5),
        fault={"key": "xid:79", "action": "reboot", "boot_id": "boot-0"},
        rung="reboot",
        rung_fault="xid",
        rung_at=NOW - timedelta(minutes=5),
        return_streak=1,
    )
    mem = _asked(nodes=[nm]) if mem_pools else None
    _, obs = _world({"f-p-0001": run}, mem=mem, spec=spec, nodes=[nm])
    return plan(spec, obs.views, obs.memory, NOW)


def test_a_rebooted_node_returns_to_service_only_after_its_new_boots_acceptance_passes():
    waiting = _remediating(_run(finished=False))
    assert not [a for a in waiting.actions if a.kind is ActionKind.UNCORDON]
    assert any("acceptance running" in line for line in waiting.pending)
    back = _remediating(_run())
    uncordon = next(a for a in back.actions if a.kind is ActionKind.UNCORDON)
    assert "acceptance passed" in uncordon.reason
    failed = _remediating(_run(status=FAIL))
    term = next(a for a in failed.actions if a.kind is ActionKind.TERMINATE)
    assert term.action_reason is ActionReason.ACCEPTANCE_FAILED


def _slurm_spec(multi_node: bool = True):
    pool = pool_doc(target=3, max_nodes=6, scheduler="slurm")
    pool["ssh"] = {"user": "ops", "head_node": "head.example"}
    pool["acceptance"] = {"enabled": True, "multi_node": multi_node}
    return fleet_from_dict(fleet_doc("f", {"p": pool}))


def test_the_multi_node_peer_is_the_first_proven_serving_node_of_the_pool_by_name():
    spec = _slurm_spec()
    runs = {
        "f-p-0001": _run(busbw=230.0),
        "f-p-0002": _run(busbw=240.0),
        "f-p-0003": _run(busbw=240.0),
    }
    _, first = _world(runs, spec=spec)
    runs["f-p-0004"] = _run(finished=False)
    _, obs = _world(runs, mem=first.memory, spec=spec)
    pool = spec.pool("p")
    assert _view(obs, "f-p-0004").lifecycle is Lifecycle.ACCEPTANCE
    # By name, never by a figure the peer reports of itself; never the node itself or one
    # in acceptance.
    assert choose_peer(pool, obs.views, "f-p-0004") == "f-p-0001"
    assert choose_peer(pool, obs.views, "f-p-0001") == "f-p-0002"
    sick = [
        replace(v, lifecycle=Lifecycle.UNHEALTHY) if v.node == "f-p-0001" else v for v in obs.views
    ]
    assert choose_peer(pool, sick, "f-p-0004") == "f-p-0002"


def test_no_peer_without_multi_node_a_slurm_pool_or_a_proven_node():
    spec = _slurm_spec()
    _, obs = _world({"f-p-0001": _run(), "f-p-0002": _run(finished=False)}, spec=spec)
    pool = spec.pool("p")
    assert choose_peer(pool, obs.views, "f-p-0001") is None  # 0002 is still in acceptance
    assert choose_peer(_slurm_spec(multi_node=False).pool("p"), obs.views, "f-p-0002") is None
    # Scheduler none: nothing can launch the pair. fleet.yaml refuses such a pool when it
    # loads (tests/spec/test_values_that_halt_or_churn.py); the planner holds on its own.
    _, obs = _world({"f-p-0001": _run(), "f-p-0002": _run()}, spec=spec)
    no_slurm = replace(spec.pool("p"), scheduler=Scheduler.NONE)
    assert choose_peer(no_slurm, obs.views, "f-p-0003") is None

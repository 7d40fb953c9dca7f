"""A pool's mode (observe, cordon, full) through plan(): the same decisions, and what the
mode forbids moved to Plan.would, never to the actions the executor runs.

Each test runs observe() and plan() on a pool of three whose first node has XID 79, as
tests/planner/test_remedies.py does, varying only the pool's and the row's mode.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import builders

from navarch.fleet.modes import Mode
from navarch.planner.context import PlanOptions
from navarch.planner.model import ActionKind, HaltRule, Pause, Plan
from navarch.planner.observe import observe
from navarch.planner.plan import plan

FLEET = "md"
NODE = f"{FLEET}-train-0001"
OTHER = f"{FLEET}-train-0002"
NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def _plan(
    mode: str | None,
    health: dict[str, Any] | None = None,
    *,
    phase: str = "",
    sick: tuple[tuple[str, str], ...] = ((NODE, "xid:79"),),
    breaker_pct: int | None = None,
) -> Plan:
    """A pool of 3 (max 4) in `mode` (None: not written); each (node, kind) of `sick`
    reports that fault; with a phase NODE was cordoned for it 3 minutes ago and drained."""
    pool = builders.pool_doc(target=3, max_nodes=4, zones=("z1",), health=health)
    if mode is not None:
        pool["mode"] = mode
    pct = {"circuit_breaker_pct": breaker_pct, "fleet_circuit_breaker_pct": breaker_pct}
    safety = pct if breaker_pct else None
    spec = builders.fleet_from_dict(builders.fleet_doc(FLEET, {"train": pool}, safety))
    names = [f"{FLEET}-train-{i:04d}" for i in (1, 2, 3)]
    inventory = [
        builders.instance(FLEET, "train", n, launched_at=NOW - timedelta(days=1)) for n in names
    ]
    faults = dict(sick)
    reports = {}
    for i, n in enumerate(names):
        s = builders.summary(sequence=20 + i, generated_at=NOW - timedelta(seconds=10))
        if n in faults:
            s = builders.summary(
                sequence=20 + i,
                generated_at=NOW - timedelta(seconds=10),
                status="unhealthy",
                fatal=True,
                action="reboot",
                fault_key=f"{faults[n]}@gpu0",
                findings=(f"{faults[n]} on GPU 0",),
            )
        reports[n] = builders.observation(n, "train", s)
    nodes = []
    if phase:
        nodes.append(
            builders.node_memory(
                NODE,
                "train",
                phase=phase,
                phase_at=NOW - timedelta(minutes=3),
                repair=True,
                fault={"key": faults[NODE], "action": "reboot", "sequence": 20},
                faults=((faults[NODE], NOW - timedelta(minutes=3)),),
            )
        )
    memory = builders.memory(FLEET, nodes, [builders.pool_memory("train", next_index=4)])
    observed = observe(spec, inventory, reports, memory, NOW, {NODE: True})
    return plan(spec, observed.views, observed.memory, NOW, PlanOptions())


def _steps(p: Plan) -> list[tuple[str, str | None]]:
    return [(a.kind.value, a.node) for a in p.actions]


def _would(p: Plan) -> list[tuple[str, str | None, str]]:
    return [(w.action.kind.value, w.action.node, w.mode.value) for w in p.would]


def test_observe_plans_what_full_would_and_holds_every_action_as_a_would_row() -> None:
    full = _plan(None)
    assert ("cordon", NODE) in _steps(full) and full.would == ()
    watched = _plan("observe")
    assert watched.actions == ()
    assert _would(watched) == [(k, n, "observe") for k, n in _steps(full)]
    first = watched.would[0]
    assert first.headline == f"would cordon {NODE}" and first.fault == "xid:79"
    assert first.action.reason == full.actions[0].reason
    assert not watched.converged  # the world does not match fleet.yaml: a plan says so
    assert watched.observation_fingerprint != full.observation_fingerprint
    assert _plan("observe") == watched  # pure: same inputs, same plan


def test_observe_launches_nothing_to_reach_the_target_and_trips_no_launch_cap() -> None:
    pool = builders.pool_doc(target=5, max_nodes=5, zones=("z1",))
    pool["mode"] = "observe"
    doc = builders.fleet_doc(FLEET, {"train": pool}, safety={"max_launches_per_run": 2})
    spec = builders.fleet_from_dict(doc)
    observed = observe(spec, (), {}, builders.memory(FLEET), NOW)
    p = plan(spec, observed.views, observed.memory, NOW)
    assert p.actions == ()
    assert [w.action.kind for w in p.would] == [ActionKind.PROVISION] * 5
    assert p.would[0].headline.startswith("would provision ")
    assert not any(h.rule is HaltRule.MAX_LAUNCHES for h in p.halts)


def test_cordon_mode_cordons_and_drains_a_faulty_node_and_holds_its_replacement() -> None:
    p = _plan("cordon", {"remediation": ["replace"]})
    assert _steps(p)[:2] == [("cordon", NODE), ("drain", NODE)]
    assert {a.kind for a in p.actions} <= {ActionKind.CORDON, ActionKind.DRAIN}
    held = _plan(None, {"remediation": ["replace"]})
    launches = [a for a in held.actions if a.kind is ActionKind.PROVISION]
    assert [w.action for w in p.would] == launches  # the surge launch is held, nothing else


def test_cordon_mode_never_terminates_or_reboots_a_drained_node() -> None:
    rebooted = _plan("cordon", phase="draining")
    assert rebooted.actions == ()
    assert ("reboot", NODE, "cordon") in _would(rebooted)
    assert {w.action.kind for w in rebooted.would} == {ActionKind.REBOOT, ActionKind.PROVISION}
    replaced = _plan("cordon", {"remediation": ["replace"]}, phase="draining")
    assert not [a for a in replaced.actions if a.kind is ActionKind.TERMINATE]
    assert ("terminate", NODE, "cordon") in _would(replaced)
    assert ("reboot", NODE) in _steps(_plan("full", phase="draining"))


def test_a_row_mode_holds_its_fault_back_in_a_pool_that_acts_fully() -> None:
    rows = {"remedies": [{"match": "gpu_lost", "mode": "observe"}]}
    p = _plan("full", rows)
    assert ("cordon", NODE) not in _steps(p)
    assert ("cordon", NODE, "observe") in _would(p)
    assert all(w.fault == "xid:79" for w in p.would)
    assert any("held by the mode observe of health.remedies row gpu_lost" in x for x in p.pending)


def test_a_fault_a_row_only_watches_leaves_the_budget_to_a_fault_navarch_acts_on() -> None:
    """max_unavailable 1: the watched gpu_lost node, planned first, must not take the one
    place the nvlink node needs."""
    rows = {"remedies": [{"match": "gpu_lost", "mode": "observe"}], "max_unavailable": 1}
    p = _plan("full", rows, sick=((NODE, "xid:79"), (OTHER, "nvlink_down")), breaker_pct=90)
    assert ("cordon", OTHER) in _steps(p) and ("cordon", NODE) not in _steps(p)
    assert ("cordon", NODE, "observe") in _would(p)
    assert not any(w.action.node == OTHER for w in p.would)


def test_a_row_mode_never_grants_more_than_its_pool() -> None:
    rows = {"remedies": [{"match": "xid:79", "mode": "full"}]}
    p = _plan("observe", rows)
    assert p.actions == () and {w.mode for w in p.would} == {Mode.OBSERVE}


def test_a_paused_fleet_holds_what_its_modes_allow_and_keeps_the_would_rows() -> None:
    p = _plan("cordon", {"remediation": ["replace"]})
    paused = replace(
        builders.memory(FLEET),
        pause=Pause("alice@laptop", NOW - timedelta(hours=1), "driver rollout"),
    )
    held = plan(builders.fleet_from_dict(builders.fleet_doc(FLEET, {})), (), paused, NOW)
    assert held.would == () and held.paused is not None
    pool = builders.pool_doc(target=3, max_nodes=4, zones=("z1",))
    pool["mode"] = "cordon"
    spec = builders.fleet_from_dict(builders.fleet_doc(FLEET, {"train": pool}))
    observed = observe(spec, (), {}, builders.memory(FLEET), NOW)
    both = plan(spec, observed.views, replace(observed.memory, pause=paused.pause), NOW)
    assert both.actions == () and len(both.would) == 3  # launches: held by the mode
    assert p.would and not any(h.rule is HaltRule.PAUSED for h in p.halts)

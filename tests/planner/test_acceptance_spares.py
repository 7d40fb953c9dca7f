"""Acceptance in a pool with warm spares: a node in acceptance is kept from work even with
`scheduler: none` (the cordon is recorded in navarch), and a node that passes while the
spare set is short goes straight into it, idle, in the run that passes it (the world
side, jobs only on released nodes: tests/simulate/test_spares_warm.py)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from navarch.planner.model import ActionKind, ActionReason, Cordon, Lifecycle, Memory
from navarch.planner.observe import observe
from navarch.planner.plan import plan
from navarch.report.acceptance import AcceptanceResult, AcceptanceRun, AcceptanceStatus, SuiteDepth
from navarch.report.timefmt import ts
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


def _spec(spares: int) -> Any:
    pool = pool_doc(target=3, max_nodes=6, scheduler="none")
    pool["acceptance"] = {"enabled": True}
    pool["nodes"]["spares"] = spares
    return fleet_from_dict(fleet_doc("f", {"p": pool}))


def _run(finished: bool = True) -> AcceptanceRun:
    results = (
        AcceptanceResult("gpu_count", AcceptanceStatus.PASS, 8, 8, "GPUs"),
        AcceptanceResult("versions", AcceptanceStatus.PASS, detail={"driver": "550.54.15"}),
        AcceptanceResult("nccl_all_reduce", AcceptanceStatus.PASS, 240.0, None, "GB/s"),
    )
    return AcceptanceRun(
        "boot-1",
        SuiteDepth.QUICK,
        ts(NOW - timedelta(seconds=60)),
        ts(NOW) if finished else None,
        results=results,
    )


def _observe(
    spec: Any, runs: dict[str, AcceptanceRun], mem: Memory | None = None, sequence: int = 5
) -> Any:
    inv, reports = [], {}
    for name, run in runs.items():
        inv.append(instance("f", "p", name, launched_at=NOW - timedelta(minutes=10)))
        s = replace(
            summary(sequence=sequence, generated_at=NOW - timedelta(seconds=10)), acceptance=run
        )
        reports[name] = observation(name, "p", s)
    return observe(spec, inv, reports, mem or memory("f"), NOW)


def _actions(spec: Any, obs: Any, node: str) -> list[tuple[ActionKind, ActionReason | None]]:
    p = plan(spec, obs.views, obs.memory, NOW)
    return [(a.kind, a.action_reason) for a in p.actions if a.node == node]


def test_a_node_in_acceptance_of_a_pool_with_spares_is_cordoned_then_held_as_a_spare() -> None:
    spec = _spec(spares=2)
    serving = {f"f-p-000{i}": _run() for i in (1, 2, 3)}
    first = _observe(spec, serving)
    accepting = _observe(spec, {**serving, "f-p-0004": _run(finished=False)}, first.memory)
    assert (
        next(v for v in accepting.views if v.node == "f-p-0004").lifecycle is Lifecycle.ACCEPTANCE
    )
    # Recorded in navarch with scheduler none: whatever places work reads it, so the node
    # is idle when it passes. Without spares nothing is cordoned (nothing to refill).
    assert _actions(spec, accepting, "f-p-0004") == [(ActionKind.CORDON, ActionReason.ACCEPTANCE)]
    no_spares = _spec(spares=0)
    alone = _observe(no_spares, {**serving, "f-p-0004": _run(finished=False)}, first.memory)
    assert _actions(no_spares, alone, "f-p-0004") == []
    # It passes while the spare set is short: into the set in that run, never back to work.
    nm = accepting.memory.node("f-p-0004")
    held = replace(nm, cordon=Cordon(ActionReason.ACCEPTANCE, NOW - timedelta(minutes=3)))
    mem = replace(
        accepting.memory,
        nodes=tuple(held if n.node == "f-p-0004" else n for n in accepting.memory.nodes),
    )
    obs = _observe(spec, {**serving, "f-p-0004": _run()}, mem, sequence=6)
    assert next(v for v in obs.views if v.node == "f-p-0004").lifecycle is Lifecycle.HEALTHY
    assert _actions(spec, obs, "f-p-0004") == [(ActionKind.CORDON, ActionReason.SPARE)]

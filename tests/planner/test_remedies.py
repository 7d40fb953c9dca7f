"""The remediation table (health.remedies over the built-in rows) decides, through plan().

Each test runs observe() and plan() on a three-node pool whose first node has a fault, and
asserts what the plan does to it; docs/health-policy.md's copy of the built-in table is
the code's.
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import builders

from navarch.fleet.remedies import (
    BUILTIN_ROWS,
    FaultClass,
    RemedyRow,
    fault_class,
    is_hardware,
    remedies_table,
    row_for,
)
from navarch.planner.context import PlanOptions
from navarch.planner.model import Plan
from navarch.planner.observe import observe
from navarch.planner.plan import plan
from navarch.report.health import Remedy

FLEET = "rt"
NODE = f"{FLEET}-train-0001"
NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
DOC = Path(__file__).resolve().parents[2] / "docs" / "health-policy.md"


def _plan(
    health: dict[str, Any],
    *,
    kind: str = "xid:79",
    action: str = "reboot",
    phase: str = "",
    faults: tuple[tuple[str, datetime], ...] = (),
    consecutive: int = 0,
    first_seen: datetime | None = None,
) -> Plan:
    """One pool of 3 (max 4); NODE reports fault `kind` (recommended `action`) and, with a
    phase, was cordoned for it 3 minutes ago and has drained."""
    pool = builders.pool_doc(target=3, max_nodes=4, zones=("z1",), health=health)
    spec = builders.fleet_from_dict(builders.fleet_doc(FLEET, {"train": pool}))
    names = [f"{FLEET}-train-{i:04d}" for i in (1, 2, 3)]
    inventory = [
        builders.instance(FLEET, "train", n, launched_at=NOW - timedelta(days=1)) for n in names
    ]
    sick = builders.summary(
        sequence=12,
        generated_at=NOW - timedelta(seconds=10),
        status="unhealthy",
        fatal=True,
        action=action,
        fault_key=f"{kind}@gpu0",
        findings=(f"{kind} on GPU 0",),
        consecutive=consecutive,
    )
    sick = replace(sick, first_seen=first_seen)
    reports = {NODE: builders.observation(NODE, "train", sick)}
    for i, n in enumerate(names[1:]):
        reports[n] = builders.observation(
            n, "train", builders.summary(sequence=20 + i, generated_at=NOW - timedelta(seconds=10))
        )
    nodes = []
    if phase:
        nodes.append(
            builders.node_memory(
                NODE,
                "train",
                phase=phase,
                phase_at=NOW - timedelta(minutes=3),
                repair=True,
                fault={"key": kind, "action": action, "sequence": 12},
                faults=faults + ((kind, NOW - timedelta(minutes=3)),),
            )
        )
    memory = builders.memory(FLEET, nodes, [builders.pool_memory("train", next_index=4)])
    observed = observe(spec, inventory, reports, memory, NOW, {NODE: True})
    return plan(spec, observed.views, observed.memory, NOW, PlanOptions())


def _kinds(p: Plan) -> list[str]:
    return [a.kind.value for a in p.actions if a.node == NODE]


def test_an_operator_row_replaces_a_fault_the_catalogue_would_reboot() -> None:
    assert _kinds(_plan({}, phase="draining")) == ["reboot"]
    p = _plan({"remedies": [{"match": "xid:79", "actions": ["replace"]}]}, phase="draining")
    assert _kinds(p) == ["terminate"]
    (term,) = [a for a in p.actions if a.node == NODE]
    assert "remedies row xid:79: replace" in term.reason


def test_an_operator_ladder_starts_at_its_cheapest_rung() -> None:
    rows = [{"match": "xid:79", "actions": ["reset_gpu", "reboot", "replace"]}]
    p = _plan({"remedies": rows, "remediation": ["reboot", "replace"]}, phase="draining")
    assert _kinds(p) == ["reset_gpu"]


def test_a_class_row_matches_its_kinds_and_an_exact_row_wins_over_it() -> None:
    rows = [{"match": "hbm_ecc", "actions": ["replace"]}]
    p = _plan({"remedies": rows}, kind="ecc:dbe", action="reset_gpu", phase="draining")
    assert _kinds(p) == ["terminate"]
    rows.insert(0, {"match": "ecc:dbe", "actions": ["reboot", "replace"]})
    p = _plan({"remedies": rows}, kind="ecc:dbe", action="reset_gpu", phase="draining")
    assert _kinds(p) == ["reboot"]


def test_past_max_in_place_the_node_is_hardware_and_replaced() -> None:
    """XID 79 seen two days ago and rebooted: outside the pool's 1h ladder_window the
    ladder would reboot again; the row counts in-place remedies over 7d and replaces."""
    before = (("xid:79@gpu1", NOW - timedelta(days=2)),)
    health: dict[str, Any] = {"ladder_window": "1h"}
    assert _kinds(_plan(health, phase="draining", faults=before)) == ["reboot"]
    health["remedies"] = [{"match": "xid:79", "max_in_place": 1, "ladder_window": "7d"}]
    p = _plan(health, phase="draining", faults=before)
    assert _kinds(p) == ["terminate"]
    (term,) = [a for a in p.actions if a.node == NODE]
    assert "hardware after 1 in-place remedies (max_in_place 1" in term.reason


def test_an_alert_row_reports_the_fault_and_never_cordons() -> None:
    assert _kinds(_plan({})) == ["cordon", "drain"]
    p = _plan({"remedies": [{"match": "gpu_lost", "actions": ["alert"]}]})
    assert _kinds(p) == []
    assert any("xid:79: alert only (health.remedies row gpu_lost)" in x for x in p.pending)


def test_occurrences_wait_for_that_many_observations_of_the_fault() -> None:
    rows = [{"match": "xid:79", "occurrences": 3}]
    p = _plan({"remedies": rows}, consecutive=2)
    assert _kinds(p) == []
    assert any("xid:79 seen 2 of 3 times before acting" in x for x in p.pending)
    assert _kinds(_plan({"remedies": rows}, consecutive=3)) == ["cordon", "drain"]


def test_wait_holds_the_cordon_until_the_fault_is_that_old() -> None:
    rows = [{"match": "xid:79", "wait": "10m"}]
    p = _plan({"remedies": rows}, first_seen=NOW - timedelta(minutes=2))
    assert _kinds(p) == []
    assert any("first seen 2m ago; acted on after 10m" in x for x in p.pending)
    later = _plan({"remedies": rows}, first_seen=NOW - timedelta(minutes=11))
    assert _kinds(later) == ["cordon", "drain"]


def test_is_hardware_names_replace_rows_replace_faults_and_too_many_remedies() -> None:
    assert is_hardware(row_for((), "xid:64"), Remedy.REPLACE, 0)
    assert not is_hardware(row_for((), "xid:79"), Remedy.REBOOT, 5)
    assert is_hardware(row_for((), "host_down"), Remedy.NONE, 0)
    mine = (RemedyRow("xid:79", "runbook", max_in_place=2),)
    assert not is_hardware(row_for(mine, "xid:79"), Remedy.REBOOT, 1)
    assert is_hardware(row_for(mine, "xid:79"), Remedy.REBOOT, 2)
    assert not is_hardware(RemedyRow("nvlink", "x", alert=True), Remedy.REPLACE, 9)


def test_every_builtin_row_cites_a_source_and_fatal_xids_follow_the_catalogue() -> None:
    assert all(r.source for r in BUILTIN_ROWS)
    assert row_for((), "xid:79") is not None and row_for((), "xid:79").floor is Remedy.REBOOT  # type: ignore[union-attr]
    assert row_for((), "xid:64").floor is Remedy.REPLACE  # type: ignore[union-attr]
    assert fault_class("xid:79") is FaultClass.GPU_LOST
    assert fault_class("remapped_rows_failure") is FaultClass.HBM_ECC
    assert fault_class("sxid:20034") is FaultClass.NVLINK
    assert fault_class("xid:13") is None


def test_docs_remedies_table_is_the_builtin_table() -> None:
    found = re.search(
        r"<!-- remedies-table -->\n(.*?)<!-- /remedies-table -->", DOC.read_text(), re.S
    )
    assert found is not None, "docs/health-policy.md lost its remedies-table block"
    assert found.group(1) == remedies_table()

"""A node cordoned because no first report came within boot_timeout (missing data: a slow
boot looks the same) that reports, healthy, before it is terminated returns to service;
one that still has not reported stays on its way out (a host that never boots). In a pool
with an acceptance suite the late node is handed to its suite instead of serving at once."""

from __future__ import annotations

from datetime import timedelta

from navarch.planner.model import ActionKind, ActionReason, Cordon, Phase
from navarch.planner.observe import observe
from navarch.planner.plan import plan
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
LATE = "f-p-0003"


def _plan(
    late_report: bool, acceptance: bool = False
) -> list[tuple[ActionKind, str | None, ActionReason | None]]:
    pool = pool_doc(target=3, max_nodes=5)
    if acceptance:
        pool["acceptance"] = {"enabled": True}
    spec = fleet_from_dict(fleet_doc("f", {"p": pool}))
    cordoned_at = NOW - timedelta(minutes=1)
    inv, reports = [], {}
    for i in (1, 2, 3):
        name = f"f-p-000{i}"
        inv.append(instance("f", "p", name, launched_at=NOW - timedelta(minutes=17)))
        if name != LATE or late_report:
            s = summary(sequence=3, generated_at=NOW - timedelta(seconds=20), process_count=0)
            reports[name] = observation(name, "p", s)
    # Drained at once (scheduler none, no job ever ran): the terminate stage's next step.
    late = node_memory(
        LATE,
        "p",
        phase=Phase.DRAINING,
        phase_at=cordoned_at,
        phase_reason="no report within boot_timeout (15m)",
        cordon=Cordon(ActionReason.BOOT_TIMEOUT, cordoned_at, repair=True),
        first_seen_at=NOW - timedelta(minutes=17),
    )
    obs = observe(spec, inv, reports, memory("f", [late]), NOW)
    p = plan(spec, obs.views, obs.memory, NOW)
    return [(a.kind, a.node, a.action_reason) for a in p.actions if a.node == LATE]


def test_a_node_whose_first_report_comes_after_its_boot_timeout_cordon_returns_to_service() -> None:
    assert _plan(late_report=True) == [(ActionKind.UNCORDON, LATE, ActionReason.RECOVERED)]
    # Still nothing from it: it stays on its way out, as a host that never boots does.
    assert ActionKind.UNCORDON not in [k for k, _, _ in _plan(late_report=False)]


def test_a_late_first_report_in_an_acceptance_pool_hands_the_node_to_its_suite() -> None:
    # Neither returned (it would skip its suite) nor terminated (a slow boot is no fault).
    assert _plan(late_report=True, acceptance=True) == [
        (ActionKind.CORDON, LATE, ActionReason.ACCEPTANCE)
    ]
    assert ActionKind.CORDON not in [k for k, _, _ in _plan(late_report=False, acceptance=True)]

"""Plan rendering at scale: large groups of one action kind in a pool are
summarised in the text plan; --verbose and --json keep every node."""

from __future__ import annotations

from datetime import UTC, datetime

from navarch.planner.model import Action, ActionKind, ActionReason, Place, Plan
from navarch.planner.payloads import ProvisionPayload
from navarch.reconcile.render import GROUP_OVER, plan_to_json, render_text

PLACE = (Place("sim-1a", "sim-h100x8", False, 0),)


def _plan(n: int) -> Plan:
    acts = tuple(
        Action(
            ActionKind.PROVISION,
            "train",
            f"demo-train-{i:05d}",
            f"{i} of {n} nodes present",
            payload=ProvisionPayload(places=PLACE),
            action_reason=ActionReason.SCALE_UP,
        )
        for i in range(n)
    )
    acts += (
        Action(
            ActionKind.CORDON,
            "train",
            "demo-train-00000",
            "XID 79",
            action_reason=ActionReason.UNHEALTHY,
        ),
    )
    return Plan("demo", datetime(2026, 3, 2, tzinfo=UTC), acts)


def test_ten_thousand_provisions_render_in_a_few_lines() -> None:
    text = render_text(_plan(10_000))
    assert len(text.splitlines()) < 20
    assert "... and 9,997 more provision actions in pool train" in text
    assert "~ cordon demo-train-00000" in text  # a lone action of another kind is shown
    assert "Plan: 10000 to provision, 1 to cordon" in text


def test_verbose_and_json_list_every_node() -> None:
    p = _plan(50)
    assert render_text(p, verbose=True).count("+ provision") == 50
    assert len(plan_to_json(p)["actions"]) == 51


def test_small_groups_are_not_summarised() -> None:
    assert render_text(_plan(GROUP_OVER)).count("+ provision") == GROUP_OVER

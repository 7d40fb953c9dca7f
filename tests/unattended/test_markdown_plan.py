"""`navarch plan --markdown`: golden files for the PR-comment rendering.

Plans are built as data (the planner's output types), so these files pin the renderer
alone. Regenerate after an intended change with NAVARCH_UPDATE_GOLDEN=1 and review the diff.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from navarch.planner.model import Action, ActionKind, ActionReason, Halt, Place, Plan
from navarch.planner.payloads import CordonPayload, ProvisionPayload
from navarch.reconcile.render import render_markdown

GOLDEN = Path(__file__).parent / "golden"
NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)

XID = "XID 79: GPU has fallen off the bus on 0000:5d:00"

PLANS = {
    "markdown_replace_after_xid": Plan(
        fleet="demo",
        created_at=NOW,
        actions=(
            Action(
                ActionKind.CORDON,
                "train",
                "demo-train-0002",
                XID,
                instance_id="i-0002",
                payload=CordonPayload(repair=True),
                action_reason=ActionReason.UNHEALTHY,
            ),
            Action(
                ActionKind.DRAIN,
                "train",
                "demo-train-0002",
                XID,
                instance_id="i-0002",
                action_reason=ActionReason.UNHEALTHY,
            ),
            Action(
                ActionKind.PROVISION,
                "train",
                "demo-train-0004",
                "replaces demo-train-0002",
                payload=ProvisionPayload(
                    places=(
                        Place("sim-1a", "sim-h100x8", False, 0),
                        Place("sim-1b", "sim-h100x8", False, 1),
                    ),
                    replaces="demo-train-0002",
                ),
                action_reason=ActionReason.SCALE_UP,
            ),
            Action(
                ActionKind.PROVISION,
                "infer",
                "demo-infer-0003",
                "below target (1 of 2)",
                payload=ProvisionPayload(places=(Place("sim-1b", "sim-l4x1", True, 0),)),
                action_reason=ActionReason.SCALE_UP,
            ),
        ),
    ),
    "markdown_breaker_held_back": Plan(
        fleet="demo",
        created_at=NOW,
        actions=(
            Action(
                ActionKind.TERMINATE,
                "infer",
                "demo-infer-0001",
                "drain finished",
                instance_id="i-0101",
                action_reason=ActionReason.DRAIN_FINISHED,
            ),
        ),
        halts=(
            Halt(
                "train",
                "circuit_breaker",
                "2 of 3 nodes are unhealthy, stale or offline (>= 50%): "
                "no new cordon or termination in this pool",
            ),
            Halt("infer", "disruption_budget", "demo-infer-0002 waits: max_unavailable 1"),
        ),
        pending=("demo-infer-0002: draining for 5m of 30m",),
    ),
    "markdown_no_changes": Plan(fleet="demo", created_at=NOW, actions=()),
    "markdown_waiting_only": Plan(
        fleet="demo",
        created_at=NOW,
        actions=(),
        notes=("pool train: update strategy on-replace",),
        pending=("demo-train-0001: draining for 1m of 30m",),
    ),
}


@pytest.mark.parametrize("case", sorted(PLANS))
def test_markdown_plan_matches_golden(case: str) -> None:
    text = render_markdown(PLANS[case])
    path = GOLDEN / f"{case}.md"
    if os.environ.get("NAVARCH_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.read_text() == text, f"{path.name} differs from the rendering"


def test_markdown_summary_line_comes_first_and_sections_collapse() -> None:
    text = render_markdown(PLANS["markdown_replace_after_xid"])
    body = [line for line in text.splitlines() if line and not line.startswith("###")]
    assert body[0] == "**Plan: 2 to provision, 1 to cordon, 1 to drain, 0 to terminate.**"
    assert text.count("<details") == text.count("</details>") == 2
    assert "# (because XID 79: GPU has fallen off the bus on 0000:5d:00)" in text
    assert "[!WARNING]" not in text


def test_markdown_warns_when_safety_rules_held_back() -> None:
    text = render_markdown(PLANS["markdown_breaker_held_back"])
    warning = text.index("> [!WARNING]")
    assert text.index("**Plan:") < warning < text.index("<details")
    assert "> - `train` circuit_breaker: 2 of 3 nodes" in text


def _worst_plan(nodes: int, pools: int) -> Plan:
    """A plan as long as a fleet of `nodes` nodes in `pools` pools can make it: every node
    cordoned, drained, terminated and replaced, each reason 1 KB of characters that
    Markdown escaping lengthens most, and halts, notes and pending lines for every node."""
    long = ("&<>[`\\ www." * 100)[:1024]
    actions = []
    for i in range(nodes):
        pool = f"pool-{i % pools:03d}-{'x' * 14}"
        node = f"demo-{pool}-{i:04d}"
        for kind in (ActionKind.CORDON, ActionKind.DRAIN, ActionKind.TERMINATE):
            actions.append(
                Action(
                    kind,
                    pool,
                    node,
                    long,
                    instance_id=f"i-{i:017d}",
                    action_reason=ActionReason.UNHEALTHY,
                )
            )
        actions.append(
            Action(
                ActionKind.PROVISION,
                pool,
                f"{node}-r",
                long,
                payload=ProvisionPayload(
                    places=tuple(Place(f"zone-{z}", "p5.48xlarge", False, z) for z in range(8)),
                    replaces=node,
                ),
                action_reason=ActionReason.REPLACEMENT,
            )
        )
    return Plan(
        fleet="demo",
        created_at=NOW,
        actions=tuple(actions),
        halts=tuple(Halt(f"pool-{i:03d}", "circuit_breaker", long) for i in range(nodes)),
        notes=tuple(long for _ in range(nodes)),
        pending=tuple(long for _ in range(nodes)),
    )


@pytest.mark.parametrize(("nodes", "pools"), [(1000, 1), (1000, 100), (1000, 1000)])
def test_markdown_plan_of_a_big_fleet_with_long_reasons_fits_a_github_comment(nodes, pools):
    text = render_markdown(_worst_plan(nodes, pools))
    assert len(text) < 65_536
    assert text.count("<details") == text.count("</details>")
    assert text.count("```") % 2 == 0  # every fence closed
    assert "more (`navarch plan --json` lists each)" in text
    if pools > 20:
        assert f"and {pools - 20:,} more pools with" in text
    else:
        assert "more actions in pool pool-000" in text

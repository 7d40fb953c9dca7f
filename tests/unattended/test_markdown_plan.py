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
                repair=True,
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
                places=(
                    Place("sim-1a", "sim-h100x8", False, 0),
                    Place("sim-1b", "sim-h100x8", False, 1),
                ),
                replaces="demo-train-0002",
                action_reason=ActionReason.SCALE_UP,
            ),
            Action(
                ActionKind.PROVISION,
                "infer",
                "demo-infer-0003",
                "below target (1 of 2)",
                places=(Place("sim-1b", "sim-l4x1", True, 0),),
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

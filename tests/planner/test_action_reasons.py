"""Every action of a JSON plan carries a reason code, and the plan schema lists them all."""

from __future__ import annotations

import json
from pathlib import Path

from navarch.fleet.schemas import load_schema
from navarch.planner.model import ActionReason, HaltRule

GOLDEN = Path(__file__).parent / "golden"


def test_plan_schema_lists_every_action_reason_and_halt_rule() -> None:
    schema = load_schema("plan.schema.json")
    action = schema["properties"]["actions"]["items"]["properties"]
    halt = schema["properties"]["halts"]["items"]["properties"]
    assert action["action_reason"]["enum"] == [r.value for r in ActionReason]
    assert halt["rule"]["enum"] == [r.value for r in HaltRule]


def test_golden_json_plans_carry_an_action_reason_per_action() -> None:
    plans = [json.loads(p.read_text()) for p in sorted(GOLDEN.glob("*.json"))]
    codes = [a["action_reason"] for d in plans for a in d["actions"]]
    assert codes and set(codes) <= {r.value for r in ActionReason}
    assert "orphan" in codes and "drift" in codes and "provision_timeout" in codes

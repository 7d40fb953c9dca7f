"""Golden files for the plan lines of drift and hardening: drift and rolling replacement,
in-place tag updates, orphans (cordoned and drained) and the orphan guard, pending ("not
converged") lines.

Each case is a planner scenario (tests/planner/scenarios) rendered as text and JSON; the
JSON is also checked against schemas/plan.schema.json. Regenerate after an intended change
with NAVARCH_UPDATE_GOLDEN=1 and review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from test_scenarios import SCENARIOS, build_inputs, run

from navarch.fleet.schemas import validator_for
from navarch.reconcile.render import plan_to_json, render_text

GOLDEN = Path(__file__).parent / "golden"
CASES = [
    "drift_instance_type_rolling_surge_first",
    "drift_rolling_retires_when_replacement_healthy",
    "drift_labels_updated_in_place",
    "drift_on_replace_strategy_is_a_note",
    "orphan_of_removed_pool_cordoned_and_drained",
    "orphan_settings_unknown_drained_as_scheduler_none",
    "orphan_guard_refuses_mass_termination",
    "streak_part_way_is_not_converged",
    "stuck_pending_terminated_with_backoff",
]


def _render(case: str, tmp_path: Path) -> dict[str, str]:
    doc = yaml.safe_load((SCENARIOS / f"{case}.yaml").read_text())
    _, p = run(build_inputs(doc, tmp_path))
    as_json = plan_to_json(p)
    validator_for("plan.schema.json").validate(as_json)
    return {"txt": render_text(p), "json": json.dumps(as_json, indent=1, sort_keys=True) + "\n"}


@pytest.mark.parametrize("case", CASES)
def test_plan_rendering_matches_golden(case: str, tmp_path: Path) -> None:
    for ext, text in _render(case, tmp_path).items():
        path = GOLDEN / f"{case}.{ext}"
        if os.environ.get("NAVARCH_UPDATE_GOLDEN") == "1":
            path.write_text(text)
        assert path.read_text() == text, f"{path.name} differs from the rendering"

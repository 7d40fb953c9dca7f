"""A paused fleet's plan (`navarch pause`): the same plan, every action held with the one
halt rule PAUSED, the pause (who, when, why) first; the planner reads the pause from
Memory like any other input and stays pure."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from navarch.planner.model import HaltRule, Pause
from navarch.planner.observe import observe
from navarch.planner.plan import plan
from tests.planner.builders import fleet_doc, fleet_from_dict, memory, pool_doc

NOW = datetime(2026, 11, 27, 3, 0, tzinfo=UTC)


def test_a_paused_fleet_gets_its_plan_with_every_action_held_and_the_pause_named() -> None:
    spec = fleet_from_dict(fleet_doc("demo", {"train": pool_doc(target=3)}))
    observed = observe(spec, (), {}, memory("demo"), NOW)
    free = plan(spec, observed.views, observed.memory, NOW)
    assert len(free.actions) == 3 and free.paused is None
    pause = Pause("alice@laptop", datetime(2026, 11, 27, 2, 0, tzinfo=UTC), "driver rollout")
    paused_memory = replace(observed.memory, pause=pause)
    held = plan(spec, observed.views, paused_memory, NOW)
    assert held.actions == ()
    assert held.paused is not None and held.paused.pool == "*"
    assert held.paused.message.startswith(
        "paused by alice@laptop at 2026-11-27T02:00:00Z: driver rollout;"
    )
    per_action = [h for h in held.halts if h.rule is HaltRule.PAUSED and h.pool != "*"]
    assert [h.message.split(" held")[0] for h in per_action] == [
        f"{a.kind.value} {a.node}" for a in free.actions
    ]
    assert not held.safety_stopped  # a pause asks for quiet runs: no exit 3
    assert held.observation_fingerprint != free.observation_fingerprint  # saved plans go stale
    assert plan(spec, observed.views, paused_memory, NOW) == held  # pure: same inputs, same plan

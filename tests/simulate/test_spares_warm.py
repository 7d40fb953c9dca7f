"""Warm spares in the simulator: with acceptance and `scheduler: none` the spare set stays
warm (the world starts jobs only on nodes the planner released, and a node that passes
acceptance while the set is short joins it idle), and the refill is measured against the
pools' declared `nodes.spares`, not the most spares ever seen at once."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from navarch.simulate.engine import _Tally, simulate
from navarch.simulate.scenario import load_scenario

HERE = Path(__file__).parent / "scenarios"


def test_with_acceptance_and_scheduler_none_the_spare_set_is_refilled_within_half_an_hour() -> None:
    # 20 nodes, two spares, 16 XID 79s in 8 hours, replace only: each fault promotes a
    # spare, and the replacement runs acceptance idle and refills the set (launch, boot, the quick
    # suite, a run; two faults close together make one longer spell).
    doc = simulate(load_scenario(HERE / "spares-acceptance.yaml"))
    assert doc["faults"] >= 10 and doc["served_by"] == {"spare": doc["faults"]}
    assert doc["served_faulty_nodes"] == 0 and doc["wrongful_terminations"] == 0
    assert len(doc["spare_refill_s"]) >= 5 and doc["max_spare_refill_s"] <= 30 * 60
    assert doc["spare_refill_open_s"] is None
    # Two spares held most of the 8 hours (a node in acceptance that took a job never became one).
    assert doc["spare_instance_hours"] >= 10


def _tally(spares: int) -> Any:
    pool = SimpleNamespace(name="train", spare_nodes=spares, max_nodes=24, target_nodes=20)
    world = SimpleNamespace(t=0.0)
    tally = _Tally(world, SimpleNamespace(pools=[pool]), 20, 60)  # type: ignore[arg-type]
    tally.warm = True
    return tally


def test_spare_refill_is_measured_against_the_declared_spares() -> None:
    tally = _tally(spares=2)
    # One spare of two from the start: short from the first run, whole at 700 s.
    for t, count in ((100.0, 1), (400.0, 1), (700.0, 2), (900.0, 2)):
        tally.world.t = t
        tally._spare_refill(count)
    assert tally.spare_refills == [600.0] and tally.spares_short_since is None
    # A set that never fills is one open spell, however few spares it ever held.
    never = _tally(spares=2)
    for t in (100.0, 5000.0):
        never.world.t = t
        never._spare_refill(0)
    assert never.spare_refills == [] and never.spares_short_since == 100.0


def test_each_empty_spare_place_is_timed_from_its_loss_to_its_refill_first_in_first_out() -> None:
    tally = _tally(spares=2)
    # A promotion at 0 s and another at 480 s (two faults eight minutes apart); the first
    # replacement is a spare at 540 s, the second at 1,020 s. The spell lasts 1,020 s; each
    # place was empty 540 s.
    for t, count in ((0.0, 1), (480.0, 0), (540.0, 1), (1020.0, 2)):
        tally.world.t = t
        tally._spare_refill(count)
    assert tally.spare_refills == [1020.0]
    assert tally.slots.refills == [540.0, 540.0]
    keys = tally.slots.keys(tally.spare_refills, 2000.0)
    assert keys["p95_spare_refill_s"] == 1020.0 and keys["p95_spare_slot_refill_s"] == 540.0
    assert keys["spare_slot_refill_open_s"] is None
    # A place never filled is open from its loss to the end.
    tally.world.t = 1500.0
    tally._spare_refill(1)
    assert tally.slots.keys([], 2000.0)["spare_slot_refill_open_s"] == 500.0

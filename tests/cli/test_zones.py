"""Zones end to end on the local provider: `navarch apply fleet.example.yaml` spreads each
pool across its zones and `navarch status` shows where every node sits."""

from __future__ import annotations

import json
from collections import Counter


def test_apply_spreads_each_pool_across_its_zones_and_status_shows_them(navarch):
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    zones = {pool: Counter(n["zone"] for n in navarch.nodes(pool)) for pool in ("train", "infer")}
    assert zones == {
        "train": Counter({"sim-1a": 2, "sim-1b": 1}),
        "infer": Counter({"sim-1b": 1, "sim-1a": 1}),
    }
    out = navarch.ok("status", "fleet.yaml", "--all").out
    assert "target 3, max 5; zones sim-1a 2, sim-1b 1" in out
    assert "demo-train-0002" in out and "sim-1b" in out


def test_status_shows_each_reservations_use_reserved_running_and_idle_but_billed(navarch):
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    out = navarch.ok("status", "fleet.yaml").out
    # fleet.example.yaml reserves 3 sim-h100x8 in sim-1a; the spread train pool runs 2 there.
    assert (
        "reservation res-train (sim sim-1a sim-h100x8): reserved 3, running 2, idle 1 (billed)"
        in out
    )
    [r] = navarch.status()["reservations"]
    assert (r["reservation_id"], r["reserved"], r["running"], r["idle"]) == ("res-train", 3, 2, 1)


def test_the_local_loop_notifies_reserved_capacity_idle_past_reservation_idle_after(
    navarch, fleet_dir
) -> None:
    """fleet.example.yaml's reservation holds 3 sim-h100x8 in sim-1a and the spread train
    pool runs 2 there: one reserved slot sits idle, billed, and after the fleet's
    reservation_idle_after (1h, the default) the apply run notifies it."""
    path = fleet_dir / "fleet.yaml"
    path.write_text(
        path.read_text().replace(
            "\nsafety:", "\nnotify: [{type: log, path: events.jsonl}]\n\nsafety:", 1
        )
    )

    def events() -> list[dict]:
        log = fleet_dir / "events.jsonl"
        lines = log.read_text().splitlines() if log.exists() else []
        return [e for e in map(json.loads, lines) if e["kind"] == "reservation_idle"]

    def run_at(moment: str) -> None:  # the agents report, then the apply run
        env = {"NAVARCH_NOW": moment}
        navarch.ok("local", "tick", "fleet.yaml", env=env)
        navarch.ok("apply", "fleet.yaml", "--auto-approve", env=env)

    navarch.ok("apply", "fleet.yaml", "--auto-approve", env={"NAVARCH_NOW": "2026-03-02T12:00:00Z"})
    run_at("2026-03-02T12:30:00Z")
    assert events() == []  # idle, but not yet for an hour
    run_at("2026-03-02T13:01:00Z")
    [idle] = events()
    assert idle["message"].startswith(
        "reservation res-train (sim sim-1a sim-h100x8): 1 of 3 reserved instances idle since "
    ), idle


def test_a_fall_over_launch_of_four_nodes_spreads_over_the_two_zones_with_capacity(
    navarch, fleet_dir
) -> None:
    """sim-1a has no capacity: the four launches that fall over from it spread 2 + 2 over
    sim-1b and sim-1c (an Auto Scaling group's balancing), not all into the next zone."""
    path = fleet_dir / "fleet.yaml"
    text = path.read_text()
    for old, new in (
        ("instance_types: [sim-h100x8, sim-a100x8]", "instance_types: [sim-h100x8]"),
        ("zones: [sim-1a, sim-1b]", "zones: [sim-1a, sim-1b, sim-1c]"),
        ("nodes: {min: 2, target: 3, max: 5}", "nodes: {min: 2, target: 4, max: 5}"),
        ("    type: local\n", "    type: local\n    unavailable: [sim-1a/sim-h100x8]\n"),
    ):
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path.write_text(text)
    run = navarch("apply", "fleet.yaml", "--auto-approve", "--pool", "train")
    assert run.code == 0, run.out + run.err
    assert Counter(n["zone"] for n in navarch.nodes("train")) == Counter({"sim-1b": 2, "sim-1c": 2})

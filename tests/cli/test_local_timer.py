"""The local loop run for a long while, the way the demo is played: `navarch local tick`
(every agent's systemd timer firing once) then `navarch apply`, over and over on a clock
that moves on each round. The agents write on change or heartbeat; a tick that finds a
report not due must leave it as it is, so no report is ever taken for a replay, no node
turns unknown, and scale-downs and removed pools finish."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml


class _Clock:
    """The rounds' clock: starts a minute ahead of the system clock (the local provider
    stamps launches with the system clock) and moves on by step_s each round."""

    def __init__(self, step_s: float) -> None:
        self.at = datetime.now(UTC) + timedelta(minutes=1)
        self.step = timedelta(seconds=step_s)

    def env(self) -> dict[str, str]:
        return {"NAVARCH_NOW": self.at.isoformat()}

    def round(self, navarch) -> str:
        """One round on this clock: every agent's timer fires, then apply; apply's output."""
        self.at += self.step
        navarch.ok("local", "tick", "fleet.yaml", env=self.env())
        return navarch.ok("apply", "fleet.yaml", "--auto-approve", env=self.env()).out


def _edit(fleet_dir: Path, mutate) -> None:
    path = fleet_dir / "fleet.yaml"
    doc = yaml.safe_load(path.read_text())
    mutate(doc)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def _status(navarch, clock: _Clock) -> dict:
    return json.loads(navarch.ok("status", "fleet.yaml", "--json", env=clock.env()).out)


def _nodes(status: dict) -> dict[str, str]:
    """node -> pool of every machine the fleet still has, orphans included."""
    nodes = {x["node"]: p["pool"] for p in status["pools"] for x in p["nodes"]}
    return nodes | {o["node"]: o["pool"] for o in status["orphans"]}


def test_many_ticks_never_replay_a_report_and_a_scale_down_completes(navarch, fleet_dir):
    # A round a minute: the agents' 5-minute heartbeat falls due every fifth tick, and
    # the ticks between find their reports unchanged.
    clock = _Clock(step_s=60)
    navarch.ok("apply", "fleet.yaml", "--auto-approve", env=clock.env())
    terminated: list[str] = []
    for n in range(1, 19):
        if n == 8:
            _edit(fleet_dir, lambda d: d["pools"]["train"]["nodes"].update(target=2))
        out = clock.round(navarch)
        terminated += [line.split()[2] for line in out.splitlines() if "- terminate " in line]
        status = _status(navarch, clock)
        assert status["rejections"] == {}, (n, status["rejections"])
        lifecycles = {x["node"]: x["lifecycle"] for p in status["pools"] for x in p["nodes"]}
        assert "unknown" not in lifecycles.values(), (n, lifecycles)
    assert terminated == ["demo-train-0003"]
    status = _status(navarch, clock)
    assert sorted(n for n, p in _nodes(status).items() if p == "train") == [
        "demo-train-0001",
        "demo-train-0002",
    ]
    assert {x["lifecycle"] for p in status["pools"] for x in p["nodes"]} == {"healthy"}


def test_a_removed_pools_nodes_are_drained_and_terminated_even_when_one_is_silent(
    navarch, fleet_dir
):
    # A round every 3 minutes: a heartbeat every other tick. The demo has run a while
    # (past the ticks at which every check still changes the report) before the pool goes.
    clock = _Clock(step_s=180)
    navarch.ok("apply", "fleet.yaml", "--auto-approve", env=clock.env())
    for _ in range(12):
        clock.round(navarch)
    # One of the removed pool's agents has died: its report goes stale, so its drain can
    # never be seen to finish and it leaves at drain_timeout (30m) instead.
    navarch.ok("local", "inject", "fleet.yaml", "demo-infer-0001", "--silent")
    _edit(fleet_dir, lambda d: d["pools"].pop("infer"))
    rounds = 0
    status = _status(navarch, clock)
    while "infer" in _nodes(status).values():
        rounds += 1
        assert rounds <= 20, status["orphans"]
        clock.round(navarch)
        status = _status(navarch, clock)
        assert status["rejections"] == {}, (rounds, status["rejections"])
    assert sorted(_nodes(status)) == ["demo-train-0001", "demo-train-0002", "demo-train-0003"]
    assert {x["lifecycle"] for p in status["pools"] for x in p["nodes"]} == {"healthy"}

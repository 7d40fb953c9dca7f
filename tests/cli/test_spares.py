"""Warm spares end to end on the embedded local provider (fleet.example.yaml with
`nodes.spares: 1` on the train pool): apply launches target + 1, the surplus healthy node
is held as a spare (cordoned from the scheduler, lifecycle spare), and when a serving node
faults the same run that cordons it promotes the spare. `navarch history` of both nodes
tells it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

SICK = "demo-train-0002"


def _spares(fleet_dir: Path, spares: int) -> None:
    path = fleet_dir / "fleet.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["pools"]["train"]["nodes"]["spares"] = spares
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def _train(navarch) -> dict[str, dict[str, Any]]:
    return {n["node"]: n for n in navarch.nodes("train")}


def _cycle(navarch) -> str:
    navarch.ok("local", "tick", "fleet.yaml")
    return navarch.ok("apply", "fleet.yaml", "--auto-approve").out


def test_a_spare_is_held_then_promoted_in_the_run_a_serving_node_faults(navarch, fleet_dir) -> None:
    _spares(fleet_dir, 1)
    out = navarch.ok("apply", "fleet.yaml", "--auto-approve").out
    assert out.count("+ provision demo-train-") == 4, out  # target 3 + 1 spare
    out = _cycle(navarch)  # every node reports healthy: the newest is held as the spare
    assert "~ cordon demo-train-0004" in out and "held as a warm spare" in out, out
    assert "~ drain demo-train-0004" not in out, out  # a fresh node holds no work
    nodes = _train(navarch)
    assert [n for n, v in nodes.items() if v["lifecycle"] == "spare"] == ["demo-train-0004"]
    assert navarch("plan", "fleet.yaml", "--detailed-exitcode").code == 0
    text = navarch.ok("status", "fleet.yaml").out
    assert "spare 1" in text and "max 5, spares 1" in text and "demo-train-0004" in text, text
    pool = next(p for p in navarch.status()["pools"] if p["pool"] == "train")
    assert pool["spares"] == 1
    held = [n["node"] for n in pool["nodes"] if n["lifecycle"] == "spare"]
    assert held == ["demo-train-0004"]
    navarch.ok("status", "fleet.yaml", "--html", "status.html")
    html = (fleet_dir / "status.html").read_text()
    assert "spares 1;" in html and "1 spare</span>" in html

    navarch.ok("local", "inject", "fleet.yaml", SICK, "--xid", "79")
    navarch.ok("local", "tick", "fleet.yaml")
    navarch.ok("local", "tick", "fleet.yaml")
    out = navarch.ok("apply", "fleet.yaml", "--auto-approve").out
    assert f"~ cordon {SICK}" in out, out
    assert "~ uncordon demo-train-0004" in out, out
    assert f"promoted to serve in place of {SICK}" in out, out
    nodes = _train(navarch)
    assert nodes["demo-train-0004"]["lifecycle"] == "healthy", nodes["demo-train-0004"]
    assert nodes[SICK]["lifecycle"] in ("draining", "cordoned"), nodes[SICK]
    sick = navarch.ok("history", "fleet.yaml", SICK).out
    assert "cordon" in sick and "XID 79" in sick, sick
    spare = navarch.ok("history", "fleet.yaml", "demo-train-0004").out
    assert "held as a warm spare" in spare, spare
    assert f"promoted to serve in place of {SICK}" in spare, spare


def test_a_cured_node_refills_the_spare_set_and_spares_go_first_on_shrink(
    navarch, fleet_dir
) -> None:
    _spares(fleet_dir, 1)
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    _cycle(navarch)
    navarch.ok("local", "inject", "fleet.yaml", SICK, "--xid", "79")
    out = _cycle(navarch)
    assert "~ uncordon demo-train-0004" in out, out
    # The example fleet says surge_on: replace: the reboot gets no machine of its own, and
    # the cured node refills the spare set instead of serving (the pool is at target).
    assert "+ provision" not in out, out
    outs = [_cycle(navarch) for _ in range(5)]  # drain seen, reboot, return_after 3
    assert any(f"~ reboot {SICK}" in o for o in outs), outs
    held = [o for o in outs if f"~ cordon {SICK}" in o]
    assert len(held) == 1 and "held as a warm spare" in held[0], outs
    assert not any(f"~ uncordon {SICK}" in o for o in outs), outs
    nodes = _train(navarch)
    spares = sorted(n for n, v in nodes.items() if v["lifecycle"] == "spare")
    assert spares == [SICK], nodes
    assert sum(v["lifecycle"] == "healthy" for v in nodes.values()) == 3, nodes
    assert navarch("plan", "fleet.yaml", "--detailed-exitcode").code == 0

    _spares(fleet_dir, 0)  # shrink: the spare goes first
    out = _cycle(navarch)
    assert f"~ cordon {spares[0]}" in out and "scale down" in out, out


def _in_minutes(minutes: int) -> dict[str, str]:
    from datetime import UTC, datetime, timedelta

    return {"NAVARCH_NOW": (datetime.now(UTC) + timedelta(minutes=minutes)).isoformat()}


def test_a_silent_spare_never_holds_a_serving_nodes_repair(navarch, fleet_dir) -> None:
    _spares(fleet_dir, 1)
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    _cycle(navarch)  # demo-train-0004 is held as the spare
    navarch.ok("local", "inject", "fleet.yaml", "demo-train-0004", "--silent")
    later = _in_minutes(11)
    navarch.ok("local", "tick", "fleet.yaml", env=later)
    out = navarch.ok("apply", "fleet.yaml", "--auto-approve", env=later).out
    assert "~ cordon demo-train-0004" in out, out  # silent: out of service, never terminated
    for minutes in (12, 13):  # its replacement boots and joins the spare set
        navarch.ok("local", "tick", "fleet.yaml", env=_in_minutes(minutes))
        navarch.ok("apply", "fleet.yaml", "--auto-approve", env=_in_minutes(minutes))
    navarch.ok("local", "inject", "fleet.yaml", SICK, "--xid", "79")
    outs = []
    for minutes in (14, 15):  # two runs
        navarch.ok("local", "tick", "fleet.yaml", env=_in_minutes(minutes))
        run = navarch("apply", "fleet.yaml", "--auto-approve", env=_in_minutes(minutes))
        outs.append(run.out + run.err)
    text = "\n".join(outs)
    assert f"~ cordon {SICK}" in text, text
    assert f"promoted to serve in place of {SICK}" in text, text
    nodes = _train(navarch)
    assert nodes[SICK]["lifecycle"] in ("draining", "cordoned", "remediating"), nodes[SICK]

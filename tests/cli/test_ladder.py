"""The remediation ladder end to end on the embedded local provider.

XID 79 (the agent's catalogue: action reboot) -> apply cordons and drains the node (no
surge replacement for a reboot under surge_on: replace) -> once drained it is rebooted in
place (a new boot id, same instance) -> after return_after healthy reports from the new
boot it is uncordoned, pool at target. XID 79 again within ladder_window -> this time it is
replaced, and its replacement surges. Under surge_on: any (the product default; the local
fleet here says replace) the reboot has its surge, and once cured the once-faulty node is
terminated as the surplus, never uncordoned first. With replacement after-terminate nothing is provisioned for a
reboot. Every apply is preceded by `local tick` (each node's agent reports once), as the
reconciler's schedule would interleave them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

NODE = "demo-train-0002"


def _edit(fleet_dir: Path, mutate: Callable[[dict[str, Any]], None]) -> None:
    path = fleet_dir / "fleet.yaml"
    doc = yaml.safe_load(path.read_text())
    mutate(doc)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def _boot_id(fleet_dir: Path, instance_id: str) -> str:
    machine = fleet_dir / ".navarch" / "local" / "demo" / "machines" / instance_id / "machine.json"
    if not machine.exists():  # layout without a machines/ level
        machine = fleet_dir / ".navarch" / "local" / "demo" / instance_id / "machine.json"
    return json.loads(machine.read_text())["boot_id"]


def _cycle(navarch) -> str:
    """One report from every node, then one apply; returns apply's output."""
    navarch.ok("local", "tick", "fleet.yaml")
    return navarch.ok("apply", "fleet.yaml", "--auto-approve").out


def _train(navarch) -> dict[str, dict[str, Any]]:
    return {n["node"]: n for n in navarch.nodes("train")}


def _start(navarch) -> str:
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    assert navarch("plan", "fleet.yaml", "--detailed-exitcode").code == 0
    return _train(navarch)[NODE]["instance_id"]


def test_xid79_reboots_returns_then_is_replaced_within_the_window(navarch, fleet_dir) -> None:
    iid = _start(navarch)
    boot = _boot_id(fleet_dir, iid)

    navarch.ok("local", "inject", "fleet.yaml", NODE, "--xid", "79")
    out = _cycle(navarch)
    assert f"~ cordon {NODE}" in out and f"~ drain {NODE}" in out
    assert "+ provision" not in out, out  # a reboot in place gets no surge machine

    out = _cycle(navarch)  # drained (no GPU processes) -> the ladder's first rung
    assert f"~ reboot {NODE}" in out, out
    assert "xid:79, first occurrence; remediation: reboot then replace" in out
    assert "- terminate" not in out
    assert _train(navarch)[NODE]["lifecycle"] == "remediating"
    assert _train(navarch)[NODE]["instance_id"] == iid
    assert _boot_id(fleet_dir, iid) != boot

    outs = [_cycle(navarch) for _ in range(3)]  # return_after 3 healthy reports
    assert f"~ uncordon {NODE}" in outs[-1], outs
    assert "healthy for 3 reports after reboot" in outs[-1]
    assert not any("- terminate" in o or "+ provision" in o for o in outs), outs
    assert navarch("plan", "fleet.yaml", "--detailed-exitcode").code == 0
    nodes = _train(navarch)
    assert sorted(nodes) == ["demo-train-0001", "demo-train-0002", "demo-train-0003"]
    assert nodes[NODE]["instance_id"] == iid and nodes[NODE]["lifecycle"] == "healthy"

    # XID 79 again within ladder_window (24h): the next rung, replace.
    navarch.ok("local", "inject", "fleet.yaml", NODE, "--xid", "79")
    out = _cycle(navarch)
    assert f"~ cordon {NODE}" in out
    assert f"replaces {NODE}" in out, out  # the ladder will replace it: surge now
    out = _cycle(navarch)
    assert f"- terminate {NODE}" in out, out
    assert "xid:79 again within 1d after reboot" in out
    assert f"~ reboot {NODE}" not in out


def test_surge_on_any_surges_a_reboot_and_retires_the_cured_node_without_uncordoning_it(
    navarch, fleet_dir
) -> None:
    _edit(fleet_dir, lambda d: d["pools"]["train"]["health"].update(surge_on="any"))
    iid = _start(navarch)
    navarch.ok("local", "inject", "fleet.yaml", NODE, "--xid", "79")
    out = _cycle(navarch)
    assert f"~ cordon {NODE}" in out and "+ provision demo-train-0004" in out, out
    outs = [_cycle(navarch) for _ in range(4)]  # reboot, then return_after 3
    assert f"~ reboot {NODE}" in outs[0], outs
    # Cured while its surge replacement serves: the once-faulty node goes at once, and the
    # plan that retires it never uncordons it (a scheduler could place a job in between).
    assert f"- terminate {NODE}" in outs[-1] and "scale down" in outs[-1], outs[-1]
    assert not any(f"~ uncordon {NODE}" in o for o in outs), outs
    _cycle(navarch)
    assert navarch("plan", "fleet.yaml", "--detailed-exitcode").code == 0
    nodes = _train(navarch)
    assert sorted(nodes) == ["demo-train-0001", "demo-train-0003", "demo-train-0004"]
    assert iid not in {n["instance_id"] for n in nodes.values()}


def test_a_node_agent_cannot_override_the_pools_ladder(navarch, fleet_dir) -> None:
    """XID 79 in three boots in a row, each outside the pool's ladder_window (1s) but inside
    the agent's 3-day memory: the agent only counts the boots (boots_seen 3, action still
    reboot) and the pool's ladder gives its first rung, a reboot, every time."""
    _edit(
        fleet_dir,
        lambda d: d["pools"]["train"]["health"].update(
            replacement="after-terminate",
            return_after=1,
            ladder_window="1s",
            lemon_after=10,
            remediation=["reboot", "replace"],
        ),
    )
    iid = _start(navarch)
    report_path = fleet_dir / ".navarch" / "store" / "health" / "demo" / "train" / f"{NODE}.json"
    seen = []
    for _ in range(3):
        navarch.ok("local", "inject", "fleet.yaml", NODE, "--xid", "79")
        outs = [_cycle(navarch)]
        report = json.loads(report_path.read_text())
        xid = next(c for c in report["checks"] if c["name"] == "xid")
        seen.append((report["action"], xid["fault_key"]["kind"], xid["boots_seen"]))
        outs += [_cycle(navarch) for _ in range(2)]
        assert f"~ cordon {NODE}" in outs[0], outs
        assert f"~ reboot {NODE}" in outs[1], outs
        assert "xid:79, first occurrence; remediation: reboot then replace" in outs[1]
        assert f"~ uncordon {NODE}" in outs[2], outs
        assert not any("- terminate" in o for o in outs), outs
        time.sleep(1.1)  # the next boot's XID comes after the pool's ladder_window
    assert seen == [("reboot", "xid:79", 1), ("reboot", "xid:79", 2), ("reboot", "xid:79", 3)]
    assert _train(navarch)[NODE]["instance_id"] == iid


def test_after_terminate_provisions_nothing_for_a_reboot(navarch, fleet_dir) -> None:
    _edit(
        fleet_dir,
        lambda d: d["pools"]["train"]["health"].update(
            replacement="after-terminate", return_after=2
        ),
    )
    iid = _start(navarch)
    navarch.ok("local", "inject", "fleet.yaml", NODE, "--xid", "79")
    outs = [_cycle(navarch) for _ in range(2)]
    assert f"~ reboot {NODE}" in outs[1], outs
    outs += [_cycle(navarch) for _ in range(2)]
    assert f"~ uncordon {NODE}" in outs[-1], outs
    assert not any("+ provision" in o or "- terminate" in o for o in outs), outs
    assert navarch("plan", "fleet.yaml", "--detailed-exitcode").code == 0
    nodes = _train(navarch)
    assert len(nodes) == 3 and nodes[NODE]["instance_id"] == iid
    assert {n["lifecycle"] for n in nodes.values()} == {"healthy"}


def test_third_fault_in_a_week_is_a_lemon_replaced_at_once(navarch, fleet_dir) -> None:
    _edit(
        fleet_dir,
        lambda d: d["pools"]["train"]["health"].update(
            replacement="after-terminate", return_after=1
        ),
    )
    iid = _start(navarch)
    # Two different faults (no rung climbed): each is rebooted and returns.
    for xid in ("79", "48"):
        navarch.ok("local", "inject", "fleet.yaml", NODE, "--xid", xid)
        outs = [_cycle(navarch) for _ in range(3)]
        assert f"~ reboot {NODE}" in outs[1], outs
        assert f"~ uncordon {NODE}" in outs[2], outs
    # The third fault within lemon_window (7d, lemon_after 3) skips the cheaper rungs.
    navarch.ok("local", "inject", "fleet.yaml", NODE, "--xid", "79")
    outs = [_cycle(navarch) for _ in range(2)]
    assert f"- terminate {NODE}" in outs[1] and f"~ reboot {NODE}" not in outs[1], outs
    # Local machines sit on simulated hosts, so the count names the host (" on host ...").
    assert "lemon: 3 faults" in outs[1] and "in 7d (lemon_after 3)" in outs[1], outs[1]
    state = json.loads((fleet_dir / ".navarch" / "store" / "state" / "demo.json").read_text())
    assert iid in state["pools"]["train"]["lemons"]
    # status shows it: the pool's lemons, and the ladder state of the node while it goes.
    pool = next(p for p in navarch.status()["pools"] if p["pool"] == "train")
    assert pool["lemons"] == [iid]
    out = navarch.ok("status", "fleet.yaml", "--all").out
    assert f"pool train lemons (uncordon needs --force): {iid}" in out, out
    navarch.ok("status", "fleet.yaml", "--html", "status.html")
    html = (fleet_dir / "status.html").read_text()
    assert "<th>Ladder</th>" in html and f"Lemons (replaced, uncordon needs --force): {iid}" in html


def test_operator_cordon_stays_until_navarch_uncordon(navarch, fleet_dir) -> None:
    _start(navarch)
    navarch.ok("cordon", "fleet.yaml", NODE, "--reason", "fan noise")
    navarch.ok("local", "inject", "fleet.yaml", NODE, "--xid", "79")  # even when sick
    for _ in range(2):
        out = _cycle(navarch)
        assert "No actions this run" in out and "cordoned by an operator: fan noise" in out, out
    assert _train(navarch)[NODE]["lifecycle"] == "operator_cordoned"
    navarch.ok("reboot", "fleet.yaml", NODE)  # the operator's own remedy (XIDs latch per boot)
    navarch.ok("local", "tick", "fleet.yaml")
    navarch.ok("uncordon", "fleet.yaml", NODE)
    assert _train(navarch)[NODE]["lifecycle"] == "healthy"
    assert navarch("plan", "fleet.yaml", "--detailed-exitcode").code == 0


def test_uncordon_refuses_a_lemons_instance_without_force(navarch, fleet_dir) -> None:
    iid = _start(navarch)
    navarch.ok("cordon", "fleet.yaml", NODE, "--reason", "fan noise")
    # As if this instance id had been replaced as a lemon and then adopted again.
    path = fleet_dir / ".navarch" / "store" / "state" / "demo.json"
    state = json.loads(path.read_text())
    state["pools"]["train"]["lemons"] = [iid]
    path.write_text(json.dumps(state))
    run = navarch("uncordon", "fleet.yaml", NODE)
    assert run.code == 1 and "replaced as a lemon" in run.err and "--force" in run.err, run.err
    navarch.ok("uncordon", "fleet.yaml", NODE, "--force")
    assert _train(navarch)[NODE]["lifecycle"] == "healthy"


def test_uncordon_refuses_an_instance_on_a_lemon_host_without_force(navarch, fleet_dir) -> None:
    iid = _start(navarch)
    machine = fleet_dir / ".navarch" / "local" / "demo" / "machines" / iid / "machine.json"
    if not machine.exists():
        machine = fleet_dir / ".navarch" / "local" / "demo" / iid / "machine.json"
    doc = json.loads(machine.read_text())
    machine.write_text(json.dumps({**doc, "host_id": "h-0abc"}))  # as on an EC2 Dedicated Host
    navarch.ok("cordon", "fleet.yaml", NODE, "--reason", "fan noise")
    path = fleet_dir / ".navarch" / "store" / "state" / "demo.json"
    state = json.loads(path.read_text())
    state["pools"]["train"]["lemon_hosts"] = ["h-0abc"]
    path.write_text(json.dumps(state))
    run = navarch("uncordon", "fleet.yaml", NODE)
    assert run.code == 1 and "runs on host h-0abc" in run.err and "--force" in run.err, run.err
    assert _train(navarch)[NODE]["ladder"]["host_id"] == "h-0abc"
    navarch.ok("uncordon", "fleet.yaml", NODE, "--force")


def test_xid48_gpu_reset_keeps_the_boot_and_returns(navarch, fleet_dir) -> None:
    """remediation [reset_gpu, reboot, replace]: XID 48 (catalogue action reset_gpu) gets a
    GPU reset, not a reboot: the local provider's reset clears the fake GPU's faults and the
    agent's latched XIDs on the same boot; reports made after the reset return the node.
    The same fault again climbs to a reboot."""
    _edit(
        fleet_dir,
        lambda d: d["pools"]["train"]["health"].update(
            replacement="after-terminate",
            return_after=2,
            remediation=["reset_gpu", "reboot", "replace"],
        ),
    )
    iid = _start(navarch)
    boot = _boot_id(fleet_dir, iid)
    navarch.ok("local", "inject", "fleet.yaml", NODE, "--xid", "48")
    outs = [_cycle(navarch) for _ in range(2)]
    assert f"~ cordon {NODE}" in outs[0], outs
    assert f"~ reset_gpu {NODE}" in outs[1], outs
    assert "1 to reset GPUs" in outs[1]
    assert f"~ reboot {NODE}" not in outs[1]
    assert _boot_id(fleet_dir, iid) == boot  # a reset is no reboot
    assert _train(navarch)[NODE]["lifecycle"] == "remediating"
    outs = [_cycle(navarch) for _ in range(2)]
    assert f"~ uncordon {NODE}" in outs[-1], outs
    assert "healthy for 2 reports after reset_gpu" in outs[-1]
    assert not any("+ provision" in o or "- terminate" in o for o in outs), outs
    assert _train(navarch)[NODE]["lifecycle"] == "healthy"

    navarch.ok("local", "inject", "fleet.yaml", NODE, "--xid", "48")
    outs = [_cycle(navarch) for _ in range(2)]
    assert f"~ reboot {NODE}" in outs[1], outs
    assert "xid:48 again within 1d after reset_gpu" in outs[1]
    assert _boot_id(fleet_dir, iid) != boot


def test_return_requires_diag_diagnoses_before_the_uncordon(navarch, fleet_dir) -> None:
    """return_requires_diag 2: after the reboot and return_after healthy reports the node is
    diagnosed first (the local provider's fake GPUs pass), shown in status, then returned."""
    _edit(
        fleet_dir,
        lambda d: d["pools"]["train"]["health"].update(
            replacement="after-terminate", return_after=1, return_requires_diag=2
        ),
    )
    _start(navarch)
    navarch.ok("local", "inject", "fleet.yaml", NODE, "--xid", "79")
    outs = [_cycle(navarch) for _ in range(3)]
    assert f"~ reboot {NODE}" in outs[1], outs
    assert f"~ diagnose {NODE}" in outs[2] and f"~ uncordon {NODE}" not in outs[2], outs
    assert "return_requires_diag: dcgmi diag -r 2 first" in outs[2]
    ladder = _train(navarch)[NODE]["ladder"]
    assert ladder["diag"]["state"] == "pass" and ladder["diag"]["why"] == "return"
    assert ladder["rung"] == "reboot" and ladder["faults_in_window"] == 1
    assert "diag -r 2 (return) pass" in navarch.ok("status", "fleet.yaml", "--all").out
    out = _cycle(navarch)
    assert f"~ uncordon {NODE}" in out and "dcgmi diag -r 2 passed" in out, out
    assert _train(navarch)[NODE]["lifecycle"] == "healthy"

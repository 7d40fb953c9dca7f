"""Where nodes sit, end to end on the embedded local provider: every machine lands on a
simulated host of a rack; a node replaced for a hardware fault has its host handed back
(the local provider's faulty_hosts.json) and its history names the host; with
`topology: same_block` its replacement lands in its rack, never on a lemon host; status
shows each node's topology. Every apply follows a `local tick`, as in test_ladder."""

from __future__ import annotations

import json
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


def _replace_only(fleet_dir: Path, **pool: Any) -> None:
    def mutate(d: dict[str, Any]) -> None:
        d["pools"]["train"]["health"].update(remediation=["replace"])
        d["pools"]["train"].update(pool)

    _edit(fleet_dir, mutate)


def _cycle(navarch) -> str:
    navarch.ok("local", "tick", "fleet.yaml")
    return navarch.ok("apply", "fleet.yaml", "--auto-approve").out


def _train(navarch) -> dict[str, dict[str, Any]]:
    return {n["node"]: n for n in navarch.nodes("train")}


def _start(navarch) -> dict[str, Any]:
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    return _train(navarch)[NODE]


def _replace_for_xid79(navarch) -> list[str]:
    navarch.ok("local", "inject", "fleet.yaml", NODE, "--xid", "79")
    outs = [_cycle(navarch) for _ in range(2)]
    assert f"- terminate {NODE}" in outs[1], outs
    return outs


def test_a_node_replaced_for_xid79_hands_its_host_back_and_history_names_it(
    navarch, fleet_dir
) -> None:
    _replace_only(fleet_dir)
    old = _start(navarch)
    host = old["ladder"]["host_id"]
    assert old["topology"] == [old["zone"], old["topology"][1], host]
    assert old["topology"][1].startswith("rack-")
    _replace_for_xid79(navarch)
    reported = json.loads(
        (fleet_dir / ".navarch" / "local" / "demo" / "faulty_hosts.json").read_text()
    )
    assert [(r["host"], r["instance_id"], r["fault"]) for r in reported] == [
        (host, old["instance_id"], "xid:79@gpu0")
    ]
    out = navarch.ok("history", "fleet.yaml", NODE).out
    assert f"host {host}, topology {'/'.join(old['topology'])}" in out, out
    assert f"host {host} reported faulty (xid:79@gpu0) to the local provider" in out, out
    status = navarch.ok("status", "fleet.yaml", "--all").out
    assert "Topology (block first, host last):" in status, status
    for node in _train(navarch).values():
        assert f"  {node['node']}: {'/'.join(node['topology'])}" in status


def test_a_software_fault_replacement_hands_nothing_back(navarch, fleet_dir) -> None:
    _replace_only(fleet_dir)
    _start(navarch)
    navarch.ok("local", "inject", "fleet.yaml", NODE, "--xid", "119")  # GSP firmware
    outs = [_cycle(navarch) for _ in range(3)]
    assert any(f"- terminate {NODE}" in o for o in outs), outs
    assert not (fleet_dir / ".navarch" / "local" / "demo" / "faulty_hosts.json").exists()


def test_same_block_replacement_lands_in_the_rack_and_off_a_lemon_host(navarch, fleet_dir) -> None:
    """A surge replacement launches while its node still holds its host, so its rack's
    lowest free host is the next slot; that host is a lemon (the state's list), so it is
    avoided and the replacement takes the slot after it, in the same zone and rack."""
    _replace_only(fleet_dir, topology="same_block")
    old = _start(navarch)
    zone, rack, host = old["topology"]
    slot = int(host.rsplit("-h", 1)[1])
    lemon = f"{host.rsplit('-h', 1)[0]}-h{slot + 1:02d}"
    path = fleet_dir / ".navarch" / "store" / "state" / "demo.json"
    state = json.loads(path.read_text())
    state["pools"]["train"]["lemon_hosts"] = [lemon]
    path.write_text(json.dumps(state))
    outs = _replace_for_xid79(navarch)
    assert any(
        f"off lemon hosts {lemon}" in out and f"in block {zone}/{rack}" in out for out in outs
    )
    [new] = [
        n
        for name, n in _train(navarch).items()
        if name != NODE and n["zone"] == zone and name > NODE
    ]
    assert new["topology"][:2] == [zone, rack]  # the same zone/rack
    assert new["ladder"]["host_id"] not in (host, lemon)


def test_a_node_on_a_lemon_host_is_flagged_in_status(navarch, fleet_dir) -> None:
    """A cloud that cannot keep a launch off a lemon host may land one there: status says
    so (as if the local provider had been unable to avoid it)."""
    old = _start(navarch)
    host = old["ladder"]["host_id"]
    path = fleet_dir / ".navarch" / "store" / "state" / "demo.json"
    state = json.loads(path.read_text())
    state["pools"]["train"]["lemon_hosts"] = [host]
    path.write_text(json.dumps(state))
    assert _train(navarch)[NODE]["lemon_host"] is True
    out = navarch.ok("status", "fleet.yaml").out
    assert f"  {NODE}: {'/'.join(old['topology'])}  LEMON HOST" in out, out
    assert all(not n["lemon_host"] for n in _train(navarch).values() if n["node"] != NODE)


def test_same_block_replacement_after_terminate_lands_in_the_lost_nodes_rack(
    navarch, fleet_dir
) -> None:
    """replacement: after-terminate launches the replacement only once the node is gone:
    by then the node and its instance have left the inventory, yet the replacement still
    asks for (and lands in) the rack the lost node sat in, on another host than the one
    handed back for the XID 79."""

    def after_terminate(d: dict[str, Any]) -> None:
        d["pools"]["train"]["health"].update(replacement="after-terminate")

    _replace_only(fleet_dir, topology="same_block")
    _edit(fleet_dir, after_terminate)
    old = _start(navarch)
    zone, rack, _ = old["topology"]
    navarch.ok("local", "inject", "fleet.yaml", NODE, "--xid", "79")
    outs = [_cycle(navarch) for _ in range(4)]
    assert any(f"- terminate {NODE}" in o for o in outs), outs
    [asked] = [o for o in outs if "+ provision" in o]
    assert f"(because replaces {NODE}; in block {zone}/{rack})" in asked, outs
    assert f"+ provision demo-train-0004 in {zone}/" in asked, outs  # the node's zone first
    [new] = [n for name, n in _train(navarch).items() if name > NODE and n["zone"] == zone]
    assert new["topology"][:2] == [zone, rack], outs
    assert new["topology"][2] != old["topology"][2], "a host handed back took a machine"

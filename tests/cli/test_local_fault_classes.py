"""The local loop with the network and host fault classes: `local inject --fault` and
`--kernel-line`, a tick, an apply: the class's remediation row acts, and `history` says why."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

# kernel/watchdog.c's format ("watchdog: " pr_fmt, then "BUG: soft lockup - CPU#%d stuck
# for %us! [%s:%d]"); composed: the CPU, seconds, task and pid are ours.
SOFT_LOCKUP = "watchdog: BUG: soft lockup - CPU#3 stuck for 23s! [python3:12345]"
NODE = "demo-train-0002"


def _health(fleet_dir: Path, **health: Any) -> None:
    path = fleet_dir / "fleet.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["pools"]["train"]["health"].update(health)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def test_an_ib_link_flap_is_a_network_fault_replaced_by_the_network_row(navarch):
    # The class row (not the agent's recommended reboot) decides: replace.
    _health(
        navarch.workdir, unhealthy_after=1, remedies=[{"match": "network", "actions": ["replace"]}]
    )
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    inject = navarch.ok("local", "inject", "fleet.yaml", NODE, "--fault", "ib_link_flap")
    assert "network: ib_link_flap" in inject.out
    assert f"{NODE}: unhealthy" in navarch.ok("local", "tick", "fleet.yaml").out

    run = navarch.ok("apply", "fleet.yaml", "--auto-approve")
    assert f"~ cordon {NODE}" in run.out and "+ provision demo-train-0004" in run.out
    assert "reboot" not in run.out
    history = navarch.ok("history", "fleet.yaml", NODE).out
    assert re.search(rf"^\S+  cordon {NODE}  ok  by ", history, re.M), history
    assert "# because network: InfiniBand port mlx5_0/1 flapped" in history
    assert re.search(r"# report #\d+ unhealthy, fault ib_link_flap", history), history


def test_a_soft_lockup_kernel_line_is_a_host_cpu_fault_rebooted_by_the_host_cpu_row(navarch):
    _health(
        navarch.workdir,
        unhealthy_after=1,
        replacement="after-terminate",
        remedies=[{"match": "host_cpu", "actions": ["reboot"]}],
    )
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    # /dev/kmsg's record form ("prio,seq,usec,-;message"), each line its own uptime.
    navarch.ok(
        "local", "inject", "fleet.yaml", NODE, "--kernel-line", f"2,1,10000000,-;{SOFT_LOCKUP}"
    )
    # One soft lockup is counted, not acted on; the third within the hour is a fault.
    assert f"{NODE}: unhealthy" not in navarch.ok("local", "tick", "fleet.yaml").out
    for seq in (2, 3):
        line = f"2,{seq},{seq * 10_000_000},-;{SOFT_LOCKUP}"
        navarch.ok("local", "inject", "fleet.yaml", NODE, "--kernel-line", line)
    assert f"{NODE}: unhealthy" in navarch.ok("local", "tick", "fleet.yaml").out

    first = navarch.ok("apply", "fleet.yaml", "--auto-approve").out
    navarch.ok("local", "tick", "fleet.yaml")
    second = navarch.ok("apply", "fleet.yaml", "--auto-approve").out
    assert f"~ cordon {NODE}" in first
    assert f"~ reboot {NODE}" in first + second
    assert "+ provision" not in first + second and "- terminate" not in first + second
    history = navarch.ok("history", "fleet.yaml", NODE).out
    story = re.findall(rf"^\S+  (\w+) {NODE}  ok  by ", history, re.M)
    assert story[:4] == ["provision", "cordon", "drain", "reboot"], history
    assert "host_cpu:soft_lockup" in history and SOFT_LOCKUP in history, history
    assert "remedies row host_cpu: reboot" in history, history


def test_a_kernel_line_with_a_line_break_and_an_unknown_fault_are_refused(navarch):
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    bad = navarch("local", "inject", "fleet.yaml", NODE, "--kernel-line", "one\ntwo")
    assert bad.code != 0 and "--kernel-line" in bad.err
    bad = navarch("local", "inject", "fleet.yaml", NODE, "--fault", "cosmic_ray")
    assert bad.code != 0 and "network (ib_link_flap)" in bad.err

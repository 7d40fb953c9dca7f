"""No node stuck out of service, and the operator's overrides, end to end on the local
provider: `apply --replace NODE` on an operator-cordoned sick node and past an open circuit
breaker (exactly the named node), `uncordon --force`, and exit 1 for a node the fleet does
not have. Every apply is preceded by `local tick` (each node's agent reports once)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

NODE = "demo-train-0002"


def _cycle(navarch, *extra: str) -> str:
    navarch.ok("local", "tick", "fleet.yaml")
    return navarch.ok("apply", "fleet.yaml", "--auto-approve", *extra).out


def _train(navarch) -> dict[str, dict]:
    return {n["node"]: n for n in navarch.nodes("train")}


def _start(navarch) -> None:
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    assert navarch("plan", "fleet.yaml", "--detailed-exitcode").code == 0


def test_replace_of_a_node_the_fleet_does_not_have_exits_1(navarch) -> None:
    _start(navarch)
    for verb in ("plan", "apply"):
        run = (
            navarch(verb, "fleet.yaml", "--replace", "demo-train-0099", "--auto-approve")
            if verb == "apply"
            else navarch(verb, "fleet.yaml", "--replace", "demo-train-0099")
        )
        assert run.code == 1, (verb, run.out, run.err)
        assert "--replace demo-train-0099: no node of that name in fleet demo" in run.err
    assert len(_train(navarch)) == 3


def test_replace_under_an_open_breaker_passes_it_for_exactly_the_named_node(navarch) -> None:
    """docs/runbook.md#breaker: `apply --replace NODE` passes the breaker for that node: it
    is replaced and the run exits 0, saying the rest stays held (the plan too)."""
    _start(navarch)
    for node in ("demo-train-0001", NODE):  # 2 of 3 sick: the pool's breaker (50%) opens
        navarch.ok("local", "inject", "fleet.yaml", node, "--xid", "79")
    navarch.ok("local", "tick", "fleet.yaml")
    held = navarch("apply", "fleet.yaml", "--auto-approve")
    assert held.code == 3 and "~ cordon" not in held.out, held.out
    plan = navarch("plan", "fleet.yaml", "--replace", NODE, "--detailed-exitcode")
    assert plan.code == 2, plan.out + plan.err
    run = navarch("apply", "fleet.yaml", "--auto-approve", "--replace", NODE)
    assert run.code == 0, run.out + run.err
    assert "Error:" not in run.err, run.err
    assert f"--replace passed it for {NODE} only, the rest stays held" in run.err, run.err
    assert f"~ cordon {NODE}" in run.out and "replacement requested (--replace)" in run.out
    assert "~ cordon demo-train-0001" not in run.out, run.out
    assert "replaces demo-train-0002" in run.out, run.out
    nodes = _train(navarch)
    assert nodes[NODE]["lifecycle"] in ("cordoned", "draining")
    assert nodes["demo-train-0001"]["lifecycle"] == "unhealthy"


def test_an_operator_cordoned_node_that_turns_sick_is_reported_then_replaced(navarch) -> None:
    _start(navarch)
    navarch.ok("cordon", "fleet.yaml", NODE, "--reason", "fan noise")
    navarch.ok("local", "inject", "fleet.yaml", NODE, "--xid", "79")
    out = _cycle(navarch)
    assert f"`navarch apply --replace {NODE}` replaces it" in out, out
    out = _cycle(navarch, "--replace", NODE)
    assert f"~ cordon {NODE}" in out and f"~ drain {NODE}" in out, out
    assert f"replaces {NODE}" in out, out
    outs = [_cycle(navarch) for _ in range(3)]
    assert any(f"- terminate {NODE}" in o for o in outs), outs
    assert NODE not in _train(navarch)


def test_uncordon_force_returns_a_sick_node_and_says_what_it_overrode(navarch) -> None:
    _start(navarch)
    navarch.ok("cordon", "fleet.yaml", NODE, "--reason", "fan noise")
    navarch.ok("local", "inject", "fleet.yaml", NODE, "--xid", "79")
    navarch.ok("local", "tick", "fleet.yaml")
    refused = navarch("uncordon", "fleet.yaml", NODE)
    assert refused.code == 1 and "pass --force" in refused.err, refused.err
    out = navarch.ok("uncordon", "fleet.yaml", NODE, "--force").out
    assert "it was cordoned by an operator" in out, out
    assert "--force overrode: no fresh healthy report (unhealthy" in out, out
    assert _train(navarch)[NODE]["lifecycle"] != "operator_cordoned"


def test_uncordon_of_a_node_the_fleet_does_not_have_exits_1(navarch) -> None:
    _start(navarch)
    run = navarch("uncordon", "fleet.yaml", "demo-train-0099", "--force")
    assert run.code == 1 and "demo-train-0099 is not a node of fleet demo" in run.err, run.err


def test_a_rebooted_node_whose_reports_stay_degraded_climbs_at_return_timeout(
    navarch, fleet_dir: Path
) -> None:
    path = fleet_dir / "fleet.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["pools"]["train"]["health"].update(
        return_timeout="1m", stale_after="1h", offline_after="2h"
    )
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    _start(navarch)
    navarch.ok("local", "inject", "fleet.yaml", NODE, "--xid", "79")
    assert f"~ cordon {NODE}" in _cycle(navarch)
    assert f"~ reboot {NODE}" in _cycle(navarch)
    navarch.ok("local", "inject", "fleet.yaml", NODE, "--temperature", "90")
    out = _cycle(navarch)
    assert f"{NODE}: reports degraded after the reboot" in out, out
    # Five minutes on (the replay clock), still degraded: the reboot did not cure it.
    later = (datetime.now(UTC) + timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    out = navarch.ok("apply", "fleet.yaml", "--auto-approve", env={"NAVARCH_NOW": later}).out
    assert f"- terminate {NODE}" in out and "(return_timeout 1m)" in out, out
    assert f"replaces {NODE}" in out, out


def test_a_node_the_operator_rebooted_returns_to_service_on_its_own_with_the_breaker_open(
    navarch,
) -> None:
    """docs/runbook.md#breaker: `navarch reboot` is the fix for a transient fault, and
    `uncordon` does not apply; a node navarch had drained for the fault (its own reboot
    held by the breaker) returns on healthy reports from its new boot, as after the
    ladder's reboot."""
    _start(navarch)
    navarch.ok("local", "inject", "fleet.yaml", NODE, "--xid", "79")
    assert f"~ drain {NODE}" in _cycle(navarch)
    for node in ("demo-train-0001", "demo-train-0003"):  # 2 of 3 sick: the breaker opens
        navarch.ok("local", "inject", "fleet.yaml", node, "--xid", "79")
    navarch.ok("local", "tick", "fleet.yaml")
    held = navarch("apply", "fleet.yaml", "--auto-approve")
    assert held.code == 3 and f"{NODE}: reboot held back" in held.out, held.out
    out = navarch.ok("reboot", "fleet.yaml", NODE).out
    assert "returns to service on healthy reports from its new boot" in out, out
    outs: list[str] = []
    for _ in range(4):
        navarch.ok("local", "tick", "fleet.yaml")
        outs.append(navarch("apply", "fleet.yaml", "--auto-approve").out)
    assert any(f"~ uncordon {NODE}" in o for o in outs), outs
    assert not any(f"~ reboot {NODE}" in o for o in outs), outs  # rebooted once, by hand
    assert _train(navarch)[NODE]["lifecycle"] == "healthy"
    assert _train(navarch)["demo-train-0001"]["lifecycle"] == "unhealthy"  # still held

"""Acceptance on the embedded local provider, through the CLI: a node launched into a pool
with acceptance on serves only after its suite passes; one whose tools report a slow
fabric, or another driver than the pool's, is replaced and never serves."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

NEW = "demo-train-0004"


def _edit(fleet_dir: Path, mutate) -> None:
    path = fleet_dir / "fleet.yaml"
    doc = yaml.safe_load(path.read_text())
    mutate(doc)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def _lifecycles(navarch) -> dict[str, str]:
    return {n["node"]: n["lifecycle"] for n in navarch.nodes("train")}


def _node(navarch, name: str) -> dict:
    return next(n for n in navarch.nodes("train") if n["node"] == name)


def _scale_up_a_proven_pool(navarch) -> None:  # noqa: ANN001
    """The pool's three nodes run acceptance and serve; then target 4 launches NEW."""
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    _edit(navarch.workdir, lambda d: d["pools"]["train"]["nodes"].update(target=4))
    navarch.ok("apply", "fleet.yaml", "--auto-approve")


def test_a_new_node_with_a_slow_nccl_fails_acceptance_is_replaced_and_never_serves(navarch):
    _edit(navarch.workdir, lambda d: d["pools"]["train"].update(acceptance={"enabled": True}))
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    navarch.ok("apply", "fleet.yaml", "--auto-approve")  # the first nodes' acceptance passed
    assert set(_lifecycles(navarch).values()) == {"healthy"}

    _edit(navarch.workdir, lambda d: d["pools"]["train"]["nodes"].update(target=4))
    assert f"+ provision {NEW}" in navarch.ok("apply", "fleet.yaml", "--auto-approve").out
    # Injected after launch, before the node's first tick: its first acceptance sees it. Each
    # fake tool run takes 30 s of the agent's 60 s tick budget, so the suite spans ticks.
    inject = navarch.ok(
        "local",
        "inject",
        "fleet.yaml",
        NEW,
        "--acceptance",
        "nccl_busbw_gbps=120",
        "--acceptance",
        "tool_time_s=30",
    )
    assert "nccl_busbw_gbps=120" in inject.out
    seen = [_lifecycles(navarch)[NEW]]
    for _ in range(2):
        navarch.ok("local", "tick", "fleet.yaml")
        node = _node(navarch, NEW)
        seen.append(node["lifecycle"])
        assert node["lifecycle"] == "acceptance", node
        assert "acceptance running" in node["reason"]
        # In acceptance: counted against max, not serving, held (not replaced, no new node).
        plan = navarch.ok("plan", "fleet.yaml").out
        assert NEW not in plan and "provision" not in plan
    status = navarch.ok("status", "fleet.yaml").out
    assert "acceptance 1" in status and "healthy 3" in status
    navarch.ok("local", "tick", "fleet.yaml")
    node = _node(navarch, NEW)
    seen.append(node["lifecycle"])
    assert node["lifecycle"] == "unhealthy"
    # The test, the figure and the threshold (0.8 of the serving nodes' median, 480.12 GB/s).
    assert "nccl_all_reduce 120 GB/s" in node["reason"]
    assert "threshold 384.096 GB/s" in node["reason"]

    plan = navarch.ok("plan", "fleet.yaml").out
    assert f"~ cordon {NEW}" in plan and "+ provision demo-train-0005" in plan
    doc = json.loads(navarch.ok("plan", "fleet.yaml", "--json").out)
    codes = {(a["action"], a["node"]): a["action_reason"] for a in doc["actions"]}
    assert codes[("cordon", NEW)] == "acceptance_failed"
    applied = navarch.ok(
        "apply", "fleet.yaml", "--auto-approve", "--metrics-textfile", "m.prom"
    ).out
    assert f"Dead on arrival: 1 (failed acceptance: {NEW})" in applied
    prom = (navarch.workdir / "m.prom").read_text()
    assert 'navarch_last_apply_dead_on_arrival{fleet="demo",pool="train"} 1.0' in prom
    seen.append(_lifecycles(navarch)[NEW])
    navarch.ok("local", "tick", "fleet.yaml")
    run = navarch.ok("apply", "fleet.yaml", "--auto-approve")
    assert f"- terminate {NEW}" in run.out
    assert NEW not in _lifecycles(navarch)
    assert not {"healthy", "degraded"} & set(seen), seen

    history = navarch.ok("history", "fleet.yaml", NEW).out
    assert "nccl_all_reduce 120 GB/s" in history and "threshold 384.096 GB/s" in history


def test_a_new_node_with_another_driver_is_held_as_drift_of_the_image_not_replaced(navarch):
    _edit(navarch.workdir, lambda d: d["pools"]["train"].update(acceptance={"enabled": True}))
    _scale_up_a_proven_pool(navarch)
    navarch.ok("local", "inject", "fleet.yaml", NEW, "--acceptance", "driver=550.54.14")
    navarch.ok("local", "tick", "fleet.yaml")
    node = _node(navarch, NEW)
    assert node["lifecycle"] == "acceptance"
    assert "drift: driver 550.54.14" in node["reason"]
    assert "majority of 3 serving nodes" in node["reason"]
    assert "a finding about the image, not the hardware" in node["reason"]


def test_drift_from_the_serving_majority_names_the_odd_component_and_warn_lets_it_serve(navarch):
    # No declared versions: the baseline is the majority of the pool's serving nodes.
    _edit(
        navarch.workdir,
        lambda d: d["pools"]["train"].update(acceptance={"enabled": True, "drift": "warn"}),
    )
    _scale_up_a_proven_pool(navarch)
    navarch.ok("local", "inject", "fleet.yaml", NEW, "--acceptance", "cuda=12.4")
    navarch.ok("local", "tick", "fleet.yaml")
    node = _node(navarch, NEW)
    assert node["lifecycle"] == "healthy", node
    assert "drift: cuda 12.4 (pool 12.8, majority of 3 serving nodes)" in node["reason"]
    assert "driver" not in node["reason"]
    assert f"cordon {NEW}" not in navarch.ok("plan", "fleet.yaml").out


def test_an_unknown_acceptance_key_names_the_flag_and_the_keys(navarch):
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    run = navarch("local", "inject", "fleet.yaml", "demo-train-0001", "--acceptance", "speed=9")
    assert run.code != 0
    assert "--acceptance" in run.err and "nccl_busbw_gbps" in run.err
    assert "Traceback" not in run.err


def test_an_inconclusive_acceptance_holds_the_node_in_acceptance_and_status_says_why(navarch):
    _edit(navarch.workdir, lambda d: d["pools"]["train"].update(acceptance={"enabled": True}))
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok(
        "local", "inject", "fleet.yaml", "demo-train-0001", "--acceptance", "dcgm_diag=timeout"
    )
    navarch.ok("local", "tick", "fleet.yaml")
    node = _node(navarch, "demo-train-0001")
    assert node["lifecycle"] == "acceptance"
    assert "acceptance inconclusive: dcgm_diag" in node["reason"]
    text = navarch.ok("status", "fleet.yaml").out
    assert "acceptance" in text and "acceptance inconclusive" in text
    # Held, not replaced: doubt never replaces before the acceptance deadline.
    plan = navarch.ok("plan", "fleet.yaml").out
    assert "cordon demo-train-0001" not in plan


def test_a_failed_acceptance_counts_against_its_host_so_a_second_makes_it_a_lemon_host(navarch):
    _edit(navarch.workdir, lambda d: d["pools"]["train"].update(acceptance={"enabled": True}))
    _scale_up_a_proven_pool(navarch)
    navarch.ok("local", "inject", "fleet.yaml", NEW, "--acceptance", "dcgm_diag=fail")
    navarch.ok("local", "tick", "fleet.yaml")
    navarch.ok("apply", "fleet.yaml", "--auto-approve")

    state = json.loads((navarch.workdir / ".navarch" / "store" / "state" / "demo.json").read_text())
    faults = state["pools"]["train"]["host_faults"]
    host = _node(navarch, NEW)["ladder"]["host_id"]
    assert host and [f[:2] for f in faults] == [[host, "acceptance"]]
    # One failure is the instance's; a second on the same host makes it the host's.
    assert (
        host
        not in json.loads(navarch.ok("status", "fleet.yaml", "--json").out)["pools"][0][
            "lemon_hosts"
        ]
    )
    state["pools"]["train"]["host_faults"] = faults * 2
    (navarch.workdir / ".navarch" / "store" / "state" / "demo.json").write_text(json.dumps(state))
    assert (
        host
        in json.loads(navarch.ok("status", "fleet.yaml", "--json").out)["pools"][0]["lemon_hosts"]
    )

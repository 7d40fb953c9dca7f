"""Every key of fleet.yaml converges, end to end on the embedded local provider.

Each test edits fleet.yaml as a PR would, checks that `plan --detailed-exitcode` exits 2
and names the drift per node, then runs `local tick` + `apply` until the plan is empty,
asserting at every step that no more than max_unavailable nodes are out of service and no
more than max + max_surge nodes exist.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

OUT_OF_SERVICE = {"cordoned", "draining", "terminating"}


def edit_fleet(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    doc = yaml.safe_load(path.read_text())
    change(doc)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def small_train(doc: dict[str, Any]) -> None:
    """Two train nodes (max 2, max_surge 1) keep each rolling test short."""
    doc["pools"]["train"]["nodes"] = {"min": 0, "target": 2, "max": 2}


def converge(navarch, fleet_dir: Path, pool: str, max_steps: int = 14) -> list[str]:
    """tick + apply until `plan --detailed-exitcode` exits 0; returns the apply outputs.
    Checks the disruption budget and max + max_surge at every step."""
    spec = yaml.safe_load((fleet_dir / "fleet.yaml").read_text())["pools"][pool]
    health = spec.get("health", {})
    budget = health.get("max_unavailable", 1)
    ceiling = spec["nodes"]["max"] + health.get("max_surge", 1)
    outputs = []
    for _ in range(max_steps):
        navarch.ok("local", "tick", "fleet.yaml")
        if navarch("plan", "fleet.yaml", "--detailed-exitcode").code == 0:
            return outputs
        outputs.append(navarch.ok("apply", "fleet.yaml", "--auto-approve").out)
        nodes = navarch.nodes(pool)
        assert len(nodes) <= ceiling, f"{len(nodes)} nodes > max + max_surge {ceiling}"
        out = [n["node"] for n in nodes if n["lifecycle"] in OUT_OF_SERVICE]
        assert len(out) <= budget, f"out of service {out} > max_unavailable {budget}"
    raise AssertionError("not converged:\n" + "\n=====\n".join(outputs[-3:]))


DRIFTS = {
    "instance_type": (
        lambda d: d["pools"]["train"].update(instance_types=["sim-a100x8"]),
        "instance type sim-h100x8 is no longer in instance_types",
        lambda n: n["instance_type"] == "sim-a100x8",
    ),
    "zone": (
        lambda d: d["pools"]["train"].update(zones=["sim-1b"]),
        "zone sim-1a is no longer in zones",
        lambda n: n["zone"] == "sim-1b",
    ),
    "capacity": (
        lambda d: d["pools"]["train"].update(capacity="spot"),
        "capacity on-demand, pool now spot",
        None,
    ),
    "launch_settings": (
        lambda d: d["pools"]["train"].update(gpus_per_node=4),
        "launch settings changed (gpus_per_node 8 -> 4)",
        None,
    ),
}


@pytest.mark.parametrize("kind", sorted(DRIFTS))
def test_each_drift_kind_is_planned_and_converges(navarch, fleet_dir: Path, kind: str) -> None:
    change, reason, matches = DRIFTS[kind]
    edit_fleet(fleet_dir / "fleet.yaml", small_train)
    if kind == "zone":  # both nodes in sim-1a first (a spread pool would put one in sim-1b)
        edit_fleet(
            fleet_dir / "fleet.yaml", lambda d: d["pools"]["train"].update(zone_policy="pack")
        )
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    assert navarch("plan", "fleet.yaml", "--detailed-exitcode").code == 0
    before = {n["node"] for n in navarch.nodes("train")}

    edit_fleet(fleet_dir / "fleet.yaml", change)
    plan = navarch("plan", "fleet.yaml", "--detailed-exitcode")
    assert plan.code == 2, plan.out + plan.err
    assert reason in plan.out
    doc = navarch.ok("plan", "fleet.yaml", "--json").out
    drifts = {n["node"]: n["drift"] for n in yaml.safe_load(doc)["nodes"] if n["pool"] == "train"}
    assert all(reason in (drifts[node] or "") for node in before), drifts

    converge(navarch, fleet_dir, "train")
    after = navarch.nodes("train")
    assert len(after) == 2 and not before & {n["node"] for n in after}
    assert {n["lifecycle"] for n in after} == {"healthy"}
    if matches is not None:
        assert all(matches(n) for n in after), after
    # infer was never touched
    assert [n["node"] for n in navarch.nodes("infer")] == ["demo-infer-0001", "demo-infer-0002"]


def test_changed_label_is_updated_in_place(navarch, fleet_dir: Path) -> None:
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    ids = {n["node"]: n["instance_id"] for n in navarch.nodes("train")}
    edit_fleet(
        fleet_dir / "fleet.yaml", lambda d: d["pools"]["train"].update(labels={"team": "ml"})
    )
    plan = navarch("plan", "fleet.yaml", "--detailed-exitcode")
    assert plan.code == 2
    assert "~ update tags demo-train-0001" in plan.out and "team=ml" in plan.out
    assert "+ provision" not in plan.out and "~ cordon" not in plan.out
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    assert navarch("plan", "fleet.yaml", "--detailed-exitcode").code == 0
    assert {n["node"]: n["instance_id"] for n in navarch.nodes("train")} == ids


def test_on_replace_strategy_leaves_drift_and_says_so(navarch, fleet_dir: Path) -> None:
    navarch.ok("apply", "fleet.yaml", "--auto-approve")

    def change(d: dict[str, Any]) -> None:
        d["pools"]["train"].update(instance_types=["sim-a100x8"], update={"strategy": "on-replace"})

    edit_fleet(fleet_dir / "fleet.yaml", change)
    plan = navarch("plan", "fleet.yaml", "--detailed-exitcode")
    assert plan.code == 2
    assert "No changes" not in plan.out
    assert "update strategy on-replace leaves it" in plan.out
    assert "Plan:" not in plan.out  # nothing to do this run


def test_removed_pool_nodes_are_orphans_drained_then_terminated(navarch, fleet_dir: Path) -> None:
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    foreign = navarch.ok("local", "launch-foreign", "fleet.yaml").out.split()[3]
    edit_fleet(fleet_dir / "fleet.yaml", lambda d: d["pools"].pop("infer"))
    plan = navarch("plan", "fleet.yaml", "--detailed-exitcode")
    assert plan.code == 2
    assert "~ cordon demo-infer-0001" in plan.out and "terminate demo-infer" not in plan.out
    assert "pool infer was removed from fleet.yaml; draining before terminate" in plan.out
    status = navarch.status()
    assert {o["node"] for o in status["orphans"]} == {"demo-infer-0001", "demo-infer-0002"}
    assert [f["instance_id"] for f in status["foreign"]] == [foreign]
    for _ in range(8):
        navarch.ok("apply", "fleet.yaml", "--auto-approve")
        # the removed pool's max_unavailable (1): never both orphans out of service at once
        leaving = [o for o in navarch.status()["orphans"] if "draining before" in o["reason"]]
        assert len(leaving) <= 1, leaving
        navarch.ok("local", "tick", "fleet.yaml")
        if navarch("plan", "fleet.yaml", "--detailed-exitcode").code == 0:
            break
    status = navarch.status()
    assert status["orphans"] == []
    assert [f["instance_id"] for f in status["foreign"]] == [foreign]
    assert navarch("plan", "fleet.yaml", "--detailed-exitcode").code == 0


def test_removing_every_pool_trips_the_orphan_guard_once(navarch, fleet_dir: Path) -> None:
    def big(d: dict[str, Any]) -> None:
        d["pools"]["train"]["nodes"] = {"min": 0, "target": 8, "max": 8}
        d["pools"]["infer"]["nodes"] = {"min": 0, "target": 4, "max": 4}

    edit_fleet(fleet_dir / "fleet.yaml", big)
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    edit_fleet(fleet_dir / "fleet.yaml", lambda d: d.update(pools={}))
    run = navarch("apply", "fleet.yaml", "--auto-approve")
    assert run.code == 3, run.out + run.err
    assert "orphan guard" in run.err and "--allow-destroy" in run.err
    assert "cordon" not in run.out
    assert len(navarch.status()["orphans"]) == 12  # nothing touched
    run = navarch("apply", "fleet.yaml", "--auto-approve", "--allow-destroy")
    assert run.code == 0, run.out + run.err
    assert "~ cordon demo-train-0001" in run.out and "~ cordon demo-infer-0001" in run.out
    navarch.ok("local", "tick", "fleet.yaml")
    # The retirement is under way: the next (cron) run goes on without the flag.
    run = navarch("apply", "fleet.yaml", "--auto-approve")
    assert run.code == 0, run.out + run.err
    assert "- terminate demo-train-0001" in run.out and "- terminate demo-infer-0001" in run.out
    assert len(navarch.status()["orphans"]) == 10


def test_destroy_leaves_no_instance(navarch, fleet_dir: Path) -> None:
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    first = navarch("destroy", "fleet.yaml", "--auto-approve")
    assert first.code == 2, first.out + first.err  # cordoned and draining
    assert "~ cordon demo-train-0001" in first.out and "still draining" in first.out
    navarch.ok("local", "tick", "fleet.yaml")  # agents report no GPU processes: drained
    done = navarch.ok("destroy", "fleet.yaml", "--auto-approve")
    assert "Destroy complete" in done.out
    assert navarch.nodes() == []
    assert not list((fleet_dir / ".navarch" / "local").glob("machines/*"))
    assert list((fleet_dir / ".navarch" / "store" / "events").rglob("*.jsonl*"))


def test_destroy_force_one_pool(navarch, fleet_dir: Path) -> None:
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    run = navarch.ok("destroy", "fleet.yaml", "--pool", "infer", "--force", "--auto-approve")
    assert "- terminate demo-infer-0001" in run.out
    assert navarch.nodes("infer") == []
    assert len(navarch.nodes("train")) == 3


def test_targeted_apply_and_replace(navarch, fleet_dir: Path) -> None:
    run = navarch.ok("apply", "fleet.yaml", "--auto-approve", "--pool", "infer")
    assert "demo-infer-0001" in run.out and "demo-train" not in run.out
    assert navarch.nodes("train") == []
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    plan = navarch.ok("plan", "fleet.yaml", "--replace", "demo-train-0002").out
    assert "~ cordon demo-train-0002" in plan and "replacement requested (--replace)" in plan
    assert "+ provision demo-train-0004" in plan


def test_usage_error_does_not_exit_2(navarch) -> None:
    run = navarch("plan", "fleet.yaml", "--no-such-flag")
    assert run.code == 1


def test_status_summary_lists_only_nodes_that_are_not_healthy(navarch) -> None:
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    navarch.ok("local", "inject", "fleet.yaml", "demo-train-0002", "--xid", "79")
    navarch.ok("local", "tick", "fleet.yaml")
    out = navarch.ok("status", "fleet.yaml").out
    assert "pool train: 3 nodes (healthy 2, unhealthy 1)" in out
    assert "demo-train-0002" in out and "demo-train-0001" not in out
    assert "4 healthy nodes not listed (navarch status --all lists every node)" in out
    every = navarch.ok("status", "fleet.yaml", "--all").out
    assert all(f"demo-train-000{i}" in every for i in (1, 2, 3))

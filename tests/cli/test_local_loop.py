"""The whole loop on the embedded local provider, through the CLI as a subprocess:
fleet.yaml -> plan -> apply -> agents -> health -> replacement."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from navarch.reconcile.render import NO_CHANGES


def _edit(fleet_dir: Path, mutate) -> None:
    path = fleet_dir / "fleet.yaml"
    doc = yaml.safe_load(path.read_text())
    mutate(doc)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def test_apply_converges_then_plan_has_no_changes(navarch):
    run = navarch.ok("apply", "fleet.yaml", "--auto-approve")
    assert "Apply complete: 5 succeeded, 0 failed" in run.out
    plan = navarch("plan", "fleet.yaml", "--detailed-exitcode")
    assert plan.code == 0, plan.out + plan.err
    assert NO_CHANGES in plan.out
    status = navarch.status()
    counts = {p["pool"]: len(p["nodes"]) for p in status["pools"]}
    assert counts == {"train": 3, "infer": 2}
    names = sorted(n["node"] for n in navarch.nodes("train"))
    assert names == ["demo-train-0001", "demo-train-0002", "demo-train-0003"]


def test_second_apply_is_a_noop(navarch):
    navarch.ok("apply", "fleet.yaml", "--auto-approve")

    def instances() -> set[tuple[str, str]]:
        return {(n["node"], n["instance_id"]) for n in navarch.nodes()}

    before = instances()
    run = navarch.ok("apply", "fleet.yaml", "--auto-approve")
    assert NO_CHANGES in run.out
    assert instances() == before and len(before) == 5


def test_agents_report_healthy(navarch):
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    tick = navarch.ok("local", "tick", "fleet.yaml")
    assert tick.out.count(": healthy") == 5
    assert {n["lifecycle"] for n in navarch.nodes()} == {"healthy"}


def test_xid79_is_cordoned_replaced_drained_and_terminated(navarch):
    # A ladder without reboot: the replace path (tests/cli/test_ladder.py has the reboot).
    _edit(navarch.workdir, lambda d: d["pools"]["train"]["health"].update(remediation=["replace"]))
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    navarch.ok("local", "inject", "fleet.yaml", "demo-train-0002", "--xid", "79", "--gpu", "3")
    navarch.ok("local", "tick", "fleet.yaml")

    plan = navarch("plan", "fleet.yaml", "--detailed-exitcode")
    assert plan.code == 2
    assert "~ cordon demo-train-0002" in plan.out
    assert "+ provision demo-train-0004" in plan.out
    assert "XID 79" in plan.out and "fallen off the bus" in plan.out
    doc = json.loads(navarch.ok("plan", "fleet.yaml", "--json").out)
    kinds = [(a["action"], a["node"]) for a in doc["actions"]]
    assert kinds == [
        ("cordon", "demo-train-0002"),
        ("drain", "demo-train-0002"),
        ("provision", "demo-train-0004"),
    ]

    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    lifecycles = {n["node"]: n["lifecycle"] for n in navarch.nodes("train")}
    assert lifecycles["demo-train-0002"] == "draining"
    # The drain finishes once the node's agent reports no GPU processes.
    navarch.ok("local", "tick", "fleet.yaml")
    run = navarch.ok("apply", "fleet.yaml", "--auto-approve")
    assert "- terminate demo-train-0002" in run.out
    assert "drain finished" in run.out
    navarch.ok("local", "tick", "fleet.yaml")
    nodes = navarch.nodes("train")
    assert sorted(n["node"] for n in nodes) == [
        "demo-train-0001",
        "demo-train-0003",
        "demo-train-0004",
    ]
    assert {n["lifecycle"] for n in nodes} == {"healthy"}
    assert navarch("plan", "fleet.yaml", "--detailed-exitcode").code == 0


def test_drain_waits_for_gpu_processes(navarch):
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok(
        "local", "inject", "fleet.yaml", "demo-train-0001", "--xid", "48", "--processes", "2"
    )
    navarch.ok("local", "tick", "fleet.yaml")
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    plan = navarch.ok("plan", "fleet.yaml")
    assert "terminate" not in plan.out
    assert "demo-train-0001: draining for" in plan.out
    navarch.ok("local", "inject", "fleet.yaml", "demo-train-0001", "--processes", "0")
    navarch.ok("local", "tick", "fleet.yaml")
    # Drained: XID 48's remedy (reset_gpu) is the ladder's first rung, done as a reboot.
    assert "~ reboot demo-train-0001" in navarch.ok("plan", "fleet.yaml").out


def test_drain_timeout_terminates_a_busy_node(navarch):
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok(
        "local", "inject", "fleet.yaml", "demo-train-0001", "--xid", "79", "--processes", "1"
    )
    navarch.ok("local", "tick", "fleet.yaml")
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    later = {"NAVARCH_NOW": _in_minutes(31)}
    navarch.ok("local", "tick", "fleet.yaml", env=later)  # the other agents keep reporting
    plan = navarch.ok("plan", "fleet.yaml", env=later)
    assert "- terminate demo-train-0001" in plan.out
    assert "drain_timeout (30m) passed" in plan.out


def test_application_xids_cause_no_action(navarch):
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    for code in ("13", "31", "43", "13", "31", "43", "45", "68"):
        navarch.ok("local", "inject", "fleet.yaml", "demo-train-0001", "--xid", code)
    navarch.ok("local", "tick", "fleet.yaml")
    navarch.ok("local", "tick", "fleet.yaml")
    plan = navarch("plan", "fleet.yaml", "--detailed-exitcode")
    assert plan.code == 0, plan.out
    node = next(n for n in navarch.nodes() if n["node"] == "demo-train-0001")
    assert node["lifecycle"] == "healthy"


def test_unhealthy_counts_each_report_once(navarch):
    _edit(navarch.workdir, lambda d: d["pools"]["train"]["health"].update(unhealthy_after=2))
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "inject", "fleet.yaml", "demo-train-0003", "--temperature", "99")
    navarch.ok("local", "tick", "fleet.yaml")
    # One unhealthy report: plan and apply many times, the count stays at 1 of 2.
    for _ in range(3):
        assert "cordon" not in navarch.ok("plan", "fleet.yaml").out
        navarch.ok("apply", "fleet.yaml", "--auto-approve")
    node = next(n for n in navarch.nodes() if n["node"] == "demo-train-0003")
    assert node["lifecycle"] == "degraded"
    assert "unhealthy report 1 of 2" in node["reason"]
    # A second, distinct report reaches the threshold.
    navarch.ok("local", "tick", "fleet.yaml")
    assert "~ cordon demo-train-0003" in navarch.ok("plan", "fleet.yaml").out


def test_three_agent_checks_between_two_runs_reach_unhealthy_after(navarch):
    # unhealthy_after counts the agent's checks, not the reconciler's runs: three checks
    # between two applies are three observations of the fault.
    _edit(navarch.workdir, lambda d: d["pools"]["train"]["health"].update(unhealthy_after=2))
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "inject", "fleet.yaml", "demo-train-0002", "--ecc", "3")
    for _ in range(3):
        navarch.ok("local", "tick", "fleet.yaml")
    run = navarch.ok("apply", "fleet.yaml", "--auto-approve")
    assert "cordon demo-train-0002" in run.out
    node = next(n for n in navarch.nodes() if n["node"] == "demo-train-0002")
    assert node["lifecycle"] not in ("healthy", "degraded"), node


def test_circuit_breaker_stops_cordons_when_half_a_pool_is_sick(navarch):
    _edit(navarch.workdir, lambda d: d["pools"]["train"]["nodes"].update(min=4, target=4, max=6))
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    for node in ("demo-train-0001", "demo-train-0002"):
        navarch.ok("local", "inject", "fleet.yaml", node, "--xid", "79")
    navarch.ok("local", "tick", "fleet.yaml")
    plan = navarch("plan", "fleet.yaml")
    assert plan.code == 3
    assert "circuit_breaker" in plan.out and "2 of 4 nodes" in plan.out
    assert "cordon" not in plan.out.split("Held back")[0]
    run = navarch("apply", "fleet.yaml", "--auto-approve")
    assert run.code == 3
    assert "circuit breaker open" in run.err
    assert {n["lifecycle"] for n in navarch.nodes("train")} == {"healthy", "unhealthy"}


def test_silent_agent_goes_stale_then_offline_and_is_replaced(navarch):
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    navarch.ok("local", "inject", "fleet.yaml", "demo-train-0002", "--silent")
    plan = navarch.ok("plan", "fleet.yaml", env={"NAVARCH_NOW": _in_minutes(5)})
    assert "No changes" in plan.out  # stale is shown, never acted on
    node = next(n for n in navarch.nodes() if n["node"] == "demo-train-0002")
    assert node["lifecycle"] == "healthy"
    later = {"NAVARCH_NOW": _in_minutes(11)}
    navarch.ok("local", "tick", "fleet.yaml", env=later)  # every other agent still reports
    plan = navarch.ok("plan", "fleet.yaml", env=later)
    assert "~ cordon demo-train-0002" in plan.out
    assert "no fresh report for 11m" in plan.out


def test_fleet_wide_silence_trips_the_breaker(navarch):
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    # Nobody reports for 11 minutes: that smells of a broken store or network.
    plan = navarch("plan", "fleet.yaml", env={"NAVARCH_NOW": _in_minutes(11)})
    assert plan.code == 3
    assert "5 of 5 nodes in the fleet are unhealthy, stale or offline" in plan.out
    assert "cordon" not in plan.out.split("Held back")[0]


def _in_minutes(minutes: int) -> str:
    from datetime import UTC, datetime, timedelta

    return (datetime.now(UTC) + timedelta(minutes=minutes)).isoformat()


def test_foreign_machine_is_left_alone(navarch):
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    foreign = navarch.ok("local", "launch-foreign", "fleet.yaml").out.split()[3]
    plan = json.loads(navarch.ok("plan", "fleet.yaml", "--json").out)
    assert plan["actions"] == []
    assert {"provider": "sim", "instance_id": foreign} in plan["foreign"]
    assert foreign in navarch.ok("status", "fleet.yaml").out


def test_saved_plan_applies_and_stale_plan_is_refused(navarch):
    run = navarch("plan", "fleet.yaml", "--out", "p.json", "--detailed-exitcode")
    assert run.code == 2
    navarch.ok("apply", "p.json")
    assert len(navarch.nodes()) == 5
    # A plan saved before the world moved on is refused.
    navarch.ok("local", "inject", "fleet.yaml", "demo-train-0001", "--xid", "79")
    navarch.ok("local", "tick", "fleet.yaml")
    navarch("plan", "fleet.yaml", "--out", "old.json")
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    stale = navarch("apply", "old.json")
    assert stale.code == 1
    assert "Saved plan is stale" in stale.err


def test_a_plan_of_freshly_verified_reports_applies_from_the_report_cache(navarch):
    # The plan fetches and verifies the new reports and caches their summaries; the apply
    # takes them from the cache, and the saved plan's fingerprint still matches exactly.
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "inject", "fleet.yaml", "demo-train-0001", "--xid", "79")
    navarch.ok("local", "tick", "fleet.yaml")
    assert navarch("plan", "fleet.yaml", "--out", "p.json", "--detailed-exitcode").code == 2
    cache = navarch.workdir / ".navarch/store/state/demo.reports-cache.json"
    assert "demo-train-0001" in cache.read_text()
    run = navarch.ok("apply", "p.json")
    assert "cordon demo-train-0001" in run.out
    assert NO_CHANGES not in run.out


def test_apply_asks_for_yes(navarch):
    run = navarch("apply", "fleet.yaml", input="no\n")
    assert run.code == 1 and "Apply cancelled" in run.out
    assert navarch.nodes() == []
    navarch.ok("apply", "fleet.yaml", input="yes\n")
    assert len(navarch.nodes()) == 5


def test_lock_held_exits_4_and_force_unlock_frees_it(navarch, fleet_dir):
    from datetime import UTC, datetime

    from navarch.fleet.load import load_fleet
    from navarch.reconcile.state import acquire_lock
    from navarch.stores import open_store

    spec = load_fleet(fleet_dir / "fleet.yaml")
    store = open_store(spec.store_url)
    lock = acquire_lock(
        store, spec.name, "apply (test)", 900, datetime.now(UTC), holder="ci@box pid 1"
    )
    run = navarch("apply", "fleet.yaml", "--auto-approve")
    assert run.code == 4
    assert "ci@box pid 1" in run.err and lock.lock_id in run.err
    assert navarch("force-unlock", "fleet.yaml", "wrong-id").code == 1
    navarch.ok("force-unlock", "fleet.yaml", lock.lock_id)
    navarch.ok("apply", "fleet.yaml", "--auto-approve")


def test_capacity_falls_over_to_the_next_zone_and_is_remembered(navarch):
    _edit(
        navarch.workdir, lambda d: d["providers"]["sim"].update(unavailable=["sim-1a/sim-h100x8"])
    )
    run = navarch.ok("apply", "fleet.yaml", "--auto-approve")
    assert "in sim-1b/sim-h100x8 after 1 zone/type without capacity" in run.out
    zones = {n["zone"] for n in navarch.nodes("train")}
    assert zones == {"sim-1b"}
    # The exhausted place is remembered: the next plan starts at sim-1b (surge_on: any, so
    # XID 79's reboot launches a surge replacement).
    _edit(navarch.workdir, lambda d: d["pools"]["train"]["health"].update(surge_on="any"))
    navarch.ok("local", "inject", "fleet.yaml", "demo-train-0001", "--xid", "79")
    navarch.ok("local", "tick", "fleet.yaml")
    assert (
        "+ provision demo-train-0004 in sim-1b/sim-h100x8" in navarch.ok("plan", "fleet.yaml").out
    )


def test_forged_report_is_rejected_and_counted(navarch, fleet_dir):
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    report_path = fleet_dir / ".navarch/store/health/demo/train/demo-train-0001.json"
    report = json.loads(report_path.read_text())
    report.update(status="unhealthy", sequence=report["sequence"] + 1)
    report_path.write_text(json.dumps(report))
    plan = navarch("plan", "fleet.yaml", "--detailed-exitcode")
    assert plan.code == 0
    status = navarch.status()
    node = next(n for n in navarch.nodes() if n["node"] == "demo-train-0001")
    assert node["lifecycle"] == "unknown" and node["rejected"] == "bad_signature"
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    assert navarch.status()["rejections"] == {"bad_signature": 1}
    assert status["pools"]


def test_python_dash_m_and_version(navarch):
    assert navarch.ok("--version").out.startswith("navarch ")


def test_spot_preemption_notice_replaces_at_once(navarch):
    _edit(navarch.workdir, lambda d: d["pools"]["infer"].update(health={"max_unavailable": 0}))
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "inject", "fleet.yaml", "demo-infer-0001", "--preempt")
    navarch.ok("local", "tick", "fleet.yaml")
    plan = navarch.ok("plan", "fleet.yaml").out
    # A preemption is not held by the disruption budget: the node goes anyway.
    assert "~ cordon demo-infer-0001" in plan
    assert "+ provision demo-infer-0003" in plan and "replaces demo-infer-0001" in plan
    assert "preemption notice" in plan


def _tamper(kind: str, report: dict, fleet_dir: Path) -> bytes:
    """A bad report of one kind, built from a genuine one."""
    from navarch.fleet.load import load_fleet
    from navarch.fleet.secret import read_fleet_secret
    from navarch.report import signing

    secret = read_fleet_secret(load_fleet(fleet_dir / "fleet.yaml"))
    key = signing.derive_node_key(secret, "demo", report["node"])
    bad = dict(report, status="unhealthy", action="replace")
    if kind == "replayed":
        return json.dumps(report).encode()  # the very report already accepted
    if kind == "future":
        bad.update(sequence=report["sequence"] + 1, generated_at="2099-01-01T00:00:00Z")
        return json.dumps(signing.sign(bad, key)).encode()
    if kind == "oversized":
        bad.update(sequence=report["sequence"] + 1)
        bad["checks"] = (
            bad["checks"]
            + [{"name": "pad", "status": "unhealthy", "action": "none", "message": "x" * 1000}]
            * 300
        )
        return json.dumps(signing.sign(bad, key)).encode()
    if kind == "malformed":
        return b'{"fleet": "demo", "truncated'
    if kind == "schema":
        bad.update(sequence=report["sequence"] + 1, health_score=900)
        return json.dumps(signing.sign(bad, key)).encode()
    raise AssertionError(kind)


# "future" is not here: with the store's modification time known, a node's clock ahead is
# skew shown on the node, not a rejection (tests/cli/test_bad_input_cli.py).
@pytest.mark.parametrize("kind", ["replayed", "oversized", "malformed", "schema"])
def test_bad_reports_are_rejected_end_to_end(navarch, fleet_dir, kind):
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    navarch.ok("apply", "fleet.yaml", "--auto-approve")  # remembers the accepted sequences
    path = fleet_dir / ".navarch/store/health/demo/train/demo-train-0001.json"
    report = json.loads(path.read_text())
    path.write_bytes(_tamper(kind, report, fleet_dir))
    plan = json.loads(navarch.ok("plan", "fleet.yaml", "--json").out)
    assert plan["actions"] == []
    node = next(n for n in plan["nodes"] if n["node"] == "demo-train-0001")
    assert node["rejected"] == kind
    assert node["lifecycle"] == "unknown"
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    assert navarch.status()["rejections"] == {kind: 1}


def test_uncordon_returns_a_repaired_node_and_refuses_others(navarch):
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    refused = navarch("uncordon", "fleet.yaml", "demo-train-0001")
    assert refused.code == 1 and "navarch did not cordon demo-train-0001" in refused.err
    navarch.ok(
        "local", "inject", "fleet.yaml", "demo-train-0001", "--xid", "79", "--processes", "1"
    )
    navarch.ok("local", "tick", "fleet.yaml")
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    still_sick = navarch("uncordon", "fleet.yaml", "demo-train-0001")
    assert still_sick.code == 1 and "no fresh healthy report" in still_sick.err
    navarch.ok("local", "reboot", "fleet.yaml", "demo-train-0001")  # fault cleared by reboot
    navarch.ok("local", "tick", "fleet.yaml")
    navarch.ok("uncordon", "fleet.yaml", "demo-train-0001")
    node = next(n for n in navarch.nodes() if n["node"] == "demo-train-0001")
    assert node["lifecycle"] == "healthy"


def test_a_host_the_cloud_calls_impaired_is_cordoned_at_once_and_replaced_on_the_second_apply(
    navarch,
):
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    run = navarch.ok("local", "inject", "fleet.yaml", "demo-train-0002", "--impaired", "--silent")
    assert "demo-train-0002: the cloud lists the instance impaired" in run.out
    # First run: the cloud's word once is cordoned on, not drained or replaced (a status
    # check can flap); the replacement surges meanwhile.
    first = navarch.ok("apply", "fleet.yaml", "--auto-approve")
    assert "~ cordon demo-train-0002" in first.out
    assert "0 to drain, 0 to terminate" in first.out
    assert "+ provision demo-train-0004" in first.out
    node = next(n for n in navarch.nodes() if n["node"] == "demo-train-0002")
    assert node["lifecycle"] == "cordoned", node
    assert "replaced if a run 1m or more after the first still sees it" in node["reason"], node
    # Second run, two minutes later (far from offline_after): drained and replaced.
    later = {"NAVARCH_NOW": _in_minutes(2)}
    navarch.ok("local", "tick", "fleet.yaml", env=later)
    doc = json.loads(navarch.ok("plan", "fleet.yaml", "--json", env=later).out)
    assert [(a["action"], a["node"], a["action_reason"]) for a in doc["actions"]][:2] == [
        ("cordon", "demo-train-0002", "instance_impaired"),
        ("drain", "demo-train-0002", "instance_impaired"),
    ]
    second = navarch.ok("apply", "fleet.yaml", "--auto-approve", env=later)
    assert "impaired (instance status check failed (injected)) for 2m" in second.out
    assert "~ drain demo-train-0002" in second.out


def test_an_impaired_listing_that_clears_returns_the_node_it_cordoned(navarch):
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    navarch.ok("local", "inject", "fleet.yaml", "demo-train-0002", "--impaired")
    first = navarch.ok("apply", "fleet.yaml", "--auto-approve")
    assert "~ cordon demo-train-0002" in first.out
    navarch.ok("local", "inject", "fleet.yaml", "demo-train-0002", "--clear")
    later = {"NAVARCH_NOW": _in_minutes(2)}  # still impaired, this run would replace it
    navarch.ok("local", "tick", "fleet.yaml", env=later)
    run = navarch.ok("apply", "fleet.yaml", "--auto-approve", env=later)
    assert "uncordon demo-train-0002" in run.out
    assert "0 to drain, 0 to terminate, 1 to uncordon" in run.out
    node = next(n for n in navarch.nodes() if n["node"] == "demo-train-0002")
    assert node["lifecycle"] == "healthy" and "impaired" not in node["reason"], node

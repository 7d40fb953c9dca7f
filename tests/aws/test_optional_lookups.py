"""An optional EC2 lookup that fails or is denied never stops the fleet: the CLI, run as a
user runs it against moto, warns in one line naming the IAM action and goes on to plan
and launch. moto answers the outage page or the refusal for that one action
(tests/support/moto_server.py: Moto.pages, Moto.denied)."""

from __future__ import annotations

from pathlib import Path

from tests.aws.test_e2e import env, fleet_nodes, navarch, write_fleet  # noqa: F401 - env: a fixture


def _apply(fleet: Path, env: dict[str, str], tmp_path: Path) -> list[str]:
    """One `apply --auto-approve`; returns its stderr lines, asserting it succeeded."""
    run = navarch(["apply", str(fleet), "--auto-approve"], env, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    return run.stderr.splitlines()


def test_an_outage_page_then_a_denied_topology_lookup_never_stop_plan_or_apply(
    moto, env, tmp_path: Path
) -> None:
    _apply(write_fleet(tmp_path, target=1), env, tmp_path)
    assert len(fleet_nodes()) == 1

    # An HTML 500 where DescribeInstanceTopology's XML is due: one warning line, a launch.
    moto.pages["DescribeInstanceTopology"] = 500
    lines = _apply(write_fleet(tmp_path, target=2), env, tmp_path)
    said = [line for line in lines if "DescribeInstanceTopology" in line]
    assert said and all(
        line.startswith("navarch: WARNING: ec2:DescribeInstanceTopology failed in us-east-1: ")
        and "topology unknown this run" in line
        for line in said
    ), lines
    assert len(fleet_nodes()) == 2

    # The next apply with the action missing from the policy: it still plans and launches.
    moto.pages.clear()
    moto.denied.add("DescribeInstanceTopology")
    fleet = write_fleet(tmp_path, target=3)
    plan = navarch(["plan", str(fleet)], env, tmp_path)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert "+ provision e2e-train-0003" in plan.stdout
    lines = _apply(fleet, env, tmp_path)
    assert (
        "navarch: WARNING: ec2:DescribeInstanceTopology denied in us-east-1: topology unknown; "
        "grant it for block-aware placement"
    ) in lines
    assert len(fleet_nodes()) == 3

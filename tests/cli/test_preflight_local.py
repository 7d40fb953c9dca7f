"""Zones the provider can list offline are checked at validate: on the local provider with
`zones`, a mistyped zone fails `navarch validate` naming the key path and the nearest zone,
instead of a launch. And preflight's findings, judged without I/O: a check the policy
denies is said with the permission it needs and does not stop the run; a gap does."""

from __future__ import annotations

from navarch.providers.preflight import Check, Finding, Preflight, Verdict


def _with_zones(fleet_dir, pool_zones: str) -> None:
    path = fleet_dir / "fleet.yaml"
    text = path.read_text().replace(
        "    type: local\n", "    type: local\n    zones: [sim-1a, sim-1b]\n", 1
    )
    path.write_text(text.replace("zones: [sim-1a, sim-1b]\n    zone_policy", pool_zones, 1))


def test_validate_refuses_a_zone_the_local_provider_does_not_have(navarch, fleet_dir) -> None:
    _with_zones(fleet_dir, "zones: [sim-1a, sim-1c]\n    zone_policy")
    run = navarch("validate", "fleet.yaml")
    assert run.code == 1
    said = run.out + run.err
    assert "pools.train.zones[1]" in said and "zone 'sim-1c' does not exist on provider sim" in said
    assert "did you mean `sim-1a`?" in said or "did you mean `sim-1b`?" in said


def test_validate_passes_zones_the_local_provider_has(navarch, fleet_dir) -> None:
    _with_zones(fleet_dir, "zones: [sim-1a, sim-1b]\n    zone_policy")
    navarch.ok("validate", "fleet.yaml")
    navarch.ok("apply", "fleet.yaml", "--auto-approve")


def test_a_denied_check_is_said_with_its_permission_and_does_not_block_a_gap_does() -> None:
    denied = Finding(
        Check.OFFERING,
        Verdict.SKIPPED,
        "ec2",
        "pool train: instance types",
        "not checked: the policy denies it",
        "grant ec2:DescribeInstanceTypeOfferings to check it",
        permission="ec2:DescribeInstanceTypeOfferings",
    )
    gap = Finding(
        Check.KEY_PAIR,
        Verdict.GAP,
        "ec2",
        "pool train: key pair navarch",
        "not found in us-east-1",
        "import it",
        "pools.train.aws.key_name",
    )
    alone = Preflight.of([denied])
    assert not alone.blocks
    assert "(needs ec2:DescribeInstanceTypeOfferings)" in alone.text()
    both = Preflight.of([denied, gap, gap])
    assert both.blocks and both.gaps == (gap,)
    assert both.text().splitlines()[1] == (
        "  ! pool train: key pair navarch: not found in us-east-1 -> import it "
        "(pools.train.aws.key_name)"
    )

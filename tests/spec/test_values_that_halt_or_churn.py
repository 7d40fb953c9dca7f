"""Values the schema accepts that would then fail every node's acceptance or every launch: an
expected GPU count other than the pool's, a cluster placement group over several zones, a
multi-node test no scheduler runs, a tool timeout shorter than its dcgmi diag level, a
remedies `window` that counted nothing. `validate` (and every command that loads the fleet
file) refuses each, naming the file, the line, the key path and what to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from navarch.errors import ConfigError
from navarch.fleet.load import fleet_problems, load_fleet
from tests.support.cli import run_navarch
from tests.support.fleet_text import BASE, write_fleet_text

#: A one-pool AWS fleet with a placement group (composed for these tests).
AWS = """\
fleet: demo
providers:
  ec2: {type: aws, region: us-east-1}
pools:
  train:
    provider: ec2
    instance_types: [p5.48xlarge]
    gpus_per_node: 8
    zones: [us-east-1a]
    nodes: {min: 0, target: 2, max: 3}
    aws: {ami: ami-12c6146b, placement_group: pg-train}
"""

#: The same group named by two placements in two zones (composed for these tests).
AWS_TWO_PLACEMENTS = """\
fleet: demo
providers:
  ec2: {type: aws, region: us-east-1}
pools:
  train:
    gpus_per_node: 8
    nodes: {min: 0, target: 2, max: 3}
    placements:
      - provider: ec2
        instance_types: [p5.48xlarge]
        zones: [us-east-1a]
        aws: {ami: ami-12c6146b, placement_group: pg-train}
      - provider: ec2
        instance_types: [p5.48xlarge]
        zones: [us-east-1b]
        aws: {ami: ami-12c6146b, placement_group: pg-train}
"""

_ACCEPTANCE = "max: 3}\n    acceptance: "

CASES = {
    "expected_gpu_count_other_than_gpus_per_node": (
        BASE.replace("max: 3}\n", _ACCEPTANCE + "{enabled: true, expected: {gpu_count: 4}}\n"),
        "pools.train.acceptance.expected.gpu_count",
        "differs from the pool's gpus_per_node 8",
        "set it to 8",
        ("gpu_count: 4", "gpu_count: 8"),
    ),
    "cluster_placement_group_over_two_zones": (
        AWS.replace("zones: [us-east-1a]", "zones: [us-east-1a, us-east-1b]"),
        "pools.train.aws.placement_group",
        "single Availability Zone",
        "list one zone here",
        ("zones: [us-east-1a, us-east-1b]", "zones: [us-east-1a]"),
    ),
    "one_placement_group_in_two_placements_of_different_zones": (
        AWS_TWO_PLACEMENTS,
        "pools.train.placements[1].aws.placement_group",
        "already used in zone us-east-1a (by pools.train.placements[0])",
        "its own placement_group",
        (
            "us-east-1b]\n        aws: {ami: ami-12c6146b, placement_group: pg-train}",
            "us-east-1b]\n        aws: {ami: ami-12c6146b, placement_group: pg-train-b}",
        ),
    ),
    "multi_node_on_a_pool_without_slurm": (
        BASE.replace(
            "max: 3}\n",
            "max: 3}\n    scheduler: kubernetes\n    acceptance: "
            "{enabled: true, multi_node: true}\n",
        ),
        "pools.train.acceptance.multi_node",
        "multi_node needs scheduler: slurm, but the pool's scheduler is kubernetes",
        "remove multi_node",
        ("scheduler: kubernetes", "scheduler: slurm\n    ssh: {head_node: slurm-head}"),
    ),
    "multi_node_on_slurm_without_a_head_node": (
        BASE.replace(
            "max: 3}\n",
            "max: 3}\n    scheduler: slurm\n    acceptance: {enabled: true, multi_node: true}\n",
        ),
        "pools.train.acceptance.multi_node",
        "sets no ssh.head_node",
        "set pools.train.ssh.head_node",
        ("scheduler: slurm", "scheduler: slurm\n    ssh: {head_node: slurm-head}"),
    ),
    "deep_suite_with_a_timeout_under_dcgmi_level_3": (
        BASE.replace("max: 3}\n", _ACCEPTANCE + "{enabled: true, depth: deep}\n"),
        "pools.train.acceptance.timeout",
        "timeout 10m is shorter than dcgmi diag level 3 takes (about 15m",
        "at least 15m",
        ("depth: deep}", "depth: deep, timeout: 15m}"),
    ),
    "level_2_with_a_timeout_under_two_minutes": (
        BASE.replace(
            "max: 3}\n", _ACCEPTANCE + "{enabled: true, dcgm_diag_level: 2, timeout: 90s}\n"
        ),
        "pools.train.acceptance.timeout",
        "shorter than dcgmi diag level 2 takes (about 2m",
        "at least 2m",
        ("timeout: 90s", "timeout: 2m"),
    ),
    "remedies_window_that_never_bounded_the_count": (
        BASE.replace(
            "max: 3}\n",
            "max: 3}\n    health:\n      remedies:\n        - {match: xid:79, occurrences: 3,"
            " window: 10m}\n",
        ),
        "pools.train.health.remedies[0].window",
        "`window` was never applied",
        "remove window from the row",
        (", window: 10m", ""),
    ),
}


def _line_of(text: str, key_path: str) -> int:
    """The line the key path's last written key is on: its last occurrence (placement_group
    appears in two placements), or its nearest enclosing key's when the value is a default
    (acceptance for a timeout left out)."""
    for key in reversed([part.split("[")[0] for part in key_path.split(".")]):
        lines = [i for i, ln in enumerate(text.splitlines(), 1) if f"{key}:" in ln]
        if lines:
            return max(lines)
    raise AssertionError(f"{key_path} is not in the text")


@pytest.mark.parametrize("case", sorted(CASES))
def test_validate_refuses_a_value_that_would_halt_or_churn_naming_file_line_key_and_fix(
    tmp_path: Path, case: str
) -> None:
    text, key_path, words, fix, (old, new) = CASES[case]
    path = write_fleet_text(tmp_path, text)

    problems = fleet_problems(path)
    with pytest.raises(ConfigError) as err:
        load_fleet(path)

    assert [p.key_path for p in problems] == [key_path], [str(p) for p in problems]
    for found in (problems[0], err.value):
        assert (found.file, found.line, found.key_path) == (
            str(path),
            _line_of(text, key_path),
            key_path,
        )
        assert words in found.message, found.message
        assert found.hint is not None and fix in found.hint, found.hint
    # What the hint says to do makes the file load.
    assert old in text
    assert load_fleet(write_fleet_text(tmp_path, text.replace(old, new))).pool("train")


def test_navarch_validate_prints_the_deep_suite_timeout_refusal_with_its_line(
    tmp_path: Path,
) -> None:
    text = BASE.replace("max: 3}\n", _ACCEPTANCE + "{enabled: true, depth: deep}\n")
    path = write_fleet_text(tmp_path, text)
    proc = run_navarch(["validate", str(path)], cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout
    assert f"{path}:10: pools.train.acceptance.timeout: timeout 10m is shorter" in proc.stderr
    assert "Traceback" not in proc.stderr

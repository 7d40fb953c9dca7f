"""fleet.yaml `pools[].acceptance`: acceptance is off unless enabled; when on, its policy has
the pool's GPU count as the expected inventory, and a bad key or value names its path."""

from __future__ import annotations

from pathlib import Path

import pytest

from navarch.errors import ConfigError
from navarch.fleet.load import load_fleet
from navarch.report.acceptance import DriftPolicy, SuiteDepth
from tests.support.fleet_text import BASE, write_fleet_text


def _load(tmp_path: Path, acceptance: str):
    return load_fleet(write_fleet_text(tmp_path, BASE + f"    acceptance: {acceptance}\n"))


def test_a_pool_without_acceptance_does_not_acceptance(tmp_path: Path) -> None:
    assert load_fleet(write_fleet_text(tmp_path, BASE)).pools[0].acceptance is None


def test_an_enabled_pool_expects_its_gpus_per_node_and_the_quick_suite(tmp_path: Path) -> None:
    policy = (
        _load(
            tmp_path,
            "{enabled: true, versions: {driver: 550.54.15}, drift: warn,"
            " expected: {gpu_memory_gib: 80}, thresholds: {nccl_busbw_gbps: 200}}",
        )
        .pools[0]
        .acceptance
    )
    assert policy is not None
    assert (policy.depth, policy.dcgm_diag_level, policy.expected_gpu_count) == (
        SuiteDepth.QUICK,
        1,
        8,
    )
    assert policy.expected_gpu_memory_bytes == 80 * 2**30
    assert (policy.drift, dict(policy.versions)) == (DriftPolicy.WARN, {"driver": "550.54.15"})
    assert (policy.nccl_min_busbw_gbps, policy.min_fraction) == (200.0, 0.8)
    assert (policy.timeout_s, policy.deadline_s) == (600.0, 1800.0)


@pytest.mark.parametrize(
    ("acceptance", "key_path"),
    [
        ("{enabled: true, speed: 9}", "pools.train.acceptance"),
        ("{enabled: true, dcgm_diag_level: 4}", "pools.train.acceptance.dcgm_diag_level"),
        ("{enabled: true, versions: {kernel: '6.1'}}", "pools.train.acceptance.versions"),
        ("{enabled: true, timeout: 20m, deadline: 10m}", "pools.train.acceptance.deadline"),
    ],
)
def test_a_bad_acceptance_key_names_its_path(
    tmp_path: Path, acceptance: str, key_path: str
) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, acceptance)
    assert info.value.key_path is not None and info.value.key_path.startswith(key_path)
    assert info.value.file is not None and info.value.file.endswith("fleet.yaml")

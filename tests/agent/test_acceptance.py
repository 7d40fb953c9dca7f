"""The agent's acceptance: the pool's acceptance suite runs once per boot (and again after a
GPU reset), its run rides in every report of the boot, and the fake backend's tools
answer from the overrides file that `navarch local inject --acceptance` writes."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from navarch.agent import AgentConfig, load_config, run_once
from navarch.agent.acceptance import acceptance_step
from navarch.agent.gpu import FakeGpuBackend
from navarch.errors import ConfigError
from navarch.report.acceptance import (
    AcceptancePolicy,
    AcceptanceResult,
    AcceptanceStatus,
    policy_to_mapping,
)

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
POLICY = AcceptancePolicy(expected_gpu_count=8, nccl_min_busbw_gbps=200.0)


def _by_test(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["test"]: r for r in report["acceptance"]["results"]}


def test_a_fake_node_passes_its_suite_in_its_first_report_and_the_run_is_schema_valid(
    make_config: Callable[..., AgentConfig],
    read_stored: Callable[[AgentConfig], dict[str, Any]],
    validate_report: Callable[[dict[str, Any]], None],
) -> None:
    cfg = make_config(acceptance=POLICY)
    run_once(cfg, now=T0)
    stored = read_stored(cfg)
    validate_report(stored)
    run = stored["acceptance"]
    assert run["boot_id"] == "boot-a" and run["finished_at"] is not None
    results = _by_test(stored)
    assert {"gpu_count", "pcie_link", "ecc_mode", "persistence_mode", "versions"} <= set(results)
    assert {"dcgm_diag", "nvbandwidth", "nccl_all_reduce"} <= set(results)
    assert all(r["status"] == "pass" for r in results.values())
    assert results["nccl_all_reduce"]["figure"] == 480.12


def test_injected_overrides_fail_the_tests_they_name_with_figure_and_threshold(
    make_config: Callable[..., AgentConfig], tmp_path: Path
) -> None:
    overrides = tmp_path / "acceptance.json"
    overrides.write_text(
        json.dumps({"nccl_busbw_gbps": 120, "gpu_count": 7, "pcie_width": 8, "dcgm_diag": "fail"})
    )
    cfg = make_config(acceptance=POLICY, acceptance_file=str(overrides))
    results = _by_test(run_once(cfg, now=T0))
    assert results["nccl_all_reduce"]["status"] == "fail"
    assert (results["nccl_all_reduce"]["figure"], results["nccl_all_reduce"]["threshold"]) == (
        120.0,
        200.0,
    )
    assert (results["gpu_count"]["status"], results["gpu_count"]["figure"]) == ("fail", 7)
    assert (results["pcie_link"]["figure"], results["pcie_link"]["threshold"]) == (8, 16)
    assert results["dcgm_diag"]["status"] == "fail"


def test_an_injected_driver_is_reported_as_the_nodes_version(
    make_config: Callable[..., AgentConfig], tmp_path: Path
) -> None:
    overrides = tmp_path / "acceptance.json"
    overrides.write_text(json.dumps({"driver": "550.54.14"}))
    cfg = make_config(acceptance=POLICY, acceptance_file=str(overrides))
    results = _by_test(run_once(cfg, now=T0))
    assert results["versions"]["detail"]["driver"] == "550.54.14"


def test_the_versions_test_reads_cuda_vbios_inforom_and_nic_firmware_not_only_the_driver(
    make_config: Callable[..., AgentConfig], tmp_path: Path
) -> None:
    overrides = tmp_path / "acceptance.json"
    overrides.write_text(json.dumps({"cuda": "12.4"}))
    cfg = make_config(acceptance=POLICY, acceptance_file=str(overrides))
    versions = _by_test(run_once(cfg, now=T0))["versions"]
    assert versions["status"] == "pass"
    assert versions["detail"] == {
        "driver": "570.133.20",
        "cuda": "12.4",
        "vbios": "96.00.89.00.01",
        "inforom": "G520.0200.00.05",
        "nic_firmware": "28.39.1002",
    }


def test_without_nvidia_smi_the_versions_test_keeps_the_driver_nvml_read() -> None:
    probe = FakeGpuBackend("n", 8, None).probe()

    def no_smi(policy: AcceptancePolicy) -> AcceptanceResult:
        return AcceptanceResult("versions", AcceptanceStatus.UNKNOWN, reason="nvidia-smi missing")

    run = acceptance_step(POLICY, None, "b", False, probe, [("versions", no_smi)], T0)
    (versions,) = [r for r in run.results if r.test == "versions"]
    assert versions.status is AcceptanceStatus.PASS
    assert dict(versions.detail) == {"driver": "570.133.20"}
    assert "nvidia-smi missing" in versions.reason


def test_the_suite_runs_once_per_boot_and_again_after_a_reboot(
    make_config: Callable[..., AgentConfig], tmp_path: Path
) -> None:
    overrides = tmp_path / "acceptance.json"
    cfg = make_config(acceptance=POLICY, acceptance_file=str(overrides))
    first = run_once(cfg, now=T0)["acceptance"]
    # An injection after the run does not change this boot's run: the suite is not repeated.
    overrides.write_text(json.dumps({"nccl_busbw_gbps": 120}))
    again = run_once(cfg, now=T0 + timedelta(seconds=30))["acceptance"]
    assert again == first
    rebooted = run_once(
        make_config(acceptance=POLICY, acceptance_file=str(overrides), boot_id="boot-b"),
        now=T0 + timedelta(minutes=5),
    )["acceptance"]
    assert rebooted["boot_id"] == "boot-b"
    assert _by_test({"acceptance": rebooted})["nccl_all_reduce"]["status"] == "fail"


def test_a_gpu_reset_starts_a_new_run_of_the_same_boot() -> None:
    probe = FakeGpuBackend("n", 8, None).probe()
    calls: list[int] = []

    def tool(policy: AcceptancePolicy) -> AcceptanceResult:
        calls.append(1)
        return AcceptanceResult("dcgm_diag", AcceptanceStatus.PASS)

    first = acceptance_step(POLICY, None, "b", False, probe, [("dcgm_diag", tool)], T0)
    same = acceptance_step(POLICY, first.to_json(), "b", False, probe, [("dcgm_diag", tool)], T0)
    reset = acceptance_step(POLICY, first.to_json(), "b", True, probe, [("dcgm_diag", tool)], T0)
    assert (first.reset, same, reset.reset, len(calls)) == (0, first, 1, 2)


def test_a_long_suite_resumes_in_the_next_tick_and_a_raising_tool_is_unknown() -> None:
    probe = FakeGpuBackend("n", 8, None).probe()
    ticks = iter(range(0, 1000, 50))  # every clock read is 50 s later

    def slow(policy: AcceptancePolicy) -> AcceptanceResult:
        return AcceptanceResult("nvbandwidth", AcceptanceStatus.PASS, figure=400.0)

    def broken(policy: AcceptancePolicy) -> AcceptanceResult:
        raise RuntimeError("nccl crashed")

    tests = [("nvbandwidth", slow), ("nccl_all_reduce", broken)]
    part = acceptance_step(
        POLICY, None, "b", False, probe, tests, T0, budget_s=60, clock=lambda: next(ticks)
    )
    assert part.finished_at is None and part.results[-1].test == "nvbandwidth"
    done = acceptance_step(POLICY, part.to_json(), "b", False, probe, tests, T0, budget_s=60)
    assert done.finished_at is not None and not done.passed
    assert done.results[-1].status is AcceptanceStatus.UNKNOWN
    assert "nccl crashed" in done.results[-1].reason


def test_agent_yaml_carries_the_policy_and_a_bad_key_names_its_path(tmp_path: Path) -> None:
    import yaml

    doc = {
        "fleet": "demo",
        "pool": "train",
        "node": "train-0001",
        "store": "file:///tmp/x",
        "acceptance": policy_to_mapping(POLICY),
    }
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert load_config(path).acceptance == POLICY
    doc["acceptance"] = {"nccl_min_busbw_gbps": "fast"}
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.key_path == "acceptance.nccl_min_busbw_gbps"


def test_without_a_policy_the_report_has_no_acceptance_key(
    make_config: Callable[..., AgentConfig],
) -> None:
    assert "acceptance" not in run_once(make_config(), now=T0)


def test_a_tools_long_output_is_cut_to_the_schemas_limits_so_the_report_is_accepted(
    validate_report: Callable[[dict[str, Any]], None],
    make_config: Callable[..., AgentConfig],
) -> None:
    from navarch.agent.runner import build_report

    probe = FakeGpuBackend("n", 8, None).probe()

    def chatty(policy: AcceptancePolicy) -> AcceptanceResult:
        return AcceptanceResult(
            "dcgm_diag", AcceptanceStatus.FAIL, reason="x" * 5000, tool_version="v" * 999
        )

    run = acceptance_step(POLICY, None, "boot-a", False, probe, [("dcgm_diag", chatty)], T0)
    report, _ = build_report(
        make_config(),
        probe=probe,
        events=(),
        sequence=1,
        boot_id="boot-a",
        now=T0,
        checks=(),
        notice=None,
        node_key=b"k" * 32,
        acceptance=run,
    )
    validate_report(report)


def test_a_whole_gpu_tool_test_under_mig_says_not_applicable_and_is_not_run() -> None:
    """dcgmi diag, nvbandwidth and all_reduce_perf address whole GPUs: under MIG they are
    unknown with the reason (never a pass, never a hardware failure), and not run."""
    fake = FakeGpuBackend("n", 8, None).probe()
    gpus = tuple(dataclasses.replace(g, mig_current=g.index == 3) for g in fake.gpus)
    probe = dataclasses.replace(fake, gpus=gpus)
    calls: list[str] = []

    def tool(policy: AcceptancePolicy) -> AcceptanceResult:
        calls.append("dcgm_diag")
        return AcceptanceResult("dcgm_diag", AcceptanceStatus.PASS)

    run = acceptance_step(POLICY, None, "b", False, probe, [("dcgm_diag", tool)], T0)
    (diag,) = [r for r in run.results if r.test == "dcgm_diag"]
    assert diag.status is AcceptanceStatus.UNKNOWN and calls == []
    assert "MIG mode is on for GPUs [3]" in diag.reason

"""The node's acceptance tests end to end: tools (FakeToolHost in the real formats, the
fixtures, real subprocesses of stand-in programs) through the real parsers to verdicts."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from navarch.agent.acceptance_tools import (
    TOOL_TESTS,
    FakeToolHost,
    SystemToolHost,
    ToolOutput,
    run_tool_tests,
)
from navarch.agent.acceptance_tools.fake import FAKE_KEYS, check_override
from navarch.agent.acceptance_tools.suite import (
    run_dcgm_diag,
    run_gpu_count,
    run_gpu_memory,
    run_ib_ports,
    run_nccl_all_reduce,
    run_nvbandwidth,
    run_pcie_link,
    run_persistence_mode,
    run_versions,
)
from navarch.report.acceptance import (
    AcceptancePolicy,
    AcceptanceResult,
    AcceptanceStatus,
    AcceptanceTest,
    DriftPolicy,
    SuiteDepth,
)
from navarch.textsafe import NODE_TEXT_MAX_CHARS

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "acceptance"
PASS, FAIL, UNKNOWN = AcceptanceStatus.PASS, AcceptanceStatus.FAIL, AcceptanceStatus.UNKNOWN

#: The tests that run a program (the rest read sysfs only).
PROGRAM_TESTS = [
    t for t in TOOL_TESTS if t not in (AcceptanceTest.IB_PORTS, AcceptanceTest.PCIE_LINK)
]


class ScriptedHost(FakeToolHost):
    """A FakeToolHost whose answers for some programs (by argv[0], or by argv[0] and
    nvbandwidth's testcase) are given outputs, e.g. a fixture file."""

    def __init__(self, outputs: Mapping[str, ToolOutput], **overrides: str) -> None:
        super().__init__(overrides)
        self.outputs = dict(outputs)

    def run(self, argv: Sequence[str], timeout_s: float) -> ToolOutput:
        key = f"{argv[0]} {argv[2]}" if argv[0] == "nvbandwidth" else argv[0]
        if key in self.outputs:
            self.calls.append(tuple(argv))
            return self.outputs[key]
        return super().run(argv, timeout_s)


def fixture_output(name: str, exit_code: int = 0) -> ToolOutput:
    return ToolOutput(exit_code, (FIXTURES / name).read_text())


def by_test(results: Sequence[AcceptanceResult]) -> dict[str, AcceptanceResult]:
    return {r.test: r for r in results}


# -- the local provider's node: FakeToolHost round trips --------------------------------------


def test_a_healthy_fake_node_passes_every_test_through_the_real_parsers() -> None:
    policy = AcceptancePolicy(
        expected_gpu_count=8,
        expected_gpu_memory_bytes=80 * 1024**3,
        expected_pcie_gen=5,
        expected_pcie_width=16,
        expected_ib_ports=8,
        expected_ib_rate_gbps=400.0,
        versions={"driver": "570.133.20"},
        nccl_min_busbw_gbps=150.0,
        nvbandwidth_min_gbps=40.0,
    )
    results = run_tool_tests(policy, FakeToolHost())
    assert [r.test for r in results] == [t.value for t in TOOL_TESTS]
    assert {r.test: r.status for r in results} == {t.value: PASS for t in TOOL_TESTS}
    got = by_test(results)
    assert got["nccl_all_reduce"].figure == 480.12 and got["nccl_all_reduce"].unit == "GB/s"
    assert got["nccl_all_reduce"].tool_version == "2.19.6"
    assert got["dcgm_diag"].tool_version == "4.2.3"
    assert got["nvbandwidth"].figure == 55.12 and got["nvbandwidth"].tool_version == "v0.8"
    assert all(r.duration_s is not None and r.duration_s >= 0 for r in results)


def test_an_injected_nccl_busbw_of_120_fails_against_a_150_floor_with_its_figure() -> None:
    result = run_nccl_all_reduce(
        AcceptancePolicy(nccl_min_busbw_gbps=150.0), FakeToolHost({"nccl_busbw_gbps": "120"})
    )
    assert (result.status, result.figure, result.threshold, result.unit) == (
        FAIL,
        120.0,
        150.0,
        "GB/s",
    )
    assert "120 GB/s, below the floor 150 GB/s" in result.reason


@pytest.mark.parametrize(
    ("overrides", "test", "figure", "threshold", "words"),
    [
        ({"gpu_count": "7"}, AcceptanceTest.GPU_COUNT, 7.0, 8.0, "7 GPUs where the pool expects 8"),
        ({"pcie_width": "8"}, AcceptanceTest.PCIE_LINK, 8.0, 16.0, "x8 of x16"),
        ({"pcie_gen": "4"}, AcceptanceTest.PCIE_LINK, 16.0, 16.0, "Gen4 of Gen5"),
        ({"ib_state": "DOWN"}, AcceptanceTest.IB_PORTS, 7.0, 8.0, "mlx5_0/1 DOWN"),
        ({"ib_rate_gbps": "200"}, AcceptanceTest.IB_PORTS, 7.0, 8.0, "ACTIVE at 200 Gb/s"),
        (
            {"gpu_memory_mib": "40960"},
            AcceptanceTest.GPU_MEMORY,
            40960 * 1024**2,
            None,
            "under 95%",
        ),
        ({"ecc": "disabled"}, AcceptanceTest.ECC_MODE, 0.0, 8.0, "ECC is off on GPU"),
        ({"persistence": "disabled"}, AcceptanceTest.PERSISTENCE_MODE, 0.0, 8.0, "off on GPU"),
        ({"dcgm_diag": "fail"}, AcceptanceTest.DCGM_DIAG, 1.0, 0.0, "failed: software on GPU 0"),
        (
            {"nvbandwidth_h2d_gbps": "20"},
            AcceptanceTest.NVBANDWIDTH,
            20.0,
            40.0,
            "below the floor 40",
        ),
        (
            {"nvbandwidth_d2h_gbps": "31.5"},
            AcceptanceTest.NVBANDWIDTH,
            31.5,
            40.0,
            "device_to_host",
        ),
        (
            {"driver": "550.54.14"},
            AcceptanceTest.VERSIONS,
            None,
            None,
            "driver 550.54.14 (pool: 570.133.20)",
        ),
        (
            {"vbios": "96.00.74.00.11"},
            AcceptanceTest.VERSIONS,
            None,
            None,
            "vbios differs across the node",
        ),
        (
            {"nic_firmware": "28.36.1010"},
            AcceptanceTest.VERSIONS,
            None,
            None,
            "nic_firmware differs across the node: 28.36.1010,28.39.1002",
        ),
    ],
)
def test_an_injected_fault_fails_its_test_with_figure_and_threshold(
    overrides: dict[str, str],
    test: AcceptanceTest,
    figure: float | None,
    threshold: float | None,
    words: str,
) -> None:
    policy = AcceptancePolicy(
        expected_gpu_count=8,
        expected_gpu_memory_bytes=80 * 1024**3,
        expected_pcie_gen=5,
        expected_ib_ports=8,
        expected_ib_rate_gbps=400.0,
        versions={"driver": "570.133.20", "vbios": "96.00.89.00.01"},
        nvbandwidth_min_gbps=40.0,
    )
    result = TOOL_TESTS[test](policy, FakeToolHost(overrides))
    assert result.status is FAIL, result.reason
    assert result.figure == figure
    if threshold is not None:
        assert result.threshold == threshold
    assert words in result.reason


def test_the_fake_knows_its_keys_and_refuses_others() -> None:
    assert "nccl_busbw_gbps" in FAKE_KEYS and "gpu_count" in FAKE_KEYS
    with pytest.raises(ValueError, match="unknown acceptance override nccl_bw"):
        FakeToolHost({"nccl_bw": "1"})


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("gpu_count", "seven", "gpu_count takes a whole number 0-64"),
        ("pcie_gen", "7", "pcie_gen takes a whole number 1-6"),
        ("nccl_busbw_gbps", "fast", "figure >= 0 or one of missing, timeout, garbage"),
        ("gpu_memory_mib", "missing", "gpu_memory_mib takes a figure >= 0"),
        ("ecc", "off", "ecc takes one of enabled, disabled"),
        ("dcgm_diag", "warn", "dcgm_diag takes one of pass, fail, missing, timeout, garbage"),
        ("driver", "", "a version of 1-64 printable characters"),
        ("driver", "550\n$(id)", "a version of 1-64 printable characters"),
    ],
)
def test_an_override_the_fake_cannot_model_is_refused_naming_what_it_takes(
    key: str, value: str, words: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(words)):
        check_override(key, value)
    with pytest.raises(ValueError):
        FakeToolHost({key: value})


def test_a_node_whose_driver_sees_no_gpu_fails_the_count_and_knows_no_memory() -> None:
    host = FakeToolHost({"gpu_count": "0"})
    count = run_gpu_count(AcceptancePolicy(expected_gpu_count=8), host)
    assert (count.status, count.figure, count.threshold) == (FAIL, 0.0, 8.0)
    assert run_gpu_memory(AcceptancePolicy(), host).status is UNKNOWN
    assert run_nccl_all_reduce(AcceptancePolicy(), host).status is UNKNOWN


def test_drift_under_a_warn_policy_passes_and_names_the_odd_component() -> None:
    policy = AcceptancePolicy(versions={"driver": "570.133.20"}, drift=DriftPolicy.WARN)
    result = run_versions(policy, FakeToolHost({"driver": "550.54.14"}))
    assert result.status is PASS
    assert result.reason == "drift: driver 550.54.14 (pool: 570.133.20) (drift: warn)"
    assert result.detail["driver"] == "550.54.14"


def test_without_a_declared_baseline_versions_pass_for_the_planners_majority_check() -> None:
    result = run_versions(AcceptancePolicy(), FakeToolHost({"driver": "550.54.14"}))
    assert result.status is PASS and result.detail["driver"] == "550.54.14"
    assert set(result.detail) == {"driver", "cuda", "vbios", "inforom", "nic_firmware"}


def test_a_figure_without_an_absolute_floor_passes_for_the_planners_relative_check() -> None:
    result = run_nccl_all_reduce(AcceptancePolicy(), FakeToolHost({"nccl_busbw_gbps": "120"}))
    assert (result.status, result.figure, result.threshold) == (PASS, 120.0, None)
    assert "pool's median" in result.reason


def test_a_published_instance_type_baseline_is_the_floor_when_the_pool_gives_none() -> None:
    policy = AcceptancePolicy(instance_type="Standard_ND96isr_H100_v5")
    host = FakeToolHost({"nccl_busbw_gbps": "450"})
    result = run_nccl_all_reduce(policy, host)
    assert (result.status, result.figure, result.threshold) == (FAIL, 450.0, 460.0)
    assert "azurehpc-health-checks" in result.reason
    (argv,) = [c for c in host.calls if c[0] == "all_reduce_perf"]
    assert argv[:5] == ("all_reduce_perf", "-b", str(16 << 30), "-e", str(16 << 30))
    nvbw = run_nvbandwidth(policy, FakeToolHost({"nvbandwidth_d2d_gbps": "300"}))
    assert nvbw.status is FAIL and "GPU 0->1 300 GB/s, below the floor 335" in nvbw.reason


def test_the_deep_suite_runs_dcgm_level_3_and_longer_bandwidth_runs() -> None:
    host = FakeToolHost()
    policy = AcceptancePolicy(depth=SuiteDepth.DEEP)
    assert run_dcgm_diag(policy, host).detail["level"] == "3"
    run_nvbandwidth(policy, host)
    run_nccl_all_reduce(policy, host)
    assert ("dcgmi", "diag", "-r", "3", "-j") in host.calls
    assert all(c[-2:] == ("-i", "10") for c in host.calls if c[0] == "nvbandwidth")
    (nccl,) = [c for c in host.calls if c[0] == "all_reduce_perf"]
    assert nccl[nccl.index("-n") + 1] == "100" and nccl[nccl.index("-g") + 1] == "8"
    quick = FakeToolHost()
    run_dcgm_diag(AcceptancePolicy(dcgm_diag_level=2), quick)
    assert quick.calls == [("dcgmi", "diag", "-r", "2", "-j")]


# -- unknown, never a pass ---------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["missing", "timeout", "garbage"])
@pytest.mark.parametrize("test", PROGRAM_TESTS, ids=str)
def test_a_tool_missing_timing_out_or_printing_garbage_is_unknown(
    test: AcceptanceTest, mode: str
) -> None:
    if mode == "missing":
        out = ToolOutput(127, stderr="not found")
    elif mode == "timeout":
        out = ToolOutput(-9, timed_out=True)
    else:
        out = ToolOutput(0, "\x1b[2J<html>502 Bad Gateway</html>\n")
    tools = ("nvidia-smi", "dcgmi", "all_reduce_perf")
    outputs = {tool: out for tool in tools}
    outputs.update({f"nvbandwidth {case}": out for case in _nvbandwidth_cases()})
    result = TOOL_TESTS[test](AcceptancePolicy(expected_gpu_count=8), ScriptedHost(outputs))
    assert result.status is UNKNOWN
    assert result.reason and "\x1b" not in result.reason
    words = {"missing": "is not installed", "timeout": "timed out after 600 s", "garbage": ""}
    assert words[mode] in result.reason


def _nvbandwidth_cases() -> tuple[str, ...]:
    return (
        "host_to_device_memcpy_ce",
        "device_to_host_memcpy_ce",
        "device_to_device_memcpy_read_ce",
    )


@pytest.mark.parametrize("key", ["dcgm_diag", "nvbandwidth_h2d_gbps", "nccl_busbw_gbps"])
@pytest.mark.parametrize("mode", ["missing", "timeout", "garbage"])
def test_the_fakes_tool_modes_give_unknown(key: str, mode: str) -> None:
    results = by_test(run_tool_tests(AcceptancePolicy(), FakeToolHost({key: mode})))
    test = {"dcgm_diag": "dcgm_diag", "nccl_busbw_gbps": "nccl_all_reduce"}.get(key, "nvbandwidth")
    assert results[test].status is UNKNOWN
    assert all(r.status is PASS for name, r in results.items() if name != test)


def test_dcgm_exit_without_a_failed_test_is_unknown() -> None:
    host = ScriptedHost({"dcgmi": fixture_output("dcgmi_diag_r3_dcgm4_h100x8.json", 235)})
    result = run_dcgm_diag(AcceptancePolicy(dcgm_diag_level=3), host)
    assert result.status is UNKNOWN and "exited 235 without a failed test" in result.reason


def test_a_dcgm_status_word_it_does_not_document_is_unknown() -> None:
    text = (FIXTURES / "dcgmi_diag_r1_dcgm3.json").read_text().replace('"PASS"', '"Error"', 1)
    result = run_dcgm_diag(AcceptancePolicy(), ScriptedHost({"dcgmi": ToolOutput(0, text)}))
    assert result.status is UNKNOWN and "unknown status of Denylist" in result.reason


def test_nccl_tests_internal_error_exit_is_unknown_and_wrong_results_fail() -> None:
    crashed = ToolOutput(3, " .. node-1 pid 1: Test failure common.cu:1061\n")
    result = run_nccl_all_reduce(AcceptancePolicy(), ScriptedHost({"all_reduce_perf": crashed}))
    assert result.status is UNKNOWN and "exited 3" in result.reason
    wrong = fixture_output("all_reduce_perf_2_19_wrong.txt", 7)
    result = run_nccl_all_reduce(AcceptancePolicy(), ScriptedHost({"all_reduce_perf": wrong}))
    assert (result.status, result.figure) == (FAIL, 426.55)
    assert "6 wrong results" in result.reason


def test_a_hostile_tool_message_is_made_plain_and_capped() -> None:
    noise = "\x1b]8;;http://evil\x07click\u202e" + "A" * 10_000
    host = ScriptedHost({"nvidia-smi": ToolOutput(9, stderr=noise)})
    result = run_gpu_count(AcceptancePolicy(), host)
    assert result.status is UNKNOWN
    assert len(result.reason) <= NODE_TEXT_MAX_CHARS
    assert not any(c in result.reason for c in "\x1b\x07\u202e")


# -- the fixtures through the tests ------------------------------------------------------------


def test_the_real_dcgm_failure_fails_dcgm_diag_and_persistence_mode_as_settings() -> None:
    host = ScriptedHost(
        {
            "dcgmi": fixture_output("dcgmi_diag_r1_dcgm4_gb10_fail.json", 226),
            "nvidia-smi": fixture_output("nvidia_smi_q_x_l4_555.xml"),
        }
    )
    diag = run_dcgm_diag(AcceptancePolicy(), host)
    assert (diag.status, diag.figure, diag.tool_version) == (FAIL, 1.0, "4.2.3")
    # DCGM files the warning as a setting (category 8, severity 5): the agent says so.
    assert diag.detail == {"level": "1", "software": "fail", "finding": "setting"}
    persistence = run_persistence_mode(AcceptancePolicy(), host)
    assert (persistence.status, persistence.figure, persistence.threshold) == (FAIL, 0.0, 2.0)
    memory = run_gpu_memory(AcceptancePolicy(expected_gpu_memory_bytes=24 * 10**9), host)
    assert (memory.status, memory.figure) == (PASS, 23034 * 1024**2)


def test_the_slow_gpu_of_the_real_nvbandwidth_figures_fails_the_published_floor() -> None:
    host = ScriptedHost(
        {
            "nvbandwidth host_to_device_memcpy_ce": fixture_output(
                "nvbandwidth_v08_h100x4_h2d_slow_gpu.txt"
            )
        },
        gpu_count="4",
    )
    result = run_nvbandwidth(AcceptancePolicy(instance_type="Standard_ND96isr_H100_v5"), host)
    assert (result.status, result.figure, result.threshold) == (FAIL, 14.2, 48.0)
    assert "host_to_device_memcpy_ce GPU 3 14.2 GB/s, below the floor 48" in result.reason


def test_a_waived_device_to_device_testcase_is_left_out() -> None:
    host = ScriptedHost(
        {
            "nvbandwidth device_to_device_memcpy_read_ce": fixture_output(
                "nvbandwidth_v08_waived.txt"
            )
        }
    )
    result = run_nvbandwidth(AcceptancePolicy(nvbandwidth_min_gbps=40.0), host)
    assert result.status is PASS and "device_to_device_min_gbps" not in result.detail


def test_ib_ports_and_pcie_links_read_a_real_sysfs_tree(tmp_path: Path) -> None:
    for rel, text in {
        "sys/bus/pci/devices/0000:18:00.0/vendor": "0x10de\n",
        "sys/bus/pci/devices/0000:18:00.0/class": "0x030200\n",
        "sys/bus/pci/devices/0000:18:00.0/current_link_speed": "32.0 GT/s PCIe\n",
        "sys/bus/pci/devices/0000:18:00.0/max_link_speed": "32.0 GT/s PCIe\n",
        "sys/bus/pci/devices/0000:18:00.0/current_link_width": "16\n",
        "sys/bus/pci/devices/0000:18:00.0/max_link_width": "16\n",
        "sys/class/infiniband/mlx5_0/ports/1/state": "4: ACTIVE\n",
        "sys/class/infiniband/mlx5_0/ports/1/rate": "200 Gb/sec (4X HDR)\n",
    }.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    host = SystemToolHost(root=str(tmp_path))
    assert run_pcie_link(AcceptancePolicy(expected_pcie_gen=5), host).status is PASS
    ports = run_ib_ports(AcceptancePolicy(expected_ib_ports=1, expected_ib_rate_gbps=400.0), host)
    assert (ports.status, ports.figure, ports.threshold) == (FAIL, 0.0, 1.0)
    assert "mlx5_0/1 ACTIVE at 200 Gb/s" in ports.reason
    assert (
        run_ib_ports(AcceptancePolicy(), SystemToolHost(root=str(tmp_path / "none"))).status is PASS
    )
    assert (
        run_pcie_link(AcceptancePolicy(), SystemToolHost(root=str(tmp_path / "none"))).status
        is UNKNOWN
    )


# -- the real host: subprocess, argv only --------------------------------------------------------


def stand_in(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_the_system_host_runs_a_stand_in_all_reduce_perf_from_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_in(
        bin_dir,
        "nvidia-smi",
        f"print(open({str(FIXTURES / 'nvidia_smi_q_x_l4_555.xml')!r}).read())\n",
    )
    stand_in(
        bin_dir,
        "all_reduce_perf",
        "import sys\n"
        f"open({str(tmp_path / 'argv')!r}, 'w').write(' '.join(sys.argv[1:]))\n"
        f"print(open({str(FIXTURES / 'all_reduce_perf_2_19_h100x8.txt')!r}).read())\n",
    )
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    result = run_nccl_all_reduce(AcceptancePolicy(nccl_min_busbw_gbps=400.0), SystemToolHost())
    assert (result.status, result.figure, result.threshold) == (PASS, 480.655, 400.0)
    assert (tmp_path / "argv").read_text() == (f"-b {1 << 30} -e {1 << 30} -f 2 -g 2 -n 20 -c 1")


def test_the_system_host_reports_a_missing_program_and_a_timeout(tmp_path: Path) -> None:
    host = SystemToolHost()
    missing = host.run([str(tmp_path / "no-such-tool")], 5)
    assert missing.missing and missing.exit_code == 127
    slow = host.run(
        [sys.executable, "-c", "import time; print('x', flush=True); time.sleep(30)"], 0.5
    )
    assert slow.timed_out and not slow.missing
    shell = host.run(["echo", "$(id)"], 5)  # never a shell: the text is an argument
    assert shell.stdout == "$(id)\n"


# -- the bundle ------------------------------------------------------------------------------


def test_the_acceptance_tools_ship_in_the_agent_bundle_and_keep_to_python_3_9() -> None:
    from navarch.agent.bundle import bundle_members

    members = {arc for arc, _ in bundle_members()}
    package = Path(__file__).resolve().parents[2] / "navarch" / "agent" / "acceptance_tools"
    for path in package.glob("*.py"):
        assert f"navarch/agent/acceptance_tools/{path.name}" in members
    assert "navarch/report/acceptance.py" in members and "navarch/textsafe.py" in members
    pytest.importorskip("vermin", reason="vermin is a dev dependency (pip install -e .[dev])")
    run = subprocess.run(
        [sys.executable, "-c", "import sys, vermin; sys.exit(vermin.main())", "-q", "-t=3.9-"]
        + ["--violations", "--no-tips", "--eval-annotations=no", str(package)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr

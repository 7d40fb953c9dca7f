"""The acceptance tools' parsers on real and documented outputs (tests/fixtures/acceptance/,
sources in its README): every figure read exactly."""

from __future__ import annotations

from pathlib import Path

import pytest

from navarch.agent.acceptance_tools.dcgm import DiagOutcome, parse_dcgmi_diag
from navarch.agent.acceptance_tools.host import SystemToolHost
from navarch.agent.acceptance_tools.nccl import parse_all_reduce_perf
from navarch.agent.acceptance_tools.nvbandwidth import parse_nvbandwidth
from navarch.agent.acceptance_tools.smi import parse_nvidia_smi_xml
from navarch.agent.acceptance_tools.sysfs import gpu_pcie_links, ib_ports, nic_firmware

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "acceptance"
MIB = 1024 * 1024


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_every_fixture_names_its_source_in_the_readme() -> None:
    readme = fixture("README.md")
    for path in FIXTURES.iterdir():
        if path.name != "README.md":
            assert f"`{path.name}`" in readme, path.name


# -- dcgmi diag -j ------------------------------------------------------------------------


def test_dcgm_4_level_3_on_eight_h100s_passes_with_every_test_read() -> None:
    result = parse_dcgmi_diag(fixture("dcgmi_diag_r3_dcgm4_h100x8.json"), level=3)
    assert result.outcome is DiagOutcome.PASS
    assert [(t.category, t.name, t.status) for t in result.tests] == [
        ("Deployment", "software", "pass"),
        ("Hardware", "diagnostic", "pass"),
    ]
    assert result.version == "4.1.1"


def test_dcgm_4_level_1_failure_names_the_test_the_gpu_and_dcgms_warning() -> None:
    result = parse_dcgmi_diag(fixture("dcgmi_diag_r1_dcgm4_gb10_fail.json"), level=1, exit_code=226)
    assert result.outcome is DiagOutcome.FAIL
    (failed,) = result.failed
    assert (failed.name, failed.failed_gpus) == ("software", (0,))
    assert failed.messages[0].startswith("GPU 0: Persistence Mode: Persistence mode for GPU 0")
    assert result.version == "4.2.3"


def test_dcgm_3_level_1_reads_its_upper_case_statuses() -> None:
    result = parse_dcgmi_diag(fixture("dcgmi_diag_r1_dcgm3.json"), level=1)
    assert result.outcome is DiagOutcome.PASS
    assert len(result.tests) == 9 and {t.status for t in result.tests} == {"pass"}
    assert result.tests[0].name == "Denylist" and result.version == "3.1.0"


def test_dcgm_runtime_error_is_no_verdict() -> None:
    result = parse_dcgmi_diag(fixture("dcgmi_diag_runtime_error.json"), level=1, exit_code=235)
    assert result.outcome is DiagOutcome.ERROR
    assert "unable to establish a connection" in result.detail


# -- nvbandwidth ----------------------------------------------------------------------------


def test_nvbandwidth_reads_the_single_gpu_sample_of_its_tracker() -> None:
    out = parse_nvbandwidth(fixture("nvbandwidth_v08_a100_h2d_sm.txt"))
    case = out.cases["host_to_device_memcpy_sm"]
    assert out.version == "v0.8"
    assert case.cells == ((0, 0, 25.13),) and case.sum_gbps == 25.13 and case.status == ""


def test_nvbandwidth_finds_the_slow_gpu_of_a_host_to_device_matrix() -> None:
    case = parse_nvbandwidth(fixture("nvbandwidth_v08_h100x4_h2d_slow_gpu.txt")).cases[
        "host_to_device_memcpy_ce"
    ]
    assert [v for _, _, v in case.cells] == [57.06, 56.68, 57.07, 14.2]
    assert case.slowest() == (0, 3, 14.2) and case.sum_gbps == 185.01


def test_nvbandwidth_device_to_device_skips_the_diagonal_and_finds_the_slow_pair() -> None:
    case = parse_nvbandwidth(fixture("nvbandwidth_v08_h100x4_d2d_read_ce.txt")).cases[
        "device_to_device_memcpy_read_ce"
    ]
    assert len(case.cells) == 12 and all(r != c for r, c, _ in case.cells)
    assert case.slowest() == (3, 1, 301.55) and case.sum_gbps == 4582.46


def test_nvbandwidth_waived_testcase_has_a_status_and_no_reading() -> None:
    case = parse_nvbandwidth(fixture("nvbandwidth_v08_waived.txt")).cases[
        "device_to_device_memcpy_read_ce"
    ]
    assert case.status == "Waived" and case.slowest() is None


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Segmentation fault\n",
        "Running x.\nmemcpy CE A(row) -> B(column) bandwidth (GB/s)\n   0\n 0  fast\n",
    ],
)
def test_nvbandwidth_output_it_does_not_know_raises(text: str) -> None:
    with pytest.raises(ValueError):
        parse_nvbandwidth(text)


# -- all_reduce_perf ------------------------------------------------------------------------


def test_all_reduce_perf_2_19_reads_both_halves_and_the_footer() -> None:
    out = parse_all_reduce_perf(fixture("all_reduce_perf_2_19_h100x8.txt"))
    (row,) = out.rows
    assert out.version == "2.19.6"
    assert (row.size_bytes, row.busbw_oop_gbps, row.busbw_ip_gbps) == (17179869184, 480.41, 480.9)
    assert (row.wrong_oop, row.wrong_ip) == (0, 0)
    assert out.avg_busbw_gbps == 480.655 and out.out_of_bounds == 0 and out.wrong == 0


def test_all_reduce_perf_counts_wrong_results_and_out_of_bounds_values() -> None:
    out = parse_all_reduce_perf(fixture("all_reduce_perf_2_19_wrong.txt"))
    assert out.rows[0].wrong_oop == 3 and out.out_of_bounds == 3 and out.wrong == 6


def test_all_reduce_perf_2_13_columns_are_read_by_name() -> None:
    out = parse_all_reduce_perf(fixture("all_reduce_perf_2_13_p4dn.txt"))
    (row,) = out.rows
    assert out.version == ""
    assert (row.size_bytes, row.busbw_oop_gbps, row.busbw_ip_gbps) == (1073741824, 230.77, 230.81)
    assert row.wrong_oop is None and out.avg_busbw_gbps == 230.79 and out.wrong == 0


@pytest.mark.parametrize(
    "text",
    [
        "",
        " .. node-1 pid 1234: Test failure common.cu:1061\n",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong"
        "     time   algbw   busbw #wrong\n",
    ],
)
def test_all_reduce_perf_without_a_table_raises(text: str) -> None:
    with pytest.raises(ValueError):
        parse_all_reduce_perf(text)


# -- nvidia-smi -q -x -----------------------------------------------------------------------


def test_nvidia_smi_xml_reads_inventory_and_versions_of_each_gpu() -> None:
    log = parse_nvidia_smi_xml(fixture("nvidia_smi_q_x_l4_555.xml"))
    assert (log.driver, log.cuda, log.attached_gpus) == ("555.42.06", "12.5", 2)
    first, second = log.gpus
    assert first.pci_bus_id == "00000000:01:00.0" and first.name == "NVIDIA L4"
    assert first.memory_total_bytes == 23034 * MIB
    assert (first.ecc_enabled, first.ecc_pending_enabled, first.persistence_enabled) == (
        True,
        True,
        False,
    )
    assert (first.vbios, first.inforom) == ("95.04.29.00.06", "G193.0200.00.01")
    assert (first.pcie_gen_current, first.pcie_gen_max) == (4, 4)
    assert (first.pcie_width_current, second.pcie_width_current, second.pcie_width_max) == (
        16,
        1,
        16,
    )


@pytest.mark.parametrize(
    "text", ["", "NVIDIA-SMI has failed because it couldn't communicate", "<nvidia_smi_log><gpu>"]
)
def test_nvidia_smi_output_that_is_not_its_xml_raises(text: str) -> None:
    with pytest.raises(ValueError):
        parse_nvidia_smi_xml(text)


# -- sysfs ----------------------------------------------------------------------------------


def write_tree(root: Path, files: dict[str, str]) -> SystemToolHost:
    for path, text in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return SystemToolHost(root=str(root))


def test_sysfs_readers_on_a_fake_tree(tmp_path: Path) -> None:
    pci = "/sys/bus/pci/devices"
    ib = "/sys/class/infiniband"
    host = write_tree(
        tmp_path,
        {
            f"{pci}/0000:18:00.0/vendor": "0x10de\n",
            f"{pci}/0000:18:00.0/class": "0x030200\n",
            f"{pci}/0000:18:00.0/current_link_speed": "32.0 GT/s PCIe\n",
            f"{pci}/0000:18:00.0/max_link_speed": "32.0 GT/s PCIe\n",
            f"{pci}/0000:18:00.0/current_link_width": "8\n",
            f"{pci}/0000:18:00.0/max_link_width": "16\n",
            f"{pci}/0000:2a:00.0/vendor": "0x10de\n",  # an older kernel's speed text
            f"{pci}/0000:2a:00.0/class": "0x030000\n",
            f"{pci}/0000:2a:00.0/current_link_speed": "8 GT/s\n",
            f"{pci}/0000:2a:00.0/max_link_speed": "16 GT/s\n",
            f"{pci}/0000:2a:00.0/current_link_width": "16\n",
            f"{pci}/0000:2a:00.0/max_link_width": "16\n",
            f"{pci}/0000:2b:00.1/vendor": "0x10de\n",  # the GPU's audio function
            f"{pci}/0000:2b:00.1/class": "0x040300\n",
            f"{pci}/0000:00:00.0/vendor": "0x8086\n",
            f"{pci}/0000:00:00.0/class": "0x060000\n",
            f"{ib}/mlx5_0/fw_ver": "28.39.1002\n",
            f"{ib}/mlx5_0/ports/1/state": "4: ACTIVE\n",
            f"{ib}/mlx5_0/ports/1/rate": "400 Gb/sec (4X NDR)\n",
            f"{ib}/mlx5_0/ports/1/link_layer": "InfiniBand\n",
            f"{ib}/mlx5_1/fw_ver": "28.39.1002\n",
            f"{ib}/mlx5_1/ports/1/state": "1: DOWN\n",
            f"{ib}/mlx5_1/ports/1/rate": "10 Gb/sec (4X SDR)\n",
            f"{ib}/mlx5_1/ports/1/link_layer": "InfiniBand\n",
            f"{ib}/rdmap0s31/ports/1/state": "4: ACTIVE\n",
        },
    )
    links = gpu_pcie_links(host)
    assert [(k.address, k.gen_current, k.gen_max, k.width_current, k.width_max) for k in links] == [
        ("0000:18:00.0", 5, 5, 8, 16),
        ("0000:2a:00.0", 3, 4, 16, 16),
    ]
    ports = ib_ports(host)
    assert [(p.device, p.port, p.state, p.rate_gbps, p.link_layer) for p in ports] == [
        ("mlx5_0", 1, "ACTIVE", 400.0, "InfiniBand"),
        ("mlx5_1", 1, "DOWN", 10.0, "InfiniBand"),
        ("rdmap0s31", 1, "ACTIVE", None, ""),
    ]
    assert nic_firmware(host) == {"mlx5_0": "28.39.1002", "mlx5_1": "28.39.1002"}


def test_a_node_without_infiniband_has_no_ports(tmp_path: Path) -> None:
    host = SystemToolHost(root=str(tmp_path))
    assert ib_ports(host) == () and nic_firmware(host) == {}


def test_dcgm_files_disabled_persistence_mode_as_a_setting_by_its_own_category() -> None:
    # Verbatim public document (tests/fixtures/acceptance/README.md names its source):
    # error_category 8 (software other) with error_severity 5 (DCGM_ERROR_CONFIG).
    doc = fixture("dcgmi_diag_r1_dcgm4_gb10_persistence_verbatim.json")
    result = parse_dcgmi_diag(doc, level=1, exit_code=226)
    assert result.outcome is DiagOutcome.FAIL and result.settings_only
    (failed,) = result.failed
    assert failed.setting and "Persistence mode for GPU 0 is disabled" in failed.messages[0]
    # The same warning filed under a hardware category is the hardware's.
    hardware = doc.replace('"error_category": 8', '"error_category": 10')
    assert not parse_dcgmi_diag(hardware, level=1, exit_code=226).settings_only

"""bench/gpu_compare.py: the table bench/on_gpu.sh prints, on published tool outputs.

nvidia-smi: tests/fixtures/acceptance/nvidia_smi_q_x_a100_sxm4_510.xml (netdata's real
A100-SXM4-40GB log, source in that folder's README). The agent report beside it is composed:
the readings an agent on that machine would make, in the report's own shape.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from bench.gpu_compare import Verdict, failed, link_gbps, main, render, report_rows, tool_rows

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "acceptance"
SMI = (FIXTURES / "nvidia_smi_q_x_a100_sxm4_510.xml").read_text()
MIB = 1024 * 1024
REPORT: dict[str, Any] = {
    "status": "healthy",
    "gpus": [
        {
            "index": 0,
            "uuid": "GPU-27b94a00-ed54-5c24-b1fd-1054085de32a",
            "name": "NVIDIA A100-SXM4-40GB",
            "pci_bus_id": "0000:00:04",
            "temperature_c": 37.0,
            "power_w": 70.4,
            "memory_total_bytes": 40960 * MIB,
        }
    ],
    "checks": [
        {
            "name": "nvml",
            "status": "healthy",
            "message": "nvml backend ready",
            "evidence": {"backend": "nvml", "driver_version": "510.47.03"},
        },
        {
            "name": "kernel_log",
            "status": "healthy",
            "message": "read 12 new kernel log lines from journal",
            "evidence": {"source": "journal", "lines": 12},
        },
    ],
}


def _verdicts(rows) -> dict[str, Verdict]:
    return {r.what: r.verdict for r in rows}


def test_a_report_that_matches_nvidia_smi_is_ok_on_every_row() -> None:
    rows = report_rows(REPORT, SMI)
    assert _verdicts(rows) == {
        "GPU count": Verdict.OK,
        "driver version": Verdict.OK,
        "GPU 0 name": Verdict.OK,
        "GPU 0 PCI bus": Verdict.OK,
        "GPU 0 UUID": Verdict.OK,
        "GPU 0 temperature": Verdict.OK,
        "GPU 0 power": Verdict.OK,
        "GPU 0 memory total": Verdict.OK,
        "agent verdict": Verdict.OK,
        "kernel log read": Verdict.OK,
    }
    assert not failed(rows)


def test_the_table_shows_both_values_and_the_verdict_in_aligned_columns() -> None:
    text = render(report_rows(REPORT, SMI))
    lines = text.splitlines()
    assert lines[0].split() == ["reading", "navarch", "nvidia-smi", "verdict"]
    assert set(lines[1].replace(" ", "")) == {"-"}
    temp = next(line for line in lines if line.startswith("GPU 0 temperature"))
    assert temp.split() == ["GPU", "0", "temperature", "37", "C", "36", "C", "ok"]
    # Every column starts where its header does.
    for header in ("navarch", "nvidia-smi", "verdict"):
        col = lines[0].index(header)
        assert all(line[col - 2 : col] == "  " for line in lines[2:-1]), header
    assert lines[-1] == "10 ok, 0 DIFFERS, 0 FAULT, 0 not read"


@pytest.mark.parametrize(
    ("change", "row", "verdict"),
    [
        (lambda r: r["gpus"][0].update(temperature_c=45.0), "GPU 0 temperature", Verdict.DIFFERS),
        (lambda r: r["gpus"][0].update(power_w=None), "GPU 0 power", Verdict.NOT_READ),
        (
            lambda r: r["gpus"][0].update(memory_total_bytes=40355 * MIB),
            "GPU 0 memory total",
            Verdict.DIFFERS,
        ),
        (
            lambda r: r["checks"][0]["evidence"].update(driver_version="550.54.15"),
            "driver version",
            Verdict.DIFFERS,
        ),
        (lambda r: r.update(status="unhealthy"), "agent verdict", Verdict.FAULT),
        (lambda r: r["checks"][1].update(status="degraded"), "kernel log read", Verdict.NOT_READ),
    ],
)
def test_a_reading_that_disagrees_or_is_missing_fails_the_run(change, row, verdict) -> None:
    report = copy.deepcopy(REPORT)
    change(report)
    rows = report_rows(report, SMI)
    assert _verdicts(rows)[row] is verdict
    assert failed(rows)


def test_tools_go_through_the_shipped_parsers_and_missing_tools_do_not_fail() -> None:
    rows = tool_rows(
        SMI,
        dcgmi=(FIXTURES / "dcgmi_diag_r1_dcgm3.json").read_text(),
        nvbandwidth=(FIXTURES / "nvbandwidth_v08_a100_h2d_sm.txt").read_text(),
        nccl=(FIXTURES / "all_reduce_perf_2_19_h100x8.txt").read_text(),
    )
    shown = {r.what: (r.navarch, r.nvidia_smi, r.verdict) for r in rows}
    # 25.13 GB/s over a Gen4 x16 link's 31.5 GB/s: 80 %.
    assert shown["GPU 0 h2d copy"] == ("25.13 GB/s (80%)", "Gen4 x16: 31.5 GB/s", Verdict.OK)
    assert shown["all_reduce_perf -g 1"] == ("1 sizes, 0 wrong", "-", Verdict.OK)
    assert shown["dcgmi diag -r 1"][2] in (Verdict.OK, Verdict.FAULT)
    absent = tool_rows(SMI)
    assert [r.verdict for r in absent] == [Verdict.NOT_READ] * 3
    assert not failed(absent)


def test_wrong_all_reduce_results_and_a_slow_copy_are_faults() -> None:
    rows = tool_rows(
        SMI,
        nccl=(FIXTURES / "all_reduce_perf_2_19_wrong.txt").read_text(),
        nvbandwidth=(FIXTURES / "nvbandwidth_v08_a100_h2d_sm.txt")
        .read_text()
        .replace("25.13", "9.80"),
    )
    assert _verdicts(rows)["all_reduce_perf -g 1"] is Verdict.FAULT
    assert _verdicts(rows)["GPU 0 h2d copy"] is Verdict.DIFFERS


def test_a_links_rate_follows_the_pcie_line_code() -> None:
    assert link_gbps(3, 16) == pytest.approx(15.75, abs=0.01)
    assert link_gbps(5, 16) == pytest.approx(63.0, abs=0.1)
    assert link_gbps(2, 16) == pytest.approx(8.0)
    assert link_gbps(None, 16) is None


def test_main_prints_the_table_and_exits_1_on_a_difference(tmp_path, capsys) -> None:
    import json

    report = copy.deepcopy(REPORT)
    (tmp_path / "ok.json").write_text(json.dumps(report))
    report["gpus"][0]["temperature_c"] = 50.0
    (tmp_path / "hot.json").write_text(json.dumps(report))
    (tmp_path / "smi.xml").write_text(SMI)
    assert main(["--report", str(tmp_path / "ok.json"), "--smi", str(tmp_path / "smi.xml")]) == 0
    assert "GPU 0 temperature" in capsys.readouterr().out
    assert main(["--report", str(tmp_path / "hot.json"), "--smi", str(tmp_path / "smi.xml")]) == 1


def test_tool_output_no_parser_can_read_is_no_reading_and_fails_the_run() -> None:
    rows = tool_rows(SMI, nvbandwidth="Segmentation fault\n", nccl="")
    assert _verdicts(rows)["nvbandwidth h2d"] is Verdict.NOT_READ
    assert _verdicts(rows)["all_reduce_perf -g 1"] is Verdict.NOT_READ
    assert failed(rows)

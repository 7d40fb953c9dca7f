"""Host signals: the kernel-log matchers on real lines (tests/fixtures/host_signals names
each line's source), windows and latches across runs, sysfs AER counters, the clock, the
remediation rows, and the agent CLI on fake GPUs with a kernel-log file."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from navarch.agent import AgentConfig, host_readings, load_config, run_once
from navarch.agent import host_signals as hs
from navarch.agent import kernel_log as kl
from navarch.agent.host import read_host_readings
from navarch.agent.host_readings import (
    STA_UNSYNC,
    TIME_ERROR,
    AerCounts,
    HostReadings,
    read_aer_counters,
    read_clock,
)
from navarch.agent.log_rules import LogRule
from navarch.fleet.remedies import FaultClass, fault_class, row_for
from navarch.report.health import Remedy, Status
from tests.support.fake_agent import write_agent_yaml

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "host_signals"
REAL = (FIXTURES / "real.log").read_text().splitlines()
NOISE = FIXTURES / "noise.log"
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

# The signal each line of real.log is (README.md there names each line's source).
REAL_KINDS = (
    "host_cpu:soft_lockup",
    "host_cpu:hard_lockup",
    "host_cpu:hung_task",
    "host_cpu:rcu_stall",
    "host_cpu:machine_check",
    "host_cpu:machine_check_fatal",
    "host_memory:oom_kill",
    "host_storage:nvme_reset",
    "host_storage:nvme_timeout",
    "host_storage:nvme_disabled",
    "host_storage:fs_read_only",
    "pcie:aer_corrected",
    "pcie:aer_corrected",
    "pcie:aer_nonfatal",
    "pcie:aer_fatal",
    "nvlink:link_mask",
    "pcie:peermem",
)


def lines(*raw: str) -> list[kl.KernelLine]:
    return [kl.KernelLine(r) for r in raw]


def evaluate(raw: list[str], saved: dict[str, Any] | None = None, **kw: Any) -> hs.HostSignals:
    readings = kw.pop("readings", HostReadings())
    return hs.evaluate(lines(*raw), readings, saved or {}, kw.pop("now", NOW))


@pytest.mark.parametrize(("line", "kind"), list(zip(REAL, REAL_KINDS, strict=True)))
def test_each_real_kernel_line_names_its_host_signal(line: str, kind: str) -> None:
    events = hs.parse_host_lines(lines(line), NOW)
    assert [e.kind for e in events] == [kind]
    assert events[0].line in line  # the line itself, prefix stripped


def test_noise_matches_no_host_signal_but_the_counted_ones() -> None:
    noise = NOISE.read_text().splitlines()
    kinds = [e.kind for e in hs.parse_host_lines(lines(*noise), NOW)]
    # the segfault, both audit lines and the memory cgroup OOM match nothing; the
    # corrected AER error's two lines are one event
    assert kinds == ["pcie:aer_corrected", "host_cpu:soft_lockup"]


def test_noise_stays_healthy() -> None:
    found = evaluate(NOISE.read_text().splitlines())
    assert {c.status for c in found.checks} == {Status.HEALTHY}
    assert all(c.fault_key() is None for c in found.checks)


def test_soft_lockups_fire_at_the_window_threshold_across_runs() -> None:
    saved: dict[str, Any] = {}
    statuses = []
    for i in range(3):
        at = NOW + timedelta(minutes=10 * i)
        stamp = at.strftime("%Y-%m-%dT%H:%M:%S,000000+00:00")
        line = (
            f"kern  :emerg : {stamp} watchdog: BUG: soft lockup - CPU#{i} stuck for 22s! [nccl:77]"
        )
        found = evaluate([line], saved, now=at)
        saved = found.state
        (check,) = [c for c in found.checks if c.fault_kind == "host_cpu:soft_lockup"]
        statuses.append(check.status)
    assert statuses == [Status.HEALTHY, Status.HEALTHY, Status.UNHEALTHY]
    assert check.action is Remedy.REBOOT and check.evidence["count"] == 3
    later = evaluate([], saved, now=NOW + timedelta(hours=2))
    assert not [c for c in later.checks if c.fault_kind == "host_cpu:soft_lockup"]


def test_a_counted_line_stamped_before_its_window_is_not_counted() -> None:
    old = "[Thu Sep 19 02:29:46 2024] nvidia-peermem nv_get_p2p_free_callback:127 ERROR x"
    assert evaluate([old]).checks == ()
    (check,) = evaluate(
        [old.replace("Thu Sep 19 02:29:46 2024", "Sun Mar  1 11:29:46 2026")]
    ).checks
    assert check.fault_kind == "pcie:peermem"


def test_fatal_signal_latches_for_the_boot_and_a_reboot_clears_it() -> None:
    first = evaluate([REAL[10]])  # EXT4-fs (sdb): Remounting filesystem read-only
    again = evaluate([], first.state, now=NOW + timedelta(days=2))
    for found in (first, again):
        (check,) = found.checks
        assert (check.status, check.action) == (Status.UNHEALTHY, Remedy.REBOOT)
        assert check.fault_kind == "host_storage:fs_read_only"
        assert check.evidence["class"] == "host_storage"
        assert "EXT4-fs (sdb): Remounting filesystem read-only" in check.message
    assert evaluate([], {}).checks == ()  # the runner passes {} after a reboot


def test_one_aer_error_of_two_lines_counts_once() -> None:
    found = evaluate(REAL[11:13])
    (check,) = found.checks
    assert check.evidence["count"] == 1 and check.status is Status.HEALTHY


def test_uncorrectable_aer_is_unhealthy_at_once() -> None:
    found = evaluate([REAL[13]])
    (check,) = found.checks
    assert (check.fault_kind, check.status) == ("pcie:aer_nonfatal", Status.UNHEALTHY)


def test_a_hostile_line_is_escaped_and_capped() -> None:
    comm = "\x1b[2J" + "x" * 400
    found = evaluate([f"watchdog: BUG: soft lockup - CPU#1 stuck for 22s! [{comm}:9]"])
    (check,) = found.checks
    shown = check.evidence["line"]
    assert "\x1b" not in shown and "\\x1b[2J" in shown
    assert len(shown) <= 256 and shown.endswith("...")


def test_saved_state_from_a_hostile_or_old_file_is_dropped_not_raised() -> None:
    saved = {"counted": {"host_cpu:soft_lockup": [["x", 1], [1.0]], "gone:kind": [[1, 1]]}}
    assert evaluate([], saved).checks == ()
    for bad in ({"counted": [1]}, {"latched": {"host_cpu:hard_lockup": 3}}, {"aer": "x"}):
        assert evaluate([], bad).checks == ()
    (check,) = evaluate([], {"latched": {"host_cpu:hard_lockup": {"count": "9"}}}).checks
    assert check.evidence["count"] == 1


def test_a_journal_line_of_the_boot_before_a_reboot_is_not_this_boots_signal() -> None:
    line = "EXT4-fs (sdb): Remounting filesystem read-only"
    wall = NOW - timedelta(minutes=5)
    old = kl.KernelLine(line, wall, None, "boot-old")
    assert hs.evaluate([old], HostReadings(), {}, NOW, "boot-new").checks == ()
    (check,) = hs.evaluate([old], HostReadings(), {}, NOW, "boot-old").checks
    assert check.fault_kind == "host_storage:fs_read_only"


# Documentation/ABI/testing/sysfs-bus-pci-devices-aer-stats, its sample output (composed
# from the document: the other counter names as the kernel prints them).
def aer_tree(root: Path, device: str, cor: int, fatal: int = 0, nonfatal: int = 0) -> Path:
    d = root / "bus" / "pci" / "devices" / device
    d.mkdir(parents=True, exist_ok=True)
    (d / "aer_dev_correctable").write_text(
        f"RxErr {cor}\nBadTLP 0\nBadDLLP 0\nRollover 0\nTimeout 0\nNonFatalErr 0\n"
        f"CorrIntErr 0\nHeaderOF 0\nTOTAL_ERR_COR {cor}\n"
    )
    (d / "aer_dev_fatal").write_text(f"Undefined 0\nDLP {fatal}\nTOTAL_ERR_FATAL {fatal}\n")
    (d / "aer_dev_nonfatal").write_text(f"Undefined 0\nDLP 0\nTOTAL_ERR_NONFATAL {nonfatal}\n")
    return root


def test_sysfs_aer_counters_are_read_per_device(tmp_path: Path) -> None:
    aer_tree(tmp_path, "0000:3b:00.0", 2)
    (tmp_path / "bus" / "pci" / "devices" / "0000:00:00.0").mkdir()  # no AER files
    assert read_aer_counters(tmp_path) == (AerCounts("0000:3b:00.0", 2, 0, 0),)


def test_correctable_counter_growth_is_counted_from_the_first_baseline() -> None:
    def run(cor: int, saved: dict[str, Any]) -> hs.HostSignals:
        readings = HostReadings(aer=(AerCounts("0000:3b:00.0", cor, 0, 0),))
        return evaluate([], saved, readings=readings)

    first = run(500, {})  # errors before the agent's first read have no time: baseline
    assert first.checks == ()
    grown = run(512, first.state)
    (check,) = grown.checks
    assert (check.fault_kind, check.status) == ("pcie:aer_counter_correctable", Status.DEGRADED)
    assert "0000:3b:00.0: TOTAL_ERR_COR 512 (+12)" in check.message


def test_uncorrectable_counter_latches_unhealthy() -> None:
    readings = HostReadings(aer=(AerCounts("0000:3b:00.0", 0, 1, 0),))
    (check,) = evaluate([], readings=readings).checks
    assert check.fault_kind == "pcie:aer_counter_uncorrectable"
    assert check.status is Status.UNHEALTHY and "TOTAL_ERR_FATAL 1" in check.message


def test_the_fake_backend_reads_aer_only_where_told_and_never_the_clock(
    make_config: Callable[..., AgentConfig], tmp_path: Path
) -> None:
    fake = read_host_readings(make_config())
    assert fake.aer is None and not fake.clock.read
    tree = aer_tree(tmp_path / "sysfs", "0000:3b:00.0", 1)
    told = read_host_readings(make_config(sysfs_root=str(tree)))
    assert told.aer == (AerCounts("0000:3b:00.0", 1, 0, 0),) and not told.clock.read


def test_a_real_node_reads_its_sysfs_and_clock(
    make_config: Callable[..., AgentConfig], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(host_readings, "libc_adjtimex", lambda: (TIME_ERROR, STA_UNSYNC))
    tree = aer_tree(tmp_path / "sysfs", "0000:3b:00.0", 0, nonfatal=2)
    readings = read_host_readings(make_config(fake_gpu=False, sysfs_root=str(tree)))
    assert readings.clock.synchronised is False
    assert readings.aer == (AerCounts("0000:3b:00.0", 0, 0, 2),)
    gone = read_host_readings(make_config(fake_gpu=False, sysfs_root=str(tmp_path / "nope")))
    assert gone.aer is None and gone.aer_error and "nope" in gone.aer_error


def test_agent_yaml_takes_a_sysfs_root(tmp_path: Path) -> None:
    assert load_config(write_agent_yaml(tmp_path, sysfs_root="/host/sys")).sysfs_root == "/host/sys"


def test_unsynchronised_clock_is_a_degraded_clock_fault() -> None:
    for answer in ((TIME_ERROR, STA_UNSYNC), (0, STA_UNSYNC), (TIME_ERROR, 0)):
        clock = read_clock(lambda a=answer: a, platform="linux")
        assert clock.synchronised is False
        (check,) = evaluate([], readings=HostReadings(clock=clock)).checks
        assert (check.status, check.fault_kind) == (Status.DEGRADED, "clock:unsynchronised")
    assert read_clock(lambda: (0, 0x2001), platform="linux").synchronised is True


def test_clock_off_linux_or_failing_reads_unknown_not_unhealthy() -> None:
    def broken() -> tuple[int, int]:
        raise OSError(1, "Operation not permitted")

    for clock in (read_clock(platform="darwin"), read_clock(broken, platform="linux")):
        assert clock.synchronised is None
        (check,) = evaluate([], readings=HostReadings(clock=clock)).checks
        assert check.status is Status.HEALTHY and check.evidence["synchronised"] is None


RULES = (
    *hs.HOST_RULES,
    hs.AER_COUNTER_CORRECTABLE,
    hs.AER_COUNTER_UNCORRECTABLE,
    hs.CLOCK_UNSYNCED,
)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.kind)
def test_every_host_signal_has_its_class_and_a_remediation_row(rule: LogRule) -> None:
    cls = fault_class(rule.kind)
    assert cls is not None and cls.value == rule.signal_class
    row = row_for([], rule.kind)
    assert row is not None and row.source
    assert rule.source  # the kernel file or driver its format string comes from


def test_report_only_host_signals_have_alert_rows() -> None:
    for kind in ("host_cpu:hung_task", "host_memory:oom_kill", "clock:unsynchronised"):
        row = row_for([], kind)
        assert row is not None and row.alert, kind
    fs_row = row_for([], "host_storage:fs_read_only")
    assert fs_row is not None and fs_row.match == FaultClass.HOST_STORAGE.value
    assert not fs_row.alert


def test_soft_lockups_are_counted_across_timer_runs_in_the_state_file(
    make_config: Callable[..., AgentConfig], tmp_path: Path
) -> None:
    cfg = make_config()
    log = tmp_path / "kern.log"
    statuses = []
    for i in range(3):
        with log.open("a") as fh:
            fh.write(f"watchdog: BUG: soft lockup - CPU#{i} stuck for 23s! [python3:{100 + i}]\n")
        report = run_once(cfg, now=NOW + timedelta(minutes=i))
        statuses.append(report["status"])
    assert statuses == ["healthy", "healthy", "unhealthy"]
    (check,) = [c for c in report["checks"] if c["name"] == "host_cpu"]
    assert check["fault_key"]["kind"] == "host_cpu:soft_lockup"


def agent_stdout(tmp_path: Path, kernel_log: Path) -> dict[str, Any]:
    cfg = write_agent_yaml(tmp_path)
    res = subprocess.run(
        [sys.executable, "-m", "navarch.agent", "run", "--once", "--stdout"]
        + ["--config", str(cfg), "--kernel-log", str(kernel_log)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    report: dict[str, Any] = json.loads(res.stdout)
    return report


def test_agent_cli_names_each_host_signal_in_the_report(
    tmp_path: Path, validate_report: Callable[[dict[str, Any]], None]
) -> None:
    report = agent_stdout(tmp_path, FIXTURES / "real.log")
    validate_report(report)
    found = {c["evidence"]["kind"]: c for c in report["checks"] if "kind" in c["evidence"]}
    assert set(REAL_KINDS) <= set(found)
    for line, kind in zip(REAL, REAL_KINDS, strict=True):
        check = found[kind]
        assert f"({kind.split(':')[0]})" in check["message"]  # the class
        if kind != "pcie:aer_corrected":  # one error of two lines names its last
            assert (
                check["evidence"]["line"] in line and check["evidence"]["line"] in check["message"]
            )
    assert report["status"] == "unhealthy"


def test_agent_cli_stays_healthy_on_noise(tmp_path: Path) -> None:
    report = agent_stdout(tmp_path, NOISE)
    assert report["status"] == "healthy", [c for c in report["checks"] if c["status"] != "healthy"]

"""Kernel-log XID parsing over every line form of gpu-health.md §3, bursts, and the readers."""

from __future__ import annotations

import json
import os
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from navarch.agent import kernel_log as kl
from navarch.report.health import Remedy as Action
from navarch.report.xid import Severity

# Real lines from public production logs (gpu-health.md §3).
REAL = {
    "uptime_79": "[6781741.548779] NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    "gpu_at": "[Sun Feb 23 16:24:18 2025] NVRM: GPU at PCI:0000:9b:00: GPU-509665ad-b600-ac93-3616-d754b23d636d",
    "human_119": "[Sun Feb 23 16:24:18 2025] NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, Timeout after 6s of waiting for RPC response from GPU4 GSP! Expected function 103 (GSP_RM_ALLOC) (0x2081 0x4).",
    "iso_43": "kern  :warn  : 2025-01-21T04:41:44,287197+00:00 NVRM: Xid (PCI:0000:38:00): 43, pid=2924364, name=pt_main_thread, Ch 00000008",
    "human_109": "[Fri Aug 30 11:43:14 2024] NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005",
    "bare_63_pid_only": "NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.",
}


def one(text: str) -> kl.XidEvent:
    events = kl.parse_text([text], now=datetime(2025, 6, 1, tzinfo=UTC))
    assert len(events) == 1, events
    return events[0]


def test_dmesg_uptime_prefix() -> None:
    ev = one(REAL["uptime_79"])
    assert (ev.kind, ev.code, ev.pci_bus_id) == ("xid", 79, "0000:91:00")
    assert ev.uptime_s == pytest.approx(6781741.548779)
    assert ev.severity is Severity.FATAL and ev.action is Action.REBOOT
    assert ev.message == "GPU has fallen off the bus."


def test_human_time_and_uuid_mapping() -> None:
    events = kl.parse_text([REAL["gpu_at"], REAL["human_119"]])
    assert len(events) == 1
    ev = events[0]
    assert ev.code == 119 and ev.pci_bus_id == "0000:9b:00"
    assert ev.uuid == "GPU-509665ad-b600-ac93-3616-d754b23d636d"
    assert ev.time == datetime(2025, 2, 23, 16, 24, 18, tzinfo=UTC)
    assert ev.message.startswith("Timeout after 6s")
    assert "pid=" not in ev.message


def test_dmesg_iso() -> None:
    ev = one(REAL["iso_43"])
    assert ev.code == 43 and ev.pci_bus_id == "0000:38:00"
    assert ev.time == datetime(2025, 1, 21, 4, 41, 44, 287197, tzinfo=UTC)
    assert ev.severity is Severity.IGNORE


def test_ctxsw_timeout() -> None:
    ev = one(REAL["human_109"])
    assert ev.code == 109 and ev.time == datetime(2024, 8, 30, 11, 43, 14, tzinfo=UTC)
    assert ev.severity is Severity.WARNING


def test_pid_without_name_and_no_prefix() -> None:
    ev = one(REAL["bare_63_pid_only"])
    assert (ev.code, ev.pci_bus_id, ev.time, ev.uptime_s) == (63, "0000:10:1c", None, None)
    assert ev.message.startswith("Row Remapper")


def test_old_driver_without_pci_prefix() -> None:
    ev = one("NVRM: Xid (0000:01:00): 13, Ch 00000001, intr 10000000")
    assert (ev.code, ev.pci_bus_id) == (13, "0000:01:00")
    assert ev.message == "Ch 00000001, intr 10000000"


def test_syslog_prefix_with_uptime() -> None:
    ev = one(
        "Feb 23 16:24:18 gpu-node-1 kernel: [ 1234.567890] NVRM: Xid (PCI:0000:3B:00): 48, pid=7, name=python, DBE"
    )
    assert (ev.code, ev.pci_bus_id) == (48, "0000:3b:00")
    assert ev.time == datetime(2025, 2, 23, 16, 24, 18, tzinfo=UTC)
    assert ev.uptime_s == pytest.approx(1234.56789)


def test_rfc3339_syslog_prefix() -> None:
    ev = one(
        "2025-01-21T04:41:44.123456+00:00 node1 kernel: NVRM: Xid (PCI:0000:38:00): 31, pid=1, name=x, MMU Fault"
    )
    assert ev.code == 31 and ev.time == datetime(2025, 1, 21, 4, 41, 44, 123456, tzinfo=UTC)


def test_kmsg_record() -> None:
    ev = one(
        "4,1234,5678901234,-;NVRM: Xid (PCI:0000:18:00): 48, pid=123, name=python, DBE (0x1,0x2)"
    )
    assert ev.code == 48 and ev.uptime_s == pytest.approx(5678.901234)


def test_nvlink5_subcode_and_fatal_flag() -> None:
    ev = one(
        "[  100.0] NVRM: Xid (PCI:0008:06:00): 149, pid='<unknown>', name=<unknown>, NETIR_LINK_EVT Fatal XC0 i0 Link 04 (0x004505c6 0x00000000 0x0 0x0 0x0 0x0)"
    )
    assert ev.pci_bus_id == "0008:06:00"
    assert ev.subcode == (0x004505C6 >> 20) & 0x3F == 4
    assert ev.severity is Severity.FATAL
    nonfatal = one(
        "NVRM: Xid (PCI:0008:06:00): 145, RLW_REMAP Nonfatal XC0 i0 Link 00 (0x00004b06 0x00000000 0x0)"
    )
    assert nonfatal.severity is Severity.IGNORE and nonfatal.subcode == 0


def test_xid154_target_action() -> None:
    ev = one(
        "[200.1] NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"
    )
    assert ev.severity is Severity.FATAL and ev.action is Action.REBOOT


def test_sxid_lines() -> None:
    fatal = one(
        "[201.0] nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 32 LTSSM Fault Up"
    )
    assert (fatal.kind, fatal.code, fatal.pci_bus_id, fatal.severity) == (
        "sxid",
        20034,
        "0000:05:00",
        Severity.FATAL,
    )
    nonfatal = one(
        "nvidia-nvswitch0: SXid (PCI:0000:06:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error (First)"
    )
    assert nonfatal.severity is Severity.WARNING


def test_fallen_off_bus_without_xid() -> None:
    ev = one("[202.0] NVRM: GPU 0000:3B:00.0: GPU has fallen off the bus.")
    assert (ev.code, ev.pci_bus_id, ev.severity) == (79, "0000:3b:00", Severity.FATAL)


@pytest.mark.parametrize(
    "line",
    [
        "",
        "random text",
        "NVRM: loading NVIDIA UNIX x86_64 Kernel Module",
        "NVRM: Xid (PCI:zzzz): 79, x",
        "[123.4] usb 1-1: new device",
        "NVRM: Xid (PCI:0000:91:00): notanumber, pid=1",
    ],
)
def test_non_xid_lines_are_ignored(line: str) -> None:
    assert kl.parse_text([line]) == []


@pytest.mark.parametrize(
    ("raw", "norm"),
    [
        ("00000000:3B:00.0", "0000:3b:00"),
        ("0000:9b:00", "0000:9b:00"),
        ("3b:00", "0000:3b:00"),
        ("0008:06:00.1", "0008:06:00"),
    ],
)
def test_normalise_bdf(raw: str, norm: str) -> None:
    assert kl.normalise_bdf(raw) == norm


def test_burst_collapses_within_one_second() -> None:
    lines = [
        f"[1000.{i:06d}] NVRM: Xid (PCI:0000:18:00): 13, pid=1, name=x, Graphics Exception"
        for i in range(0, 900000, 30000)
    ]
    lines += [
        f"[1005.{i:06d}] NVRM: Xid (PCI:0000:18:00): 13, pid=1, name=x, Graphics Exception"
        for i in range(5)
    ]
    lines.append("[1000.5] NVRM: Xid (PCI:0000:2a:00): 13, pid=1, name=x, Graphics Exception")
    events = kl.parse_text(lines)
    by_bus = [(e.pci_bus_id, e.uptime_s, e.count) for e in events]
    assert by_bus == [
        ("0000:18:00", 1000.0, 30),
        ("0000:18:00", 1005.0, 5),
        ("0000:2a:00", 1000.5, 1),
    ]


def test_different_codes_do_not_collapse() -> None:
    events = kl.parse_text(
        [
            "[10.0] NVRM: Xid (PCI:0000:18:00): 13, pid=1, name=x, a",
            "[10.1] NVRM: Xid (PCI:0000:18:00): 31, pid=1, name=x, b",
        ]
    )
    assert [e.code for e in events] == [13, 31]


def test_timeless_repeats_collapse_only_when_adjacent() -> None:
    line = "NVRM: Xid (PCI:0000:18:00): 13, pid=1, name=x, a"
    other = "NVRM: Xid (PCI:0000:2a:00): 79, pid=1, name=x, b"
    events = kl.parse_text([line, line, other, line])
    assert [(e.code, e.count) for e in events] == [(13, 2), (79, 1), (13, 1)]


def test_text_file_reads_incrementally(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(REAL["uptime_79"] + "\n")
    first = kl.read_text_file(log, None)
    assert len(first.lines) == 1
    again = kl.read_text_file(log, first.position)
    assert again.lines == ()
    with log.open("a") as fh:
        fh.write(
            REAL["human_119"] + "\n" + "NVRM: Xid (PCI:0000:18:00): 4"
        )  # last line still being written
    more = kl.read_text_file(log, first.position)
    assert [ln.message.split(":")[0] for ln in more.lines] == ["NVRM"]
    assert kl.parse_lines(more.lines)[0].code == 119


def test_text_file_replaced_is_read_from_start(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(REAL["uptime_79"] + "\n" + REAL["iso_43"] + "\n")
    first = kl.read_text_file(log, None)
    log.write_text(REAL["human_109"] + "\n")  # rotated / truncated
    second = kl.read_text_file(log, first.position)
    assert [e.code for e in kl.parse_lines(second.lines)] == [109]


def test_missing_text_file_is_empty(tmp_path: Path) -> None:
    assert kl.read_text_file(tmp_path / "nope.log", None).lines == ()


def test_journal_reader_with_cursor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A journalctl stand-in on PATH prints JSON records; the reader passes the cursor on."""
    records = [
        {
            "MESSAGE": "NVRM: Xid (PCI:0000:18:00): 48, pid=1, name=x, DBE",
            "__REALTIME_TIMESTAMP": "1737434504000000",
            "_BOOT_ID": "0123456789abcdef0123456789abcdef",
            "__CURSOR": "s=1;i=1",
        },
        {
            "MESSAGE": list(b"NVRM: Xid (PCI:0000:2a:00): 13, pid=1, name=x, \xff"),
            "__REALTIME_TIMESTAMP": "1737434505000000",
            "_BOOT_ID": "0123456789abcdef0123456789abcdef",
            "__CURSOR": "s=1;i=2",
        },
    ]
    out = tmp_path / "out.jsonl"
    out.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    args = tmp_path / "args"
    script = tmp_path / "journalctl"
    script.write_text(f'#!/bin/sh\necho "$@" > {args}\ncat {out}\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    res = kl.read_journal("s=0;i=9")
    assert "--after-cursor=s=0;i=9" in args.read_text() and "-k" in args.read_text()
    assert res.position == {"cursor": "s=1;i=2"}
    events = kl.parse_lines(res.lines)
    assert [e.code for e in events] == [48, 13]
    assert events[0].boot_id == "01234567-89ab-cdef-0123-456789abcdef"
    assert events[0].time == datetime.fromtimestamp(1737434504, UTC)


def test_journal_failure_raises_oserror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "journalctl"
    script.write_text("#!/bin/sh\necho 'No journal files were found.' >&2\nexit 1\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    with pytest.raises(OSError, match="exit 1"):
        kl.read_journal(None)


@pytest.mark.skipif(not os.access("/dev/kmsg", os.R_OK), reason="/dev/kmsg not readable here")
def test_real_dev_kmsg_position_advances() -> None:
    first = kl.read_kmsg(None)
    assert first.source == "kmsg"
    seq = first.position["kmsg_seq"]
    assert isinstance(seq, int)
    second = kl.read_kmsg(seq)
    assert second.position["kmsg_seq"] >= seq
    assert len(second.lines) < max(len(first.lines), 1) + 50


# --- properties -------------------------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_parser_never_raises_on_arbitrary_text(text: str) -> None:
    for ev in kl.parse_text(text.splitlines()):
        assert ev.code >= 0 and len(ev.message) <= 512


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 0xFFFF),
    st.integers(0, 0xFF),
    st.integers(0, 0x1F),
    st.integers(0, 7),
    st.integers(0, 200),
    st.sampled_from(["", "[  12.5] ", "[Sun Feb 23 16:24:18 2025] ", "6,9,123,-;"]),
)
def test_any_xid_line_round_trips(
    domain: int, bus: int, dev: int, fn: int, code: int, prefix: str
) -> None:
    bdf = (
        f"{domain:08X}:{bus:02X}:{dev:02x}.{fn}"
        if code % 2
        else f"{domain:04x}:{bus:02x}:{dev:02x}"
    )
    ev = one(f"{prefix}NVRM: Xid (PCI:{bdf}): {code}, pid=42, name=python, something happened")
    assert ev.code == code
    assert ev.pci_bus_id == f"{domain:04x}:{bus:02x}:{dev:02x}"
    assert kl.normalise_bdf(ev.pci_bus_id) == ev.pci_bus_id

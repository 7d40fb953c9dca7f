"""Kernel-log XID parser and readers (journald, /dev/kmsg, a text file); the host signals
read from the same lines are navarch.agent.host_signals'.

A timer-driven agent cannot rely on NVML events (they only reach a registered process),
so it reads the kernel log since its last run (gpu-health.md §0.1, as gpud, NVSentinel,
Meta GCM, AzNHC and AWS do).

Accepted line forms (gpu-health.md §3), each possibly behind a prefix:

- ``NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.``
- old drivers: ``NVRM: Xid (0000:01:00): 13, Ch 00000001 ...`` (no ``PCI:``, no pid/name);
  ``pid=`` without ``name=``;
- NVLink5 (144-150): ``... 145, RLW_REMAP Nonfatal XC0 i0 Link 00 (0x00004b06 0x0 ...)``,
  subcode = ``(intrinfo >> 20) & 0x3F``;
- XID 154: ``GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)``;
- NVSwitch: ``nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 32 ...``;
- ``NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.`` (no Xid; reported as XID 79);
- ``NVRM: GPU at PCI:0000:9b:00: GPU-509665ad-...`` (BDF -> UUID mapping, not an event).

Prefixes: dmesg ``[12345.678901]``, dmesg human ``[Sun Feb 23 16:24:18 2025]``, dmesg iso
``kern  :warn  : 2025-01-21T04:41:44,283302+00:00``, syslog ``Feb 23 16:24:18 host kernel:
[ 123.4]`` (also RFC 3339 syslog stamps), and raw ``/dev/kmsg`` records
``prio,seq,usec,flags;message``.

BDFs are normalised to lower-case ``dddd:bb:dd`` (NVML ``00000000:3B:00.0`` and the
driver's ``0000:3b:00`` both become ``0000:3b:00``). Bursts (XID 13 prints dozens of lines
per fault) collapse by (kind, BDF, code) within ``BURST_WINDOW_S``.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from navarch.report.compat import UTC
from navarch.report.health import Remedy
from navarch.report.xid import Severity, XidInfo, lookup_event, lookup_sxid

__all__ = [
    "BURST_WINDOW_S",
    "KernelLine",
    "XidEvent",
    "ReadResult",
    "normalise_bdf",
    "parse_line",
    "parse_lines",
    "collapse_bursts",
    "read_journal",
    "read_kmsg",
    "read_text_file",
]

#: Lines of the same (kind, BDF, code) closer than this are one event (gpu-health.md §3).
BURST_WINDOW_S = 1.0
_MAX_MESSAGE = 512


@dataclass(frozen=True)
class KernelLine:
    """One kernel log message with whatever time and boot information its source gave.

    wall_time: aware UTC datetime or None; uptime_s: seconds since boot (dmesg / kmsg
    monotonic stamp) or None; boot_id: journald ``_BOOT_ID`` (dashed form) or None.
    """

    message: str
    wall_time: datetime | None = None
    uptime_s: float | None = None
    boot_id: str | None = None


@dataclass(frozen=True)
class XidEvent:
    """One XID / SXid event after burst collapsing.

    kind: "xid" or "sxid"; pci_bus_id: lower-case dddd:bb:dd; time: aware UTC or None;
    uptime_s: seconds since boot or None; uuid: from a preceding "GPU at PCI:" line;
    subcode: NVLink5 ``(intrinfo>>20)&0x3F`` or None; count: lines collapsed; info: the
    catalogue entry refined by the line (navarch.report.xid.lookup_event / lookup_sxid).
    """

    kind: str
    code: int
    pci_bus_id: str
    message: str
    info: XidInfo
    time: datetime | None = None
    uptime_s: float | None = None
    boot_id: str | None = None
    uuid: str | None = None
    subcode: int | None = None
    count: int = 1

    @property
    def severity(self) -> Severity:
        return self.info.severity

    @property
    def action(self) -> Remedy:
        return self.info.action


_HEX = "[0-9a-fA-F]"
_BDF = rf"(?P<bdf>{_HEX}{{1,8}}:{_HEX}{{2}}:{_HEX}{{2}}|{_HEX}{{2}}:{_HEX}{{2}})(?:\.[0-7])?"

_XID = re.compile(rf"NVRM: Xid \((?:PCI:)?{_BDF}\): (?P<code>\d+)(?:,\s*(?P<rest>.*))?$")
_SXID = re.compile(
    rf"nvidia-nvswitch(?P<sw>\d+): SXid \((?:PCI:)?{_BDF}\): (?P<code>\d+)"
    r"(?:,\s*(?P<sev>Fatal|Non-fatal|Nonfatal))?(?:,\s*(?P<rest>.*))?$"
)
_FALLEN = re.compile(rf"NVRM: GPU (?:at )?(?:PCI:)?{_BDF}: GPU has fallen off the bus")
_GPU_AT = re.compile(rf"NVRM: GPU at PCI:{_BDF}: (?P<uuid>GPU-{_HEX}{{8}}(?:-{_HEX}+)+)")
_PID_NAME = re.compile(r"^pid=(?:'[^']*'|<[^>]*>|\d+)\s*,\s*(?:name=(?:<[^>]*>|[^,]*)\s*,\s*)?")
_INTRINFO = re.compile(r"\(0x(?P<intr>[0-9a-fA-F]+)")

# Prefixes, tried in order; each yields (wall_time, uptime_s, rest).
_KMSG = re.compile(r"^(?P<prio>\d+),(?P<seq>\d+),(?P<usec>\d+),[^;]*;(?P<msg>.*)$")
_DMESG_UPTIME = re.compile(r"^\[\s*(?P<up>\d+\.\d+)\]\s*(?P<rest>.*)$")
_DMESG_HUMAN = re.compile(
    r"^\[(?P<ts>[A-Z][a-z]{2} [A-Z][a-z]{2} +\d{1,2} \d{2}:\d{2}:\d{2} \d{4})\]\s*(?P<rest>.*)$"
)
_DMESG_ISO = re.compile(
    r"^(?:\w+\s*:\s*\w+\s*:\s*)?(?P<ts>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[,.]\d+)?(?:Z|[+-]\d{2}:?\d{2}))\s+(?P<rest>.*)$"
)
_SYSLOG = re.compile(
    r"^(?P<ts>[A-Z][a-z]{2} +\d{1,2} \d{2}:\d{2}:\d{2})\s+\S+\s+kernel:\s*(?P<rest>.*)$"
)
_HOST_KERNEL = re.compile(r"^\S+\s+kernel:\s*(?P<rest>.*)$")


def normalise_bdf(bdf: str) -> str:
    """PCI address -> lower-case ``dddd:bb:dd``.

    Accepts ``0000:3b:00``, ``00000000:3B:00.0`` (NVML busId), ``3b:00`` (domain 0).
    Raises ValueError for anything else.
    """
    text = bdf.strip().lower()
    if "." in text:
        text = text.split(".", 1)[0]
    parts = text.split(":")
    if len(parts) == 2:
        parts = ["0", *parts]
    if len(parts) != 3:
        raise ValueError(f"not a PCI address: {bdf!r}")
    domain, bus, dev = (int(p, 16) for p in parts)
    return f"{domain & 0xFFFF:04x}:{bus:02x}:{dev:02x}"


def _parse_iso(ts: str) -> datetime | None:
    try:
        dt = datetime.fromisoformat(ts.replace(",", ".").replace("Z", "+00:00"))
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC)


def split_prefix(raw: str, *, now: datetime | None = None) -> KernelLine:
    """Strip any dmesg / syslog / kmsg prefix from one raw line.

    Human and syslog stamps carry no zone: they are read as UTC (cloud images log in UTC);
    a syslog stamp has no year: the year of ``now`` (default: the current UTC time) is used.
    """
    line = raw.rstrip("\r\n")
    wall: datetime | None = None
    uptime: float | None = None
    m = _KMSG.match(line)
    if m:
        return KernelLine(m.group("msg"), None, int(m.group("usec")) / 1e6)
    m = _DMESG_HUMAN.match(line)
    if m:
        try:
            wall = datetime.strptime(" ".join(m.group("ts").split()), "%a %b %d %H:%M:%S %Y")
            wall = wall.replace(tzinfo=UTC)
        except ValueError:
            wall = None
        line = m.group("rest")
    else:
        m = _DMESG_ISO.match(line)
        if m:
            wall = _parse_iso(m.group("ts"))
            line = m.group("rest")
            h = _HOST_KERNEL.match(line)
            if h:
                line = h.group("rest")
        else:
            m = _SYSLOG.match(line)
            if m:
                year = (now or datetime.now(UTC)).year
                try:
                    stamp = " ".join(m.group("ts").split())
                    wall = datetime.strptime(f"{year} {stamp}", "%Y %b %d %H:%M:%S")
                    wall = wall.replace(tzinfo=UTC)
                except ValueError:
                    wall = None
                line = m.group("rest")
    m = _DMESG_UPTIME.match(line)
    if m:
        uptime = float(m.group("up"))
        line = m.group("rest")
    return KernelLine(line, wall, uptime)


def _clip(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."


def parse_line(line: KernelLine) -> XidEvent | tuple[str, str] | None:
    """Parse one kernel message (prefix already split off, or not: it is split here too).

    Returns an XidEvent, or ``(pci_bus_id, uuid)`` for a "GPU at PCI:" mapping line, or
    None for anything else. Never raises on malformed input.
    """
    msg = line.message
    if line.wall_time is None and line.uptime_s is None:
        split = split_prefix(msg)
        msg = split.message
        line = replace(line, message=msg, wall_time=split.wall_time, uptime_s=split.uptime_s)
    try:
        m = _XID.search(msg)
        if m:
            code = int(m.group("code"))
            rest = m.group("rest") or ""
            text = _PID_NAME.sub("", rest)
            subcode = None
            if 144 <= code <= 150:
                im = _INTRINFO.search(text)
                if im:
                    subcode = (int(im.group("intr"), 16) >> 20) & 0x3F
            return XidEvent(
                kind="xid",
                code=code,
                pci_bus_id=normalise_bdf(m.group("bdf")),
                message=_clip(text or rest),
                info=lookup_event(code, text),
                time=line.wall_time,
                uptime_s=line.uptime_s,
                boot_id=line.boot_id,
                subcode=subcode,
            )
        m = _SXID.search(msg)
        if m:
            code = int(m.group("code"))
            fatal = (m.group("sev") or "").lower() == "fatal"
            return XidEvent(
                kind="sxid",
                code=code,
                pci_bus_id=normalise_bdf(m.group("bdf")),
                message=_clip(f"{m.group('sev') or ''}, {m.group('rest') or ''}".strip(", ")),
                info=lookup_sxid(code, fatal),
                time=line.wall_time,
                uptime_s=line.uptime_s,
                boot_id=line.boot_id,
            )
        m = _FALLEN.search(msg)
        if m:
            return XidEvent(
                kind="xid",
                code=79,
                pci_bus_id=normalise_bdf(m.group("bdf")),
                message="GPU has fallen off the bus.",
                info=lookup_event(79, ""),
                time=line.wall_time,
                uptime_s=line.uptime_s,
                boot_id=line.boot_id,
            )
        m = _GPU_AT.search(msg)
        if m:
            return normalise_bdf(m.group("bdf")), m.group("uuid")
    except ValueError:
        return None
    return None


def _stamp(ev: XidEvent) -> float | None:
    if ev.uptime_s is not None:
        return ev.uptime_s
    if ev.time is not None:
        return ev.time.timestamp()
    return None


def collapse_bursts(events: Iterable[XidEvent], window_s: float = BURST_WINDOW_S) -> list[XidEvent]:
    """Merge events of the same (boot, kind, BDF, code) whose stamps lie within window_s.

    Stamps: uptime when known, else wall time. Consecutive timeless events of the same key
    collapse too (a text log without stamps cannot tell a burst from a repeat). Keeps the
    first event's time and message; count is the number of lines merged.
    """
    out: list[XidEvent] = []
    last: dict[tuple[str | None, str, str, int], tuple[int, float | None]] = {}
    for ev in events:
        key = (ev.boot_id, ev.kind, ev.pci_bus_id, ev.code)
        stamp = _stamp(ev)
        prev = last.get(key)
        if prev is not None:
            idx, prev_stamp = prev
            same = (stamp is None and prev_stamp is None and idx == len(out) - 1) or (
                stamp is not None and prev_stamp is not None and 0 <= stamp - prev_stamp <= window_s
            )
            if same:
                out[idx] = replace(out[idx], count=out[idx].count + 1)
                last[key] = (idx, stamp if stamp is not None else prev_stamp)
                continue
        out.append(ev)
        last[key] = (len(out) - 1, stamp)
    return out


def parse_lines(lines: Iterable[KernelLine], window_s: float = BURST_WINDOW_S) -> list[XidEvent]:
    """Parse messages into burst-collapsed events, attaching UUIDs from "GPU at PCI:" lines."""
    uuids: dict[str, str] = {}
    events: list[XidEvent] = []
    for line in lines:
        parsed = parse_line(line)
        if isinstance(parsed, tuple):
            uuids[parsed[0]] = parsed[1]
        elif parsed is not None:
            if parsed.pci_bus_id in uuids:
                parsed = replace(parsed, uuid=uuids[parsed.pci_bus_id])
            events.append(parsed)
    return collapse_bursts(events, window_s)


@dataclass(frozen=True)
class ReadResult:
    """What a reader returns: lines plus the position to save for the next run.

    position: a JSON-able dict the reader understands on the next call (journal cursor,
    kmsg sequence, file offset + digest). source: "journal", "kmsg" or "file".
    """

    lines: tuple[KernelLine, ...]
    position: dict[str, Any]
    source: str


def _dash_boot_id(raw: str) -> str:
    raw = raw.strip().lower()
    if len(raw) == 32 and "-" not in raw:
        return f"{raw[:8]}-{raw[8:12]}-{raw[12:16]}-{raw[16:20]}-{raw[20:]}"
    return raw


def journal_available() -> bool:
    """True when journalctl exists and journald runs (``/run/systemd/journal`` exists)."""
    return shutil.which("journalctl") is not None and Path("/run/systemd/journal").is_dir()


def read_journal(cursor: str | None, *, timeout_s: float = 10.0) -> ReadResult:
    """Kernel messages after ``cursor`` via ``journalctl -k -o json``.

    Without a cursor reads the current boot only (``-b``). Each JSON record gives
    MESSAGE, __REALTIME_TIMESTAMP (µs since epoch), _BOOT_ID, __CURSOR. MESSAGE may be a
    byte array in JSON (non-UTF-8 text); it is decoded with replacement. Raises OSError
    (incl. subprocess.SubprocessError wrapped) when journalctl fails.
    """
    cmd = ["journalctl", "-k", "-o", "json", "--no-pager", "-q"]
    cmd += [f"--after-cursor={cursor}"] if cursor else ["-b"]
    try:
        proc = subprocess.run(cmd, capture_output=True, timeout=timeout_s, check=False)
    except (subprocess.SubprocessError, OSError) as exc:
        raise OSError(f"journalctl failed: {exc}") from exc
    if proc.returncode != 0:
        raise OSError(
            f"journalctl exit {proc.returncode}: {proc.stderr.decode(errors='replace')[-200:]}"
        )
    lines: list[KernelLine] = []
    new_cursor = cursor
    for raw in proc.stdout.splitlines():
        try:
            rec = json.loads(raw)
        except ValueError:
            continue
        message = rec.get("MESSAGE")
        if isinstance(message, list):
            message = bytes(message).decode(errors="replace")
        if not isinstance(message, str):
            continue
        wall = None
        if rec.get("__REALTIME_TIMESTAMP"):
            wall = datetime.fromtimestamp(int(rec["__REALTIME_TIMESTAMP"]) / 1e6, UTC)
        boot = _dash_boot_id(rec["_BOOT_ID"]) if rec.get("_BOOT_ID") else None
        lines.append(KernelLine(message, wall, None, boot))
        new_cursor = rec.get("__CURSOR", new_cursor)
    return ReadResult(tuple(lines), {"cursor": new_cursor}, "journal")


def read_kmsg(
    last_seq: int | None,
    *,
    path: str = "/dev/kmsg",
    boot_time: datetime | None = None,
    max_records: int = 100_000,
) -> ReadResult:
    """Records of /dev/kmsg with a sequence number above ``last_seq`` (same boot only).

    Record format ``prio,seq,usec,flags;message`` (Linux Documentation/ABI/testing/dev-kmsg);
    continuation lines (starting with a space) are skipped. boot_time (aware UTC) turns
    the monotonic usec into wall time. Raises OSError when the device cannot be opened.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    lines: list[KernelLine] = []
    seq_max = last_seq
    try:
        for _ in range(max_records):
            try:
                data = os.read(fd, 8192)
            except OSError as exc:
                if exc.errno == errno.EAGAIN:
                    break
                if exc.errno == errno.EPIPE:  # record overwritten while reading: skip it
                    continue
                raise
            if not data:
                break
            text = data.decode(errors="replace").split("\n", 1)[0]
            m = _KMSG.match(text)
            if not m:
                continue
            seq = int(m.group("seq"))
            if last_seq is not None and seq <= last_seq:
                continue
            seq_max = seq if seq_max is None else max(seq_max, seq)
            uptime = int(m.group("usec")) / 1e6
            wall = boot_time + timedelta(seconds=uptime) if boot_time else None
            lines.append(KernelLine(m.group("msg"), wall, uptime))
    finally:
        os.close(fd)
    return ReadResult(tuple(lines), {"kmsg_seq": seq_max}, "kmsg")


def read_text_file(
    path: str | os.PathLike[str], position: dict[str, Any] | None, *, now: datetime | None = None
) -> ReadResult:
    """Lines of a text kernel log (dmesg / syslog output, or the local provider's file).

    The whole file is read. Lines already returned on an earlier run (the file still starts
    with the bytes seen then: same length prefix, same SHA-256) are skipped, so each line
    is attributed to the boot during which it first appeared; a truncated or replaced
    file is read from the start. A missing file reads as empty. position:
    {"offset": int, "sha256": hex} from the previous ReadResult.
    """
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        return ReadResult((), {"offset": 0, "sha256": hashlib.sha256(b"").hexdigest()}, "file")
    start = 0
    if position:
        off = int(position.get("offset", 0))
        if 0 < off <= len(data) and hashlib.sha256(data[:off]).hexdigest() == position.get(
            "sha256"
        ):
            start = off
    # Only whole lines: a line being appended right now is read on the next run.
    end = data.rfind(b"\n") + 1
    if end < start:
        end = start
    lines = tuple(
        split_prefix(t, now=now)
        for t in data[start:end].decode(errors="replace").splitlines()
        if t.strip()
    )
    return ReadResult(
        lines, {"offset": end, "sha256": hashlib.sha256(data[:end]).hexdigest()}, "file"
    )


def parse_text(text: str | Sequence[str], *, now: datetime | None = None) -> list[XidEvent]:
    """Convenience: parse raw text (or raw lines) straight into collapsed events."""
    raw = text.splitlines() if isinstance(text, str) else list(text)
    return parse_lines(split_prefix(t, now=now) for t in raw if t.strip())

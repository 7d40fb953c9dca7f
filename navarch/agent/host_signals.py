"""Host signals: kernel-log matchers for the host under the GPUs, PCIe AER counters and the
clock, counted in a window or latched for the boot, as checks.

Each rule (``HOST_RULES``) names a fault kind ``<class>:<name>`` whose prefix is its fault
class (navarch.fleet.remedies.FaultClass: host_cpu, host_memory, host_storage, pcie,
clock; nvlink for the driver's NVLink link-mask failure), the kernel source file whose
format string it matches, what it means, and what it does:

- ``latched``: fatal at once and held until the boot changes (a hard lockup, a filesystem
  remounted read-only, an uncorrectable AER error, an NVMe controller disabled);
- else counted in a window: ``threshold`` events within ``window_s`` make the check fire;
  fewer are reported healthy with their count (one corrected AER error, one soft lockup
  is noise; a storm is a fault). Counts persist between timer runs in the agent state
  (navarch.agent.state.AgentState.host_signals).

Lines are matched at the start of the message (after any dmesg / syslog / kmsg prefix and
an optional ``[ C16]`` caller id, and for device messages after the ``<driver> <device>: ``
prefix the kernel's dev_printk writes), so a user-space line that quotes the words (an
audit record, a shell command) is not a kernel event. A line named in a finding is escaped
(control characters as ``\\xNN``) and capped at 256 characters: text from the node is
hostile.

OOM kills: the probe counts GPU processes but does not list their ids, so the agent cannot
tell whether a killed process was a GPU process; every system OOM kill (``Out of memory:
Killed process``) is a ``host_memory`` warning (degraded, report only), and a memory cgroup
OOM kill (a container's own limit) is not a host signal at all.

Python 3.9-compatible like the rest of the agent (it ships to GPU nodes).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from navarch.agent import kernel_log as kl
from navarch.agent.checks import Check
from navarch.agent.host_readings import AerCounts, ClockReading, HostReadings
from navarch.agent.log_rules import LogRule
from navarch.report.health import Remedy, Status

__all__ = [
    "HOST_RULES",
    "HostEvent",
    "HostSignals",
    "escape_line",
    "evaluate",
    "match_line",
    "parse_host_lines",
]

_MAX_LINE = 256
_MAX_TIMES = 64
_H = 3600.0

# What may precede a message: a printk caller id ("[   C16]", "[ T3106]").
_CALLER = r"(?:\[\s*[CT]\d+\]\s*)?"
# dev_printk's "<driver> <device>: " prefix ("pcieport 0000:00:1c.0: ", "nvme nvme0: ").
_DEV = r"(?P<dev>[\w.-]+ [\w.:-]+): "


def _rule(kind: str, regex: str, source: str, meaning: str, **kw: Any) -> LogRule:
    return LogRule(kind, re.compile("^" + _CALLER + regex), source, meaning, **kw)


U, D = Status.UNHEALTHY, Status.DEGRADED
_AER_RECEIVED = r"(?:AER: )?(?:Multiple )?"
_AER_BUS = r"(?:AER: )?PCIe Bus Error: severity="

#: The matchers, first match wins (the fatal variant of a family before its counted one).
HOST_RULES: tuple[LogRule, ...] = (
    _rule(
        "host_cpu:soft_lockup",
        r"(?:watchdog: )?BUG: soft lockup - CPU#\d+ stuck for \d+s!",
        'kernel/watchdog.c "BUG: soft lockup - CPU#%d stuck for %us! [%s:%d]"',
        "soft lockup",
        status=U,
        action=Remedy.REBOOT,
        threshold=3,
    ),
    _rule(
        "host_cpu:hard_lockup",
        r"(?:NMI )?(?:watchdog: )?(?:CPU\d+: )?Watchdog detected hard LOCKUP on cpu \d+",
        'kernel/watchdog.c "Watchdog detected hard LOCKUP on cpu %u"',
        "hard lockup",
        status=U,
        action=Remedy.REBOOT,
        latched=True,
    ),
    _rule(
        "host_cpu:hung_task",
        r"INFO: task .{1,64}:\d+ blocked for more than \d+ seconds\.",
        'kernel/hung_task.c "INFO: task %s:%d blocked for more than %ld seconds."',
        "hung task",
        status=D,
        action=Remedy.NONE,
        threshold=3,
    ),
    _rule(
        "host_cpu:rcu_stall",
        r"(?:rcu: )?INFO: rcu_\w+ (?:detected (?:expedited )?stalls on CPUs/tasks"
        r"|self-detected stall on CPU)",
        'kernel/rcu/tree_stall.h "INFO: %s detected stalls on CPUs/tasks:", '
        '"INFO: %s self-detected stall on CPU"',
        "RCU stall",
        status=U,
        action=Remedy.REBOOT,
        threshold=3,
    ),
    _rule(
        "host_cpu:machine_check_fatal",
        r"(?:mce: |\{\d+\})?\[Hardware Error\]: (?:System Fatal error"
        r"|event severity: fatal|.*\bUncorrected\b|.*Processor context corrupt)",
        'arch/x86/kernel/cpu/mce/ (HW_ERR "[Hardware Error]: "), drivers/acpi/apei/ghes.c',
        "uncorrected machine check",
        status=U,
        action=Remedy.REPLACE,
        latched=True,
    ),
    _rule(
        "host_cpu:machine_check",
        r"(?:mce: |\{\d+\})?\[Hardware Error\]: (?:Machine check events logged"
        r"|event severity: corrected)",
        'arch/x86/kernel/cpu/mce/core.c HW_ERR "Machine check events logged"',
        "machine check",
        status=U,
        action=Remedy.REBOOT,
        threshold=3,
        window_s=24 * _H,
    ),
    _rule(
        "host_memory:oom_kill",
        r"Out of memory(?: \([^)]{0,64}\))?: Killed process \d+ \(.{0,64}\)",
        'mm/oom_kill.c "%s: Killed process %d (%s) total-vm:%lukB, ..." (%s "Out of memory")',
        "OOM kill",
        status=D,
        action=Remedy.NONE,
    ),
    _rule(
        "host_storage:nvme_disabled",
        r"nvme \S+: (?:Disabling device after reset failure|Removing after probe failure"
        r"|Device not ready; aborting reset)",
        'drivers/nvme/host/pci.c "Removing after probe failure status: %d", '
        '"Device not ready; aborting reset, CSTS=0x%x"',
        "NVMe controller lost",
        status=U,
        action=Remedy.REBOOT,
        latched=True,
    ),
    _rule(
        "host_storage:nvme_reset",
        r"nvme \S+: (?:I/O (?:tag )?\d+ .{0,80}?QID \d+ timeout, (?:reset|disable) controller"
        r"|controller is down; will reset)",
        'drivers/nvme/host/pci.c "I/O %d QID %d timeout, reset controller", '
        '"controller is down; will reset: CSTS=0x%x, PCI_STATUS=0x%hx"',
        "NVMe controller reset",
        status=U,
        action=Remedy.REBOOT,
        threshold=3,
    ),
    _rule(
        "host_storage:nvme_timeout",
        r"nvme \S+: I/O (?:tag )?\d+ .{0,80}?QID \d+ timeout, aborting",
        'drivers/nvme/host/pci.c "I/O %d QID %d timeout, aborting"',
        "NVMe I/O timeout",
        status=D,
        action=Remedy.NONE,
        threshold=5,
    ),
    _rule(
        "host_storage:fs_read_only",
        r"(?:EXT4-fs \((?P<fs>[^)]{1,64})\): Remounting filesystem read-only"
        r"|XFS \((?P<xfs>[^)]{1,64})\): .{0,160}Shutting down filesystem)",
        'fs/ext4/super.c "Remounting filesystem read-only"; fs/xfs/xfs_fsops.c '
        '"%s (0x%x) detected at %pS (%s:%d).  Shutting down filesystem."',
        "filesystem read-only",
        status=U,
        action=Remedy.REBOOT,
        latched=True,
    ),
    _rule(
        "pcie:aer_fatal",
        _DEV + r"(?:" + _AER_RECEIVED + r"Uncorrect(?:ed|able) \(Fatal\) error"
        r"|" + _AER_BUS + r"Uncorrect(?:ed|able) \(Fatal\))",
        'drivers/pci/pcie/aer.c "PCIe Bus Error: severity=%s, type=%s, (%s)", '
        '"AER: %s error received: %s"',
        "uncorrectable fatal PCIe AER error",
        status=U,
        action=Remedy.REBOOT,
        latched=True,
    ),
    _rule(
        "pcie:aer_nonfatal",
        _DEV + r"(?:" + _AER_RECEIVED + r"Uncorrect(?:ed|able) \(Non-Fatal\) error"
        r"|" + _AER_BUS + r"Uncorrect(?:ed|able) \(Non-Fatal\))",
        'drivers/pci/pcie/aer.c "PCIe Bus Error: severity=%s, type=%s, (%s)"',
        "uncorrectable non-fatal PCIe AER error",
        status=U,
        action=Remedy.REBOOT,
        latched=True,
    ),
    _rule(
        "pcie:aer_corrected",
        _DEV + r"(?:" + _AER_RECEIVED + r"Correct(?:ed|able) error (?:message )?received"
        r"|" + _AER_BUS + r"Correct(?:ed|able))",
        'drivers/pci/pcie/aer.c "AER: %s error received: %s", '
        '"PCIe Bus Error: severity=%s, type=%s, (%s)"',
        "corrected PCIe AER error",
        status=D,
        action=Remedy.NONE,
        threshold=10,
    ),
    _rule(
        "nvlink:link_mask",
        r"NVRM: knvlink(?:UpdatePostRxDetectLinkMask_\w+: Failed to update Rx Detect Link mask"
        r"|DiscoverPostRxDetLinks_\w+: Getting peer\d*(?:'s)? postRxDetLinkMask failed)",
        "NVIDIA open-gpu-kernel-modules kernel_nvlink_gh100.c (gpud RegexDriverWedgeKMessage)",
        "NVLink link-mask failure",
        status=U,
        action=Remedy.REBOOT,
        latched=True,
    ),
    _rule(
        "pcie:peermem",
        r"nvidia-peermem \w+:\d+ ERROR ",
        "nvidia-peermem nv_get_p2p_free_callback (gpud components/accelerator/nvidia/peermem)",
        "nvidia-peermem error",
        status=D,
        action=Remedy.NONE,
        threshold=3,
    ),
)

_BY_KIND = {r.kind: r for r in HOST_RULES}

#: The counted rule for AER correctable counters read from sysfs, and the latched one for
#: uncorrectable counts (Documentation/ABI/testing/sysfs-bus-pci-devices-aer-stats).
AER_COUNTER_CORRECTABLE = LogRule(
    "pcie:aer_counter_correctable",
    re.compile("$^"),
    "sysfs aer_dev_correctable TOTAL_ERR_COR",
    "corrected PCIe AER errors counted by the device",
    status=D,
    action=Remedy.NONE,
    threshold=10,
)
AER_COUNTER_UNCORRECTABLE = LogRule(
    "pcie:aer_counter_uncorrectable",
    re.compile("$^"),
    "sysfs aer_dev_fatal TOTAL_ERR_FATAL, aer_dev_nonfatal TOTAL_ERR_NONFATAL",
    "uncorrectable PCIe AER errors counted by the device",
    status=U,
    action=Remedy.REBOOT,
    latched=True,
)
CLOCK_UNSYNCED = LogRule(
    "clock:unsynchronised",
    re.compile("$^"),
    "adjtimex(2) STA_UNSYNC / TIME_ERROR (include/uapi/linux/timex.h)",
    "clock not synchronised",
    status=D,
    action=Remedy.NONE,
)
_ALL_RULES = {
    r.kind: r
    for r in (*HOST_RULES, AER_COUNTER_CORRECTABLE, AER_COUNTER_UNCORRECTABLE, CLOCK_UNSYNCED)
}


def escape_line(text: str, limit: int = _MAX_LINE) -> str:
    """A node's line made safe to show: control and other unprintable characters as
    ``\\xNN`` / ``\\uNNNN``, surrounding blanks dropped, capped at ``limit`` characters
    (ending "..." when cut)."""
    out = "".join(
        c if c.isprintable() else (f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}")
        for c in text.strip()[: limit * 4]
    )
    return out if len(out) <= limit else out[: limit - 3] + "..."


@dataclass(frozen=True)
class HostEvent:
    """One matched kernel line: its rule's kind, the escaped line, its time (unix seconds:
    the line's wall time when known and not in the future, else the run's), the uptime
    stamp when known, the device that printed it, and how many lines of one burst it
    stands for."""

    kind: str
    line: str
    at_s: float
    uptime_s: float | None = None
    device: str | None = None
    count: int = 1


def match_line(message: str) -> tuple[LogRule, str | None] | None:
    """The first rule matching one kernel message (prefix already split off), with the
    device its dev_printk prefix named, or None."""
    for rule in HOST_RULES:
        m = rule.pattern.match(message)
        if m:
            groups = m.groupdict()
            return rule, groups.get("dev") or groups.get("fs") or groups.get("xfs")
    return None


def _burst_of(prev: HostEvent, ev: HostEvent, window_s: float) -> bool:
    """Whether ev repeats prev within one burst (the AER header and its "PCIe Bus Error"
    detail line are one error, printed by two devices; so are the lines of one machine
    check)."""
    if prev.kind != ev.kind:
        return False
    if prev.uptime_s is not None and ev.uptime_s is not None:
        return 0 <= ev.uptime_s - prev.uptime_s <= window_s
    return 0 <= ev.at_s - prev.at_s <= window_s


def parse_host_lines(
    lines: Iterable[kl.KernelLine],
    now: datetime,
    window_s: float = kl.BURST_WINDOW_S,
    boot_id: str | None = None,
) -> list[HostEvent]:
    """The host events of kernel lines, bursts collapsed: consecutive matches of one kind
    within ``window_s`` (uptime stamps when both have one, else times) are one event,
    whichever device printed them; lines without any stamp collapse when consecutive (a
    text log without stamps cannot tell a burst from a repeat, as for XIDs). With
    ``boot_id``, a line stamped with another boot (a journal's tail of the boot before a
    reboot) is skipped: the reboot was its remedy."""
    now_s = now.timestamp()
    out: list[HostEvent] = []
    for line in lines:
        if boot_id is not None and line.boot_id is not None and line.boot_id != boot_id:
            continue
        if line.wall_time is None and line.uptime_s is None:
            split = kl.split_prefix(line.message, now=now)
            line = replace(split, boot_id=line.boot_id)
        found = match_line(line.message)
        if found is None:
            continue
        rule, device = found
        at_s = now_s
        if line.wall_time is not None:
            at_s = min(line.wall_time.timestamp(), now_s)
        ev = HostEvent(rule.kind, escape_line(line.message), at_s, line.uptime_s, device)
        if out and _burst_of(out[-1], ev, window_s):
            out[-1] = replace(out[-1], count=out[-1].count + 1)
            continue
        out.append(ev)
    return out


@dataclass(frozen=True)
class HostSignals:
    """One run's host findings: the checks to report and the state block to save
    (navarch.agent.state.AgentState.host_signals, this boot's)."""

    checks: tuple[Check, ...]
    state: dict[str, Any]


def _times(raw: Any) -> list[list[float]]:
    """A saved ``[[at_s, n], ...]`` list, malformed entries dropped."""
    out: list[list[float]] = []
    for item in raw if isinstance(raw, list) else ():
        if isinstance(item, list) and len(item) == 2:
            try:
                out.append([float(item[0]), float(int(item[1]))])
            except (TypeError, ValueError):
                continue
    return out


def _mapping(raw: Any) -> dict[str, Any]:
    """raw when it is a mapping of known kinds to mappings (a saved section), else {}."""
    if not isinstance(raw, dict):
        return {}
    return {k: dict(v) for k, v in raw.items() if k in _ALL_RULES and isinstance(v, dict)}


def _load(saved: Mapping[str, Any]) -> dict[str, Any]:
    """The saved block as a fresh mutable copy; a malformed section reads as empty and
    unknown kinds are dropped (a rule removed in a later agent leaves nothing behind)."""
    counted = saved.get("counted")
    aer = saved.get("aer")
    latched = _mapping(saved.get("latched"))
    for seen in latched.values():
        count = seen.get("count")
        seen["count"] = count if isinstance(count, int) and count > 0 else 1
    return {
        "counted": {
            k: _times(v)
            for k, v in (counted.items() if isinstance(counted, dict) else ())
            if k in _ALL_RULES
        },
        "latched": latched,
        "last": _mapping(saved.get("last")),
        "aer": {
            str(k): v
            for k, v in (aer.items() if isinstance(aer, dict) else ())
            if isinstance(v, int) and not isinstance(v, bool)
        },
        "aer_read": saved.get("aer_read") is True,
    }


def _record(state: dict[str, Any], rule: LogRule, line: str, at_s: float, n: int) -> None:
    """Add n occurrences of rule at at_s: latched rules keep their first time and count
    up; counted rules append to their window."""
    if rule.latched:
        seen = state["latched"].setdefault(rule.kind, {"at_s": at_s, "count": 0})
        seen["count"] = int(seen.get("count", 0)) + n
        seen["line"] = line
        return
    state["counted"].setdefault(rule.kind, []).append([at_s, float(n)])
    state["last"][rule.kind] = {"line": line, "at_s": at_s}


def _record_aer(state: dict[str, Any], aer: Sequence[AerCounts], now_s: float) -> None:
    """Fold sysfs AER totals into the state: correctable growth since the baseline is
    counted (the first read of a boot only takes the baseline: the errors before it have
    no time); any uncorrectable count latches."""
    first = not state["aer_read"]
    base: dict[str, int] = state["aer"]
    for dev in aer:
        if dev.correctable is not None:
            before = base.get(dev.device, 0)
            delta = dev.correctable - before
            if delta > 0 and not first:
                line = f"{dev.device}: TOTAL_ERR_COR {dev.correctable} (+{delta})"
                _record(state, AER_COUNTER_CORRECTABLE, escape_line(line), now_s, delta)
            if dev.correctable:
                base[dev.device] = dev.correctable
        bad = (dev.fatal or 0) + (dev.nonfatal or 0)
        if bad:
            line = escape_line(
                f"{dev.device}: TOTAL_ERR_FATAL {dev.fatal or 0}, "
                f"TOTAL_ERR_NONFATAL {dev.nonfatal or 0}"
            )
            kind = AER_COUNTER_UNCORRECTABLE.kind
            seen = state["latched"].setdefault(kind, {"at_s": now_s, "count": 0})
            seen["count"] = max(int(seen.get("count", 0)), bad)  # a total, not an increment
            seen["line"] = line
    state["aer_read"] = True


def _window_text(seconds: float) -> str:
    return f"{seconds / _H:g}h"


def _finding(rule: LogRule, status: Status, count: int, line: str, extra: str) -> Check:
    """One host check: named by the rule's class, its fault kind the rule's, the line and
    the class in both the message and the evidence."""
    fires = status is not Status.HEALTHY
    return Check(
        rule.signal_class,
        status,
        rule.action if fires else Remedy.NONE,
        f"{rule.meaning} ({rule.signal_class}) x{count}{extra}: {line}",
        evidence={
            "class": rule.signal_class,
            "kind": rule.kind,
            "count": count,
            "line": line,
            "source": rule.source,
            "threshold": rule.threshold,
            "window_s": None if rule.latched else rule.window_s,
        },
        fault_kind=rule.kind,
    )


def _checks(state: dict[str, Any], now_s: float) -> list[Check]:
    """The checks of the state: each latched kind at its rule's status; each counted kind
    with occurrences in its window at its rule's status when they reach the threshold, else
    healthy with the count."""
    out: list[Check] = []
    for kind, seen in sorted(state["latched"].items()):
        rule = _ALL_RULES[kind]
        count = int(seen.get("count", 1))
        out.append(_finding(rule, rule.status, count, str(seen.get("line", "")), " this boot"))
    for kind, times in sorted(state["counted"].items()):
        rule = _ALL_RULES[kind]
        kept = [t for t in times if now_s - t[0] <= rule.window_s][-_MAX_TIMES:]
        state["counted"][kind] = kept
        if not kept:
            state["last"].pop(kind, None)
            continue
        count = int(sum(t[1] for t in kept))
        status = rule.status if count >= rule.threshold else Status.HEALTHY
        extra = f" in {_window_text(rule.window_s)} (acts at {rule.threshold})"
        line = str(state["last"].get(kind, {}).get("line", ""))
        out.append(_finding(rule, status, count, line, extra))
    state["counted"] = {k: v for k, v in state["counted"].items() if v}
    return out


def clock_check(clock: ClockReading) -> Check | None:
    """The clock check: degraded (fault ``clock:unsynchronised``, report only by default)
    when adjtimex says the clock is unsynchronised; healthy when synchronised; healthy with
    ``synchronised: null`` when unknown (not Linux, or the call failed: the reading is
    unknown, but it is no doubt about the node's GPUs); None when the clock was not read
    (the fake backend and the simulator). Source: EKS node monitoring agent
    ClockUnsynchronized (monitors/kernel/monitor.go checkClockSync)."""
    ev = {"synchronised": clock.synchronised, "status": clock.status, "state": clock.state}
    if clock.synchronised is None:
        if not clock.read:
            return None
        return Check(
            "clock", Status.HEALTHY, Remedy.NONE, f"clock sync unknown: {clock.detail}", evidence=ev
        )
    if clock.synchronised:
        return Check("clock", Status.HEALTHY, Remedy.NONE, "clock synchronised", evidence=ev)
    rule = CLOCK_UNSYNCED
    return Check(
        "clock",
        rule.status,
        rule.action,
        f"{rule.meaning} (clock): {clock.detail}",
        evidence={**ev, "class": "clock", "kind": rule.kind, "source": rule.source},
        fault_kind=rule.kind,
    )


def evaluate(
    lines: Iterable[kl.KernelLine],
    readings: HostReadings,
    saved: Mapping[str, Any],
    now: datetime,
    boot_id: str | None = None,
) -> HostSignals:
    """This run's host checks and the state block to save.

    lines: the kernel lines read this run (those stamped with a boot other than
    ``boot_id`` are skipped); readings: sysfs AER totals and the clock;
    saved: the previous run's block of this boot ({} after a reboot: latches and windows
    start afresh, as the reboot was the remedy); now: aware UTC. Never raises for
    malformed saved data (it is dropped). A kind never seen this boot makes no check (a
    quiet host adds nothing to the report)."""
    now_s = now.timestamp()
    state = _load(saved)
    for ev in parse_host_lines(lines, now, boot_id=boot_id):
        _record(state, _BY_KIND[ev.kind], ev.line, ev.at_s, 1)  # a burst is one event
    if readings.aer is not None:
        _record_aer(state, readings.aer, now_s)
    checks = _checks(state, now_s)
    if readings.aer_error:
        checks.append(
            Check(
                "pcie",
                Status.HEALTHY,
                Remedy.NONE,
                f"AER counters not read: {escape_line(readings.aer_error)}",
            )
        )
    clock = clock_check(readings.clock)
    if clock is not None:
        checks.append(clock)
    return HostSignals(tuple(checks), state)

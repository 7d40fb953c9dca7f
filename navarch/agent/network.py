"""Runtime network health: InfiniBand, RoCE and EFA ports from sysfs, and mlx5 kernel lines.

What the agent reads on every run (Linux ``Documentation/ABI/stable/sysfs-class-infiniband``):

- per port ``/sys/class/infiniband/<hca>/ports/<n>/``: ``state`` ("4: ACTIVE"),
  ``phys_state`` ("5: LinkUp"), ``rate`` ("400 Gb/sec (4X NDR)"), ``link_layer``;
- the error counters of ``counters/`` (IB_COUNTER_LIMITS) and EFA's ``hw_counters/``
  (EFA_COUNTER_LIMITS; names from Linux ``drivers/infiniband/hw/efa/efa_verbs.c``);
- mlx5 lines of the kernel log (MLX5_MATCHERS, format strings from Linux
  ``drivers/net/ethernet/mellanox/mlx5/core/``).

Faults (each a Check with a fault kind, class ``network`` in navarch.fleet.remedies):

- ``ib_port_down`` / ``ib_rate``: fewer ports ACTIVE and LinkUp at the expected rate than
  the pool expects (gpud EvaluatePortsAndRate: InfiniBand-link-layer ports only, so a RoCE
  bond beside the fabric is not counted); the port list names which are down or slow.
- ``ib_link_flap``: a port that came back up (down -> ACTIVE, or ``link_downed`` rising)
  FLAP_MIN_FLIPS times within FLAP_WINDOW_S (gpud's threshold of 3 flaps).
- ``ib_counter:<name>`` / ``efa_counter:<name>``: an error counter rising faster than its
  token bucket allows (the EKS node monitoring agent's rule: refill 1 per second, burst the
  limit); degraded, an alert, as the EKS agent's Warning.
- ``mlx5:<event>``: a matched mlx5 line (port module error, cable unplugged, link down,
  insufficient PCIe slot power).

Port-down, rate, flap and mlx5 faults stay reported STICKY_S after they were last seen
(gpud's 10-minute drop sticky window), so a link that comes back between two timer runs is
still seen by the planner. The state between runs lives in the agent state's ``network``
block (navarch.agent.state). Shipped in the agent bundle: Python 3.9, standard library only.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from navarch.agent.checks import Check
from navarch.agent.kernel_log import KernelLine, split_prefix
from navarch.agent.log_rules import LogRule, first_found
from navarch.report.health import Remedy, Status

if TYPE_CHECKING:
    from navarch.agent.config import AgentConfig

__all__ = [
    "EFA_COUNTER_LIMITS",
    "FLAP_MIN_FLIPS",
    "FLAP_WINDOW_S",
    "IB_COUNTER_LIMITS",
    "INFINIBAND",
    "MLX5_MATCHERS",
    "NetworkExpectation",
    "PortReading",
    "STICKY_S",
    "counter_checks",
    "expectation_for",
    "flap_check",
    "match_mlx5",
    "mlx5_checks",
    "network_checks",
    "port_check",
    "read_ports",
]

INFINIBAND = "/sys/class/infiniband"

#: A port-down, rate, flap or mlx5 fault stays reported this long after it was last seen
#: (gpud components/accelerator/nvidia/infiniband: defaultDropStickyWindow = 10 minutes).
STICKY_S = 600.0
#: Flips (down then up again) of one port within FLAP_WINDOW_S that make a flap (gpud
#: store/scan_flaps.go: defaultIbPortFlapBackToActiveThreshold = 3).
FLAP_MIN_FLIPS = 3
#: The window flips are counted in. gpud counts over its event store's retention; the agent
#: keeps an hour of flips in its state (navarch's choice: 120 timer runs at 30 s).
FLAP_WINDOW_S = 3600.0
_MAX_FLIPS = 32

#: IB port error counters (sysfs-class-infiniband ``counters/``) -> the most they may rise
#: at once; the bucket refills 1 per second. The EKS node monitoring agent's error-event
#: limit (monitors/networking/efa/efa.go: rate.NewLimiter(rate.Every(time.Second), 100)),
#: applied by navarch to the IB error counters, for which no agent publishes a limit.
IB_COUNTER_LIMITS: Mapping[str, int] = {
    "link_downed": 100,
    "link_error_recovery": 100,
    "symbol_error": 100,
    "port_rcv_errors": 100,
    "local_link_integrity_errors": 100,
    "excessive_buffer_overrun_errors": 100,
    "port_xmit_discards": 100,
}
#: EFA ``hw_counters/`` -> burst, refill 1 per second: the EKS node monitoring agent's
#: table (monitors/networking/efa/efa.go NewEFASystem), names as Linux
#: drivers/infiniband/hw/efa/efa_verbs.c prints them.
EFA_COUNTER_LIMITS: Mapping[str, int] = {
    "rx_drops": 100,
    "rdma_write_wr_err": 100,
    "rdma_read_wr_err": 100,
    "unresponsive_remote_events": 100,
    "impaired_remote_conn_events": 100,
    "retrans_bytes": 1_000_000,
    "retrans_pkts": 1_000,
    "retrans_timeout_events": 100,
}
_REFILL_PER_S = 1.0

_DRIVER = re.compile(r"^mlx5_core [0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7][: ]")
_WORD = re.compile(r"^\s*\d+\s*:\s*(\w+)")
_RATE = re.compile(r"^\s*([0-9.]+)\s*Gb/sec")


@dataclass(frozen=True)
class PortReading:
    """One RDMA port as sysfs shows it. state / phys_state: the word after the number
    ("ACTIVE", "LinkUp"; "" when unreadable); rate_gbps: Gb/s or None; counters: the
    watched error counters of ``counters/`` and ``hw_counters/`` that could be read."""

    device: str
    port: int
    state: str
    phys_state: str
    rate_gbps: float | None
    link_layer: str
    counters: Mapping[str, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """``<hca>/<port>``, e.g. ``mlx5_0/1``."""
        return f"{self.device}/{self.port}"

    @property
    def efa(self) -> bool:
        """An AWS EFA device (the efa driver names them efa_<n>)."""
        return self.device.startswith("efa")

    @property
    def counted(self) -> bool:
        """Whether the port counts against the expected ports: every link layer but
        Ethernet (gpud IBPort.IsIBPort; EFA reports no Ethernet link layer)."""
        return self.link_layer.strip().lower() != "ethernet"

    @property
    def up(self) -> bool:
        """ACTIVE and, where sysfs says, physically LinkUp."""
        return self.state == "ACTIVE" and self.phys_state in ("LinkUp", "")


@dataclass(frozen=True)
class NetworkExpectation:
    """What the pool expects: ports ACTIVE at rate_gbps or more (None: not checked) and
    where the figures come from."""

    ports: int | None = None
    rate_gbps: float | None = None
    source: str = ""


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read(4096).strip()
    except OSError:
        return ""


def _counters(base: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for sub, names in (("counters", IB_COUNTER_LIMITS), ("hw_counters", EFA_COUNTER_LIMITS)):
        for name in names:
            text = _read(os.path.join(base, sub, name))
            if text.isdigit():
                out[name] = int(text)
    return out


def read_ports(infiniband_dir: str = INFINIBAND) -> tuple[PortReading, ...]:
    """Every port of every RDMA device under ``infiniband_dir`` (a sysfs class directory,
    or a copy of one in tests), sorted by device and port; () when the directory is absent
    (no RDMA driver loaded). Never raises: an unreadable file reads as empty."""
    try:
        devices = sorted(os.listdir(infiniband_dir))
    except OSError:
        return ()
    out = []
    for device in devices:
        try:
            ports = sorted(p for p in os.listdir(os.path.join(infiniband_dir, device, "ports")))
        except OSError:
            continue
        for port in (p for p in ports if p.isdigit()):
            base = os.path.join(infiniband_dir, device, "ports", port)
            state = _WORD.match(_read(os.path.join(base, "state")))
            phys = _WORD.match(_read(os.path.join(base, "phys_state")))
            rate = _RATE.match(_read(os.path.join(base, "rate")))
            out.append(
                PortReading(
                    device,
                    int(port),
                    state.group(1).upper() if state else "",
                    phys.group(1) if phys else "",
                    float(rate.group(1)) if rate else None,
                    _read(os.path.join(base, "link_layer")),
                    _counters(base),
                )
            )
    return tuple(sorted(out, key=lambda p: (p.device, p.port)))


def expectation_for(config: AgentConfig) -> NetworkExpectation:
    """The ports and rate this node must show: agent.yaml ``network`` (the pool's
    health.network), else the acceptance expectation (acceptance expected.ib_ports /
    ib_rate_gbps, else the instance type's published baseline:
    navarch.agent.acceptance_tools.thresholds.ib_expectation), else nothing expected."""
    if config.network is not None and (
        config.network.ports is not None or config.network.rate_gbps is not None
    ):
        return config.network
    if config.acceptance is not None:
        from navarch.agent.acceptance_tools.thresholds import ib_expectation

        ports, rate, source = ib_expectation(config.acceptance)
        if ports is not None or rate is not None:
            return NetworkExpectation(ports, rate, f"acceptance expectation ({source})")
    return NetworkExpectation()


def _rate(p: PortReading) -> str:
    return "?" if p.rate_gbps is None else f"{p.rate_gbps:g}"


def port_check(
    ports: Sequence[PortReading], expected: NetworkExpectation, known: Sequence[str] = ()
) -> Check:
    """Ports ACTIVE, LinkUp and at the expected rate against the expected count.

    known: the counted ports the previous run saw (a port gone since is named). Healthy
    when nothing is expected or enough ports qualify. No counted port at all, and none seen
    before, is unknown / none: the RDMA driver is not loaded or the NICs never showed, which
    the image or the hardware may cause, and doubt never terminates (acceptance's ib_ports test
    judges a new node). Otherwise unhealthy + reboot (a reboot re-trains the link; the
    network row escalates a repeat), kind ``ib_port_down`` when a counted port is down or
    gone or fewer exist than expected, else ``ib_rate``. Source: gpud EvaluatePortsAndRate
    (check_thresholds.go).
    """
    counted = [p for p in ports if p.counted]
    want_rate = expected.rate_gbps
    good = [p for p in counted if p.up and (want_rate is None or (p.rate_gbps or 0) >= want_rate)]
    down = [p for p in counted if not p.up]
    slow = [p for p in counted if p.up and p not in good]
    gone = sorted(set(known) - {p.name for p in counted})
    ev: dict[str, Any] = {
        "expected_ports": expected.ports,
        "expected_rate_gbps": want_rate,
        "source": expected.source,
        "good": len(good),
        "ports": {p.name: f"{p.state or '?'}/{p.phys_state or '?'} {_rate(p)} Gb/s" for p in ports},
    }
    if expected.ports is None:
        text = f"{len(good)} RDMA ports active (no expected count configured)"
        return Check("ib_ports", Status.HEALTHY, Remedy.NONE, text, evidence=ev)
    at = f" at {want_rate:g} Gb/s" if want_rate is not None else ""
    if len(good) >= expected.ports:
        text = f"{len(good)} of {expected.ports} expected ports active{at}"
        return Check("ib_ports", Status.HEALTHY, Remedy.NONE, text, evidence=ev)
    if not counted and not gone:
        text = (
            f"no InfiniBand or EFA port found, {expected.ports} expected{at}: the RDMA driver "
            "is not loaded or the NICs are missing (not judged a fault)"
        )
        return Check("ib_ports", Status.UNKNOWN, Remedy.NONE, text, evidence=ev)
    kind = "ib_port_down" if down or gone or len(counted) < expected.ports else "ib_rate"
    detail = [f"{p.name} {p.state or 'unreadable'}/{p.phys_state or '?'}" for p in down]
    detail += [f"{name} gone" for name in gone]
    detail += [f"{p.name} at {_rate(p)} Gb/s" for p in slow]
    text = f"only {len(good)} of {expected.ports} expected ports active{at}"
    if detail:
        text += ": " + ", ".join(detail)
    ev.update(down=[p.name for p in down], gone=gone, slow=[p.name for p in slow])
    return Check("ib_ports", Status.UNHEALTHY, Remedy.REBOOT, text, evidence=ev, fault_kind=kind)


def _flips_now(port: PortReading, prev: Mapping[str, Any]) -> int:
    """Down-then-up flips of one port since the previous run: the larger of the state seen
    going from down to up and the rise of ``link_downed`` (less one while it is still
    down: that one has not come back yet)."""
    seen = 1 if prev and not prev.get("up", True) and port.up else 0
    before, after = prev.get("link_downed"), port.counters.get("link_downed")
    rise = after - before if isinstance(before, int) and after is not None else 0
    if rise < 0:  # the counter was reset (driver reload, reboot)
        rise = 0
    return max(seen, rise - (0 if port.up else 1))


def flap_check(
    ports: Sequence[PortReading], saved: Mapping[str, Any], now_s: float
) -> tuple[Check | None, dict[str, Any]]:
    """Ports that flipped down-and-up FLAP_MIN_FLIPS times within FLAP_WINDOW_S.

    saved: the previous run's per-port block ({name: {"up", "counted", "link_downed",
    "flips"}}).
    Returns (an unhealthy + reboot ``ib_link_flap`` check naming the ports, or None; the
    block to save). Source: gpud store/scan_flaps.go (3 flaps back to active).
    """
    block: dict[str, Any] = {}
    flapping: dict[str, int] = {}
    for p in ports:
        prev = saved.get(p.name) or {}
        cutoff = now_s - FLAP_WINDOW_S
        flips = [float(t) for t in prev.get("flips", ()) if float(t) >= cutoff]
        flips += [now_s] * min(_flips_now(p, prev), _MAX_FLIPS)
        flips = flips[-_MAX_FLIPS:]
        block[p.name] = {
            "up": p.up,
            "counted": p.counted,
            "link_downed": p.counters.get("link_downed"),
            "flips": flips,
        }
        if len(flips) >= FLAP_MIN_FLIPS:
            flapping[p.name] = len(flips)
    if not flapping:
        return None, block
    window_min = int(FLAP_WINDOW_S // 60)
    text = "link flapping: " + ", ".join(
        f"{name} {n} times in {window_min} min" for name, n in sorted(flapping.items())
    )
    check = Check(
        "ib_flap",
        Status.UNHEALTHY,
        Remedy.REBOOT,
        text,
        evidence={"flips": flapping, "window_s": FLAP_WINDOW_S, "min_flips": FLAP_MIN_FLIPS},
        fault_kind="ib_link_flap",
    )
    return check, block


def counter_checks(
    ports: Sequence[PortReading], saved: Mapping[str, Any], now_s: float
) -> tuple[list[Check], dict[str, Any]]:
    """Error counters that rose faster than their token bucket allows.

    Each (port, counter) has a bucket of its limit (IB_COUNTER_LIMITS, EFA_COUNTER_LIMITS)
    refilled 1 per second; a rise above the tokens left is a fault and takes none (Go's
    rate.Limiter.AllowN), a rise within them spends them. A first reading, or a counter
    lower than before (reset), only sets the baseline. saved: {"<port> <counter>":
    {"value", "tokens", "at_s"}}. Returns (one degraded check per counter kind, naming
    ports and rises; the block to save). Source: EKS node monitoring agent efa.go Process.
    """
    block: dict[str, Any] = {}
    over: dict[str, list[str]] = {}
    for p in ports:
        limits = EFA_COUNTER_LIMITS if p.efa else IB_COUNTER_LIMITS
        for name, value in sorted(p.counters.items()):
            if name not in limits:
                continue
            limit = float(limits[name])
            key = f"{p.name} {name}"
            prev = saved.get(key) or {}
            tokens = limit
            if isinstance(prev.get("value"), int) and value >= prev["value"]:
                elapsed = max(0.0, now_s - float(prev.get("at_s", now_s)))
                tokens = min(limit, float(prev.get("tokens", limit)) + elapsed * _REFILL_PER_S)
                rise = value - prev["value"]
                if rise > tokens:
                    kind = f"{'efa' if p.efa else 'ib'}_counter:{name}"
                    over.setdefault(kind, []).append(f"{p.name} +{rise} ({prev['value']}->{value})")
                else:
                    tokens -= rise
            block[key] = {"value": value, "tokens": tokens, "at_s": now_s}
    checks = [
        Check(
            "network_counters",
            Status.DEGRADED,
            Remedy.NONE,
            f"{kind.split(':', 1)[1]} rising faster than its limit: {', '.join(rows)}",
            evidence={"ports": rows},
            fault_kind=kind,
        )
        for kind, rows in sorted(over.items())
    ]
    return checks, block


#: mlx5 kernel lines, in match order. The patterns follow the drivers' format strings.
MLX5_MATCHERS: tuple[LogRule, ...] = (
    # "Port module event[error]: module %u, %s, %s\n" (status "Cable error", then the
    # error, e.g. "High Temperature", "Bad or shorted cable/module"): a cable or transceiver
    # fault, hardware (gpud: HARDWARE_INSPECTION; NVSentinel: fatal, contact support).
    LogRule(
        "mlx5:module_error",
        re.compile(r"Port module event\[error\]: module (?P<module>\d+), Cable error, (?P<why>.+)"),
        "drivers/net/ethernet/mellanox/mlx5/core/events.c port_module()",
        "cable or transceiver error",
        Status.UNHEALTHY,
        Remedy.REPLACE,
    ),
    # "Port module event: module %u, %s\n" with "Cable unplugged": the port check says
    # whether the link is down; the line names the cause.
    LogRule(
        "mlx5:module_unplugged",
        re.compile(r"Port module event: module (?P<module>\d+), Cable unplugged"),
        "drivers/net/ethernet/mellanox/mlx5/core/events.c port_module()",
        "cable unplugged",
        Status.DEGRADED,
        Remedy.NONE,
    ),
    # "Detected insufficient power on the PCIe slot (%uW).\n": the slot's advertised power,
    # a platform setting; the NIC may throttle (gpud pci_power_insufficient).
    LogRule(
        "mlx5:pcie_power",
        re.compile(r"Detected insufficient power on the PCIe slot \((?P<watts>\d+)W\)"),
        "drivers/net/ethernet/mellanox/mlx5/core/events.c mlx5_pcie_event()",
        "insufficient power on the PCIe slot",
        Status.DEGRADED,
        Remedy.NONE,
    ),
    # netdev_info(priv->netdev, "Link down\n") from the mlx5e carrier update, printed as
    # "mlx5_core <bdf> <ifname>: Link down".
    LogRule(
        "mlx5:link_down",
        re.compile(r"mlx5_core \S+ \S+: Link down\s*$"),
        "drivers/net/ethernet/mellanox/mlx5/core/en_main.c mlx5e_update_carrier()",
        "link down",
        Status.DEGRADED,
        Remedy.NONE,
    ),
)


def match_mlx5(message: str) -> LogRule | None:
    """The matcher of one kernel message (any dmesg / syslog prefix is split off first),
    or None. Only lines the mlx5 driver prints match: the message must start with the
    driver's device prefix (``mlx5_core 0000:5c:00.0:``, dev_printk's), so an audit line
    or a program that logs the same words does not."""
    text = split_prefix(message).message.strip()
    if not _DRIVER.match(text):
        return None
    return first_found(MLX5_MATCHERS, text)


def mlx5_checks(lines: Sequence[KernelLine]) -> list[Check]:
    """One check per mlx5 fault kind among this run's new kernel lines (MLX5_MATCHERS),
    with the count and the last line."""
    seen: dict[str, tuple[LogRule, int, str]] = {}
    for line in lines:
        m = match_mlx5(line.message)
        if m is not None:
            count = seen[m.kind][1] + 1 if m.kind in seen else 1
            seen[m.kind] = (m, count, line.message.strip()[:512])
    return [
        Check(
            "mlx5",
            m.status,
            m.action,
            f"{count} mlx5 line(s): {text}",
            evidence={"count": count, "line": text, "source": m.source},
            fault_kind=m.kind,
        )
        for m, count, text in (seen[k] for k in sorted(seen))
    ]


def _hold(
    found: Sequence[Check], sticky: Mapping[str, Any], now_s: float
) -> tuple[list[Check], dict[str, Any]]:
    """Keep each unhealthy or mlx5 fault reported STICKY_S after it was last seen (gpud's
    drop sticky window): the faults found now, then those of ``sticky`` ({kind: {"until_s",
    "check"}}) not found now whose time is not up, each saying when it was last seen."""
    block: dict[str, Any] = {}
    out = list(found)
    kinds = set()
    for c in found:
        if c.fault_kind and (c.status is Status.UNHEALTHY or c.name == "mlx5"):
            kinds.add(c.fault_kind)
            block[c.fault_kind] = {
                "until_s": now_s + STICKY_S,
                "seen_s": now_s,
                "check": [c.name, c.status.value, c.action.value, c.message],
            }
    for kind, held in sorted(sticky.items()):
        if kind in kinds or float(held.get("until_s", 0)) <= now_s:
            continue
        name, status, action, message = held["check"]
        ago_s = int(now_s - float(held.get("seen_s", now_s)))
        out.append(
            Check(
                str(name),
                Status(status),
                Remedy(action),
                f"{message} (last seen {ago_s}s ago; held {int(STICKY_S)}s)"[:1024],
                evidence={"held_until_s": held["until_s"], "last_seen_s": held.get("seen_s")},
                fault_kind=kind,
            )
        )
        block[kind] = dict(held)
    return out, block


def network_checks(
    ports: Sequence[PortReading] | None,
    expected: NetworkExpectation,
    saved: Mapping[str, Any],
    lines: Sequence[KernelLine],
    now_s: float,
) -> tuple[list[Check], dict[str, Any]]:
    """Every network check of one run and the state block to save for the next.

    ports: ``read_ports`` (None: not read, e.g. the fake backend without an
    ``infiniband_dir``; the kernel lines still count). A node with no RDMA port and no
    expected count gets no port check (a GPU node without a fabric is not a finding);
    saved: the previous run's block (AgentState.network: {"ports", "counters",
    "sticky"}); lines: this run's new kernel lines; now_s: the clock, unix seconds.
    Rules and sources: ``port_check``, ``flap_check``, ``counter_checks``,
    ``mlx5_checks``, then the sticky hold (STICKY_S).
    """
    found: list[Check] = []
    block: dict[str, Any] = {}
    if ports is not None and (ports or expected.ports is not None):
        known = [k for k, v in dict(saved.get("ports") or {}).items() if v.get("counted", True)]
        found.append(port_check(ports, expected, known))
    if ports is not None:
        flap, block["ports"] = flap_check(ports, saved.get("ports") or {}, now_s)
        found += [flap] if flap is not None else []
        counters, block["counters"] = counter_checks(ports, saved.get("counters") or {}, now_s)
        found += counters
    found += mlx5_checks(lines)
    checks, block["sticky"] = _hold(found, saved.get("sticky") or {}, now_s)
    if ports is None:
        block.update({k: saved[k] for k in ("ports", "counters") if k in saved})
    return _sticky_replaces_healthy(checks), block


def _sticky_replaces_healthy(checks: list[Check]) -> list[Check]:
    """A held ib_ports fault stands in for this run's healthy ib_ports check."""
    held = {c.name for c in checks if c.status is not Status.HEALTHY}
    return [c for c in checks if c.status is not Status.HEALTHY or c.name not in held]

"""One agent run: probe GPUs, read the kernel log, check, build + sign + write the report.

Report rules (docs/design.md, Health report; schemas/health-report.schema.json):

- ``status`` = worst check status (navarch.report.health.Status: healthy < degraded < unknown <
  unhealthy); ``action`` = the strongest remedy the catalogue recommends for the checks'
  faults (navarch.report.health.Remedy order). The agent reports facts; the planner's ladder
  alone decides the remedy (nothing on the node overrides the pool's ``remediation``).
- ``health_score`` = max(0, 100 - 40 x unhealthy checks - 25 x unknown - 10 x degraded).
- Latching: every XID event seen during this boot stays in ``xids`` and in the checks of
  every report until the boot id changes (the state file keeps them).
- Fault counts: each check with a fault key carries ``boots_seen`` (the boots of this
  node in which the agent saw that kind of fault within FAULT_LOOKBACK_S, this one
  included), ``first_seen`` and ``consecutive``: what only the agent can count (``count_faults``).
- ``sequence``: above both the state's and the node's report in the store (normally
  previous + 1); after a lost state, or a state that could not be saved, the clock floor
  (see ``next_sequence``, ``persist_state`` and navarch.agent.state).
- The state is saved before the report is written, so a crash between the two leaves a
  gap in sequences, never a repeat. A state that cannot be saved adds the check
  ``agent_state`` (unknown) to the report, which is still written.

``run_once``'s steps: load the state, read the kernel log first (``read_xids``: its
findings survive a hung driver), probe the GPUs (every NVML call under a deadline,
navarch.agent.deadline), ask the fabric manager, run the checks (``observe_node``: probe,
GPU, fabric, kernel-log, XID, host-signal, network, injected and plugin checks), name each
finding's GPU, count faults and streaks, read a notice, decide whether the report is due
(``change_digest``, ``report_due``), choose its sequence, save the state, sign and write.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from navarch.agent import host_signals
from navarch.agent import kernel_log as kl
from navarch.agent.acceptance import ToolBench, tick_run
from navarch.agent.checks import (
    Check,
    CounterSample,
    injected_checks,
    is_transient,
    name_gpus,
    probe_checks,
    xid_checks,
)
from navarch.agent.config import AgentConfig
from navarch.agent.fabric import (
    FabricManagerHost,
    default_fabric_manager,
    fabric_manager_checks,
    fabric_present,
)
from navarch.agent.gpu import GpuBackend, GpuProbe, GpuSnapshot, ProbeError, ProbeErrorKind
from navarch.agent.gpu_checks import HW_SLOWDOWN_WINDOW, gpu_checks, hw_slowdown
from navarch.agent.host import FileHost, NodeHost
from navarch.agent.latched import event_from_json as _event_from_json
from navarch.agent.latched import event_to_json as _event_to_json
from navarch.agent.latched import trim_events
from navarch.agent.network import expectation_for, network_checks
from navarch.agent.state import AgentState, prune_faults
from navarch.report.acceptance import AcceptanceRun
from navarch.report.compat import UTC
from navarch.report.health import Remedy, Status
from navarch.report.health_report import GpuReading, HealthReport, ReportNotice, ReportXid, XidKind
from navarch.report.signing import fast_loads, sign_for_store
from navarch.report.xid import Severity

__all__ = [
    "run_once",
    "build_report",
    "observe_node",
    "NodeObservation",
    "gpu_readings",
    "choose_backend",
    "health_score",
    "SCORE_WEIGHTS",
    "next_sequence",
    "boot_check",
    "read_xids",
    "kernel_log_check",
    "persist_state",
    "count_faults",
    "KernelLogRead",
    "change_digest",
    "report_due",
    "STREAK_WRITE_CAP",
]

log = logging.getLogger("navarch.agent")

#: Points taken off 100 per check in each status (documented in docs/agent.md).
SCORE_WEIGHTS = {Status.UNHEALTHY: 40, Status.UNKNOWN: 25, Status.DEGRADED: 10, Status.HEALTHY: 0}
_MAX_XIDS = 256


def health_score(checks: Sequence[Check]) -> int:
    """0-100: 100 minus SCORE_WEIGHTS per check, floored at 0."""
    return max(0, 100 - sum(SCORE_WEIGHTS[c.status] for c in checks))


def choose_backend(config: AgentConfig) -> GpuBackend:
    """Fake backend when config.fake_gpu or NAVARCH_FAKE_GPU=true, else NVML.

    A bad faults file is logged and ignored (the fake runs without faults).
    """
    from navarch.agent.gpu import FakeGpuBackend, fake_requested, load_faults

    if fake_requested(config.fake_gpu):
        try:
            faults = load_faults(config.fake_faults_path())
        except ValueError as exc:
            log.warning("fake_faults_invalid", extra={"fields": {"error": str(exc)}})
            faults = None
        return FakeGpuBackend(config.node, config.fake_gpu_count(), faults)
    from navarch.agent.nvml import NvmlGpuBackend

    try:
        return NvmlGpuBackend(
            call_timeout_s=config.nvml_call_timeout_s, budget_s=config.nvml_budget_s
        )
    except ImportError as exc:  # nvidia-ml-py itself missing: same verdict as no libnvidia-ml
        return _NoLibraryBackend(f"cannot import pynvml: {exc}")


class _NoLibraryBackend:
    name = "nvml"

    def __init__(self, message: str) -> None:
        self.message = message

    def probe(self) -> GpuProbe:
        return GpuProbe(
            backend=self.name, init_error=ProbeError(ProbeErrorKind.LIBRARY_NOT_FOUND, self.message)
        )


def _iso(dt: datetime) -> str:
    return dt.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# --- counters --------------------------------------------------------------------------


def _counter_values(g: Any) -> dict[str, int]:
    vals = {f"nvlink_{k}": int(v) for k, v in (g.nvlink_errors or {}).items()}
    if g.pcie_replay_count is not None:
        vals = {"pcie_replay": int(g.pcie_replay_count), **vals}
    return vals


def _gpu_checks_and_counters(
    probe: GpuProbe, counters: Mapping[str, Mapping[str, Any]], boot_id: str, now: datetime
) -> tuple[list[Check], dict[str, dict[str, Any]]]:
    now_s = now.timestamp()
    checks: list[Check] = []
    new_counters: dict[str, dict[str, Any]] = {}
    for g in probe.gpus:
        saved = counters.get(g.uuid) or {}
        same_boot = saved.get("boot_id") == boot_id
        baselines = {
            k: CounterSample(int(v), float(saved.get("at_s", 0.0)), str(saved.get("boot_id")))
            for k, v in dict(saved.get("values") or {}).items()
        }
        history = [bool(x) for x in saved.get("slowdown", [])] if same_boot else []
        checks.extend(
            gpu_checks(
                g, baselines=baselines, slowdown_history=history, now_s=now_s, boot_id=boot_id
            )
        )
        slowed = bool(hw_slowdown(g))
        if not g.lost:
            new_counters[g.uuid] = {
                "boot_id": boot_id,
                "at_s": now_s,
                "values": _counter_values(g),
                "slowdown": [*history, slowed][-HW_SLOWDOWN_WINDOW:],
            }
        elif saved:
            new_counters[g.uuid] = dict(saved)
    return checks, new_counters


# --- fault counts ----------------------------------------------------------------------


def count_faults(
    checks: Sequence[Check],
    faults: Mapping[str, Mapping[str, float]],
    streaks: Mapping[str, int],
    same_boot: bool,
    boot_id: str,
    now: datetime,
) -> tuple[list[Check], dict[str, dict[str, float]], dict[str, int]]:
    """Record this boot for each check's fault and stamp the check with the agent's counts.

    faults: the state's history, fault kind -> {boot id: first seen, unix seconds}, pruned
    to FAULT_LOOKBACK_S (gpud's 3-day look-back). streaks: the state's counts from the
    previous check (fault id "<fault key>|<status>" -> count); a fault missing from this
    check ends its streak, a new boot (not ``same_boot``) ends them all.

    Returns the checks, the new history and the new streaks. Every check that has a fault
    key gets ``boots_seen`` (boots in the history with this kind, this one included),
    ``first_seen`` (RFC 3339) and ``consecutive`` (the checks in a row, this one included,
    that saw this fault (kind, GPU) with this status in this boot). Facts only: no check's
    status or action changes here.
    """
    history = {k: dict(v) for k, v in prune_faults(faults, now).items()}
    previous = streaks if same_boot else {}
    new_streaks: dict[str, int] = {}
    now_s = now.timestamp()
    out: list[Check] = []
    for c in checks:
        key = c.fault_key()
        if key is None:
            out.append(c)
            continue
        boots = history.setdefault(key.kind, {})
        boots.setdefault(boot_id, now_s)
        first = datetime.fromtimestamp(min(boots.values()), UTC)
        fault_id = f"{key.format()}|{c.status.value}"
        new_streaks[fault_id] = new_streaks.get(fault_id) or int(previous.get(fault_id, 0)) + 1
        stamped = replace(
            c, boots_seen=len(boots), first_seen=_iso(first), consecutive=new_streaks[fault_id]
        )
        out.append(stamped)
    return out, history, new_streaks


# --- cadence: consecutive checks, write on change or heartbeat ---------------------------

#: While a fault's consecutive count is below this, each new count is a change written at
#: once, so a pool's unhealthy_after (up to this many checks) counts the agent's checks, not
#: its heartbeats; past it the count still rises in every heartbeat.
STREAK_WRITE_CAP = 10


#: change_digest's JSON encoder, built once: json.dumps would build it again for every check.
_DIGEST_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)


def change_digest(
    checks: Sequence[Check],
    probe: GpuProbe,
    boot_id: str,
    notice: Mapping[str, Any] | None,
    verdict_checks: int = 1,
) -> str:
    """What makes a report worth writing at once, as a short digest: the boot, the verdict
    (each check's name, status and fault), the consecutive counts below STREAK_WRITE_CAP
    (each fault's, and ``verdict_checks``: the checks in a row with this overall status),
    which GPUs run processes, and the notice. Readings (temperatures, power, messages) are
    left out: they change every check and travel with the heartbeat."""
    import hashlib

    # One encoding of the whole document (an 8-GPU check makes about 50 checks): the rows
    # sort by their fields, so the digest does not depend on the checks' order.
    rows = sorted(
        (
            c.name,
            c.status.value,
            -1 if c.gpu_index is None else c.gpu_index,
            c.fault_kind or "",
            min(c.consecutive or 0, STREAK_WRITE_CAP),
        )
        for c in checks
    )
    doc = {
        "boot_id": boot_id,
        "checks": rows,
        "busy_gpus": [g.index for g in probe.gpus if g.process_count],
        "notice": dict(notice) if notice else None,
        "verdict_checks": min(verdict_checks, STREAK_WRITE_CAP),
    }
    return hashlib.sha256(_DIGEST_ENCODER.encode(doc).encode()).hexdigest()[:32]


def report_due(written: Mapping[str, Any], change: str, heartbeat_s: float, now: datetime) -> bool:
    """Whether this check writes its report: on the first check, when the change digest
    differs from the last written report's, or when ``heartbeat_s`` has passed since that
    write (also when the clock stepped back past it)."""
    at_s = written.get("at_s")
    if not isinstance(at_s, (int, float)) or written.get("change") != change:
        return True
    age_s = now.timestamp() - float(at_s)
    return age_s >= heartbeat_s or age_s < 0


# --- the run ---------------------------------------------------------------------------


def _previous_sequence(store: Any, key: str) -> int | None:
    try:
        blob = store.get(key)
        seq = fast_loads(blob.data).get("sequence")
        return seq if isinstance(seq, int) else None
    except Exception:  # any store or decode failure: the clock floor still holds
        return None


def gpu_reading(g: GpuSnapshot) -> GpuReading:
    """One GPU's item of the report's gpus[]: its identity and readings."""
    return GpuReading(
        g.index,
        g.uuid,
        g.name,
        g.pci_bus_id,
        g.temperature_c,
        g.power_w,
        g.memory_used_bytes,
        g.memory_total_bytes,
        g.utilization_pct,
        g.process_count,
        g.serial,
        g.mig_current,
    )


def gpu_readings(probe: GpuProbe) -> list[dict[str, Any]]:
    """The report's gpus[] items as JSON: per GPU its identity and readings (units in the
    names)."""
    return [gpu_reading(g).to_json() for g in probe.gpus]


def build_report(
    config: AgentConfig,
    *,
    probe: GpuProbe,
    events: Sequence[kl.XidEvent],
    sequence: int,
    boot_id: str,
    now: datetime,
    checks: Sequence[Check],
    notice: Mapping[str, Any] | None,
    node_key: bytes,
    acceptance: AcceptanceRun | None = None,
    sign: bool = True,
) -> tuple[dict[str, Any], bytes]:
    """Assemble and sign the report (schema_version 2); return it and the bytes to store
    (``signing.sign_for_store``); unsigned with no bytes when not `sign`. Pure."""
    from navarch import __version__

    xids = trim_events(events, _MAX_XIDS)
    report = HealthReport(
        fleet=config.fleet,
        pool=config.pool,
        node=config.node,
        instance_id=config.current_instance_id(),
        boot_id=boot_id,
        agent_version=__version__,
        sequence=sequence,
        generated_at=_iso(now),
        status=Status.worst(c.status for c in checks),
        action=Remedy.strongest(c.action for c in checks),
        health_score=health_score(checks),
        checks=tuple(c.to_report() for c in checks[:512]),
        gpus=tuple(gpu_reading(g) for g in probe.gpus[:64]),
        xids=tuple(
            ReportXid(
                code=e.code,
                kind=XidKind(e.kind),
                pci_bus_id=e.pci_bus_id,
                time=_iso(e.time) if e.time else None,
                boot_id=e.boot_id or boot_id,
                severity=e.severity,
                action=e.action,
                message=e.message[:512],
                count=e.count,
            )
            for e in sorted(xids, key=lambda e: (e.time is None, e.time or now, e.uptime_s or 0.0))
        ),
        notice=ReportNotice.from_json(notice) if notice else None,
        acceptance=acceptance,
    )
    return sign_for_store(report.to_json(), node_key) if sign else (report.to_json(), b"")


def _safe_probe(backend: GpuBackend) -> GpuProbe:
    try:
        return backend.probe()
    except Exception as exc:  # an agent bug must still produce a report (status unknown)
        log.exception("probe_failed")
        return GpuProbe(
            backend=getattr(backend, "name", "?"),
            init_error=ProbeError(ProbeErrorKind.AGENT_ERROR, f"agent error: {exc}"),
        )


@dataclass(frozen=True)
class KernelLogRead:
    """This run's view of the kernel log.

    lines: the new lines read; saved: the position block for the state file; source:
    "file" / "journal" / "kmsg" / "none"; error: why no source could be read, or None;
    latched: this boot's XID events (earlier runs' latched events + the new ones);
    earlier_boots: new events that carry another boot's id (a journal's tail of an earlier
    boot): they only feed the fault history. reset: a GPU reset marker was found
    (NodeHost.gpu_reset_pending); the events latched before it were dropped.
    """

    lines: tuple[kl.KernelLine, ...]
    saved: Mapping[str, Any]
    source: str
    error: str | None
    latched: tuple[kl.XidEvent, ...]
    earlier_boots: tuple[kl.XidEvent, ...]
    reset: bool = False  # the GPUs were reset since the last run: earlier latched XIDs dropped


def next_sequence(
    state: AgentState, problem: str | None, previous: int | None, store_read: bool, now: datetime
) -> int:
    """The sequence of this run's report.

    state, problem: from load_state; previous: the sequence of the node's report in the
    store (None when absent or unreadable); store_read: whether the store was asked (False
    when printing to stdout). The sequence is above both the state's and the stored
    report's: the stored one is ahead of the state after runs that could not save their
    state. When either is unknown (no state, or the store was asked and could not say),
    the clock floor ``unix time in ms`` applies too (see navarch.agent.state).
    """
    floor_ms = int(now.timestamp() * 1000)
    candidates = [state.sequence + 1, (previous or 0) + 1]
    if problem is not None or (store_read and previous is None):
        candidates.append(floor_ms)
    return max(candidates)


def boot_check(boot_id: str, previous_boot_id: str | None) -> Check:
    """The always-healthy "boot" check: this boot id and whether it changed."""
    changed = previous_boot_id is not None and previous_boot_id != boot_id
    return Check(
        "boot",
        Status.HEALTHY,
        Remedy.NONE,
        f"boot {boot_id}" + (" (rebooted since the last report)" if changed else ""),
        evidence={"boot_id": boot_id, "previous_boot_id": previous_boot_id},
    )


def read_xids(host: NodeHost, state: AgentState, boot_id: str, now: datetime) -> KernelLogRead:
    """New kernel log lines since the saved position, parsed and latched for this boot.

    Events of this boot (or without a boot id) join the state's latched events (dropped
    when the boot changed or the GPUs were reset, NodeHost.gpu_reset_pending); events
    stamped with another boot go to ``earlier_boots``.
    """
    lines, saved, source, error = host.read_kernel_log(state.kernel_log, boot_id, now)
    boot_changed = state.boot_id is not None and state.boot_id != boot_id
    reset = host.gpu_reset_pending()
    latched = [] if boot_changed or reset else [_event_from_json(e) for e in state.events]
    earlier: list[kl.XidEvent] = []
    for ev in kl.parse_lines(lines):
        if ev.boot_id and ev.boot_id != boot_id:
            earlier.append(ev)
        else:
            latched.append(replace(ev, boot_id=boot_id))
    return KernelLogRead(tuple(lines), saved, source, error, tuple(latched), tuple(earlier), reset)


def kernel_log_check(read: KernelLogRead) -> Check:
    """Healthy when a kernel log source was read; degraded (XIDs unknown) when none could be."""
    if read.error:
        return Check(
            "kernel_log",
            Status.DEGRADED,
            Remedy.NONE,
            f"cannot read the kernel log, XIDs unknown: {read.error}",
            evidence={"source": read.source},
        )
    return Check(
        "kernel_log",
        Status.HEALTHY,
        Remedy.NONE,
        f"read {len(read.lines)} new kernel log lines from {read.source}",
        evidence={"source": read.source, "lines": len(read.lines)},
    )


def _faults_with_earlier_boots(
    faults: Mapping[str, Mapping[str, float]], earlier: Sequence[kl.XidEvent], now: datetime
) -> dict[str, dict[str, float]]:
    """The fault history plus fatal events seen in an earlier boot's tail."""
    out = {k: dict(v) for k, v in faults.items()}
    for ev in earlier:
        if ev.severity is Severity.FATAL and ev.boot_id:
            out.setdefault(f"{ev.kind}:{ev.code}", {}).setdefault(ev.boot_id, now.timestamp())
    return out


def persist_state(host: NodeHost, state: AgentState, now: datetime) -> tuple[int, Check | None]:
    """Save the state through the host; return (the report's sequence, an "agent_state"
    check on failure).

    When the file cannot be written (read-only or full disk: OSError), the report is still
    written, with an ``unknown`` / none check "agent state not writable: <error>": the
    agent cannot keep its latches, baselines and fault history, but the GPUs may be fine,
    so it is doubt, which never terminates (DESIGN safety rule 2), not a fault. The
    sequence then takes the clock floor ``max(state.sequence, unix time in ms)``: the
    state on disk is stale, so later runs would otherwise derive the same sequence again
    and the reconciler would reject every report as replayed.
    """
    path = host.state_path
    try:
        host.save_state(state)
    except OSError as exc:
        log.error("state_write_failed", extra={"fields": {"path": path, "error": str(exc)}})
        sequence = max(state.sequence, int(now.timestamp() * 1000))
        check = Check(
            "agent_state",
            Status.UNKNOWN,
            Remedy.NONE,
            f"agent state not writable: {exc}",
            evidence={"path": path, "error": str(exc), "errno": exc.errno, "sequence": "clock"},
        )
        return sequence, check
    return state.sequence, None


def _mark_written(host: NodeHost, state: AgentState, change: str, now: datetime) -> None:
    """Record the report just written (when, its change digest) in the state; a state that
    cannot be saved now only makes the next check write again."""
    try:
        host.save_state(replace(state, written={"at_s": now.timestamp(), "change": change}))
    except OSError as exc:
        log.error(
            "state_write_failed", extra={"fields": {"path": host.state_path, "error": str(exc)}}
        )


def _log_report(config: AgentConfig, report: Mapping[str, Any], written: bool, source: str) -> None:
    log.info(
        "report_written" if written else "report_unchanged",
        extra={
            "fields": {
                "key": config.report_key,
                "sequence": report["sequence"],
                "status": report["status"],
                "action": report["action"],
                "health_score": report["health_score"],
                "gpus": len(report["gpus"]),
                "xids": len(report["xids"]),
                "kernel_log": source,
            }
        },
    )


def _loaded_state(host: NodeHost) -> tuple[AgentState, str | None]:
    """The node's saved state and, when it had to be rebuilt, why (logged)."""
    state, problem = host.load_state()
    if problem is not None:
        log.warning(
            "state_rebuilt", extra={"fields": {"path": host.state_path, "problem": problem}}
        )
    return state, problem


def _report_sequence(
    state: AgentState,
    problem: str | None,
    due: bool,
    store: Any,
    report_key: str,
    now: datetime,
) -> int:
    """This check's sequence: the state's when no report is due, else next_sequence over
    the state and the stored report. The store is read only before a write: a check that
    writes nothing costs no GET."""
    if not due:
        return state.sequence
    previous = _previous_sequence(store, report_key) if store is not None else None
    return next_sequence(state, problem, previous, store is not None, now)


@dataclass(frozen=True)
class NodeObservation:
    """One check of the node: its checks (counted), the GPU probe, the kernel log read, and
    the state's new counters, fault history, streaks and host signals."""

    checks: list[Check]
    probe: GpuProbe
    xids: KernelLogRead
    counters: dict[str, dict[str, Any]]
    faults: dict[str, dict[str, float]]
    streaks: dict[str, int]
    verdict_checks: int
    host_signals: Mapping[str, Any] = field(default_factory=dict)
    nvml_errors: int = 0
    network: dict[str, Any] = field(default_factory=dict)

    def next_state(
        self, sequence: int, boot_id: str, written: Mapping[str, Any], acceptance: Mapping[str, Any]
    ) -> AgentState:
        """The state this check leaves. ``written`` stays the last write's until the store
        took this report: a failed write is retried at the next check, not the heartbeat.
        acceptance: this check's acceptance run as JSON (empty when none ran)."""
        latched = trim_events(self.xids.latched, _MAX_XIDS)
        return AgentState(
            sequence=sequence,
            boot_id=boot_id,
            kernel_log=self.xids.saved,
            events=tuple(_event_to_json(e, boot_id) for e in latched),
            faults=self.faults,
            counters=self.counters,
            streaks=self.streaks,
            written=dict(written),
            acceptance=acceptance,
            host_signals=dict(self.host_signals),
            nvml_errors=self.nvml_errors,
            network=self.network,
        )


def _transient_runs(probe: GpuProbe, state: AgentState, same_boot: bool) -> int:
    """Runs in a row of this boot, this one included, whose NVML start failed with a
    transient error (0 when this one did not)."""
    if not is_transient(probe):
        return 0
    return (state.nvml_errors if same_boot else 0) + 1


def observe_node(
    config: AgentConfig,
    host: NodeHost,
    state: AgentState,
    backend: GpuBackend,
    boot_id: str,
    now: datetime,
    fabric_manager: FabricManagerHost | None = None,
) -> NodeObservation:
    """Read the kernel log, probe the GPUs (every NVML call under its deadline), ask the
    fabric manager (``fabric_manager``; None: not asked), run every check and the
    plugins' checks, and count each fault (boots seen, first seen) and each streak of
    checks, this one's verdict included. Never raises for a GPU or kernel-log problem:
    each is a check.

    The kernel log is read first, so its findings are in the report even when NVML
    hangs (the probe then ends at its deadline with ``GpuProbe.hung``).
    """
    same_boot = state.boot_id == boot_id
    xids = read_xids(host, state, boot_id, now)
    saved = state.host_signals if same_boot else {}  # a reboot starts afresh
    hosted = host_signals.evaluate(xids.lines, host.read_host(now), saved, now, boot_id)
    probe = _safe_probe(backend)
    transient = _transient_runs(probe, state, same_boot)
    gchecks, counters = _gpu_checks_and_counters(probe, state.counters, boot_id, now)
    fabric = fabric_present(probe)
    fm_view = fabric_manager.view(fabric) if fabric_manager is not None else None
    checks = [
        boot_check(boot_id, state.boot_id),
        *probe_checks(probe, config.gpus_per_node, max(transient, 1)),
        *gchecks,
        *fabric_manager_checks(fm_view, fabric),
        kernel_log_check(xids),
        *xid_checks(xids.latched, {g.pci_bus_id: g.index for g in probe.gpus}),
        *hosted.checks,
        *injected_checks(backend),
    ]
    ports, expected = host.read_network(), expectation_for(config)
    net, network = network_checks(ports, expected, state.network, xids.lines, now.timestamp())
    checks += net
    checks += host.plugin_checks(config, boot_id, gpu_readings(probe), checks)
    checks = name_gpus(checks, probe)
    faults = _faults_with_earlier_boots(state.faults, xids.earlier_boots, now)
    checks, faults, streaks = count_faults(checks, faults, state.streaks, same_boot, boot_id, now)
    # The verdict's own run of checks: a node back from a remedy writes its first healthy
    # checks at once, so the reconciler's return_after counts checks, not heartbeats.
    verdict = f"verdict|{Status.worst(c.status for c in checks).value}"
    streaks[verdict] = int(state.streaks.get(verdict, 0) if same_boot else 0) + 1
    return NodeObservation(
        checks,
        probe,
        xids,
        counters,
        faults,
        streaks,
        verdict_checks=streaks[verdict],
        host_signals=hosted.state,
        nvml_errors=transient,
        network=network,
    )


def _report_store(config: AgentConfig, store: Any, to_stdout: bool) -> Any:
    """The store the report goes to: the one given, none for --stdout, else the agent's
    configured store (imported here: --stdout and the simulator never need it)."""
    if store is None and not to_stdout:
        from navarch.agent.store import open_agent_store

        return open_agent_store(config.store)
    return store


def _keep_state(
    host: NodeHost, state: AgentState, reset: bool, now: datetime
) -> tuple[int, Check | None]:
    """Save the run's state (persist_state) and, once it is saved, clear the GPU reset
    marker this run consumed: a marker cleared with the state unsaved would be lost."""
    sequence, state_check = persist_state(host, state, now)
    if state_check is None and reset:
        host.clear_gpu_reset()
    return sequence, state_check


def _due(
    state: AgentState, lost: bool, change: str, heartbeat_s: float, run_json: Any, now: datetime
) -> bool:
    """Whether a check writes its report (run_once): a lost state, a change or heartbeat
    (report_due), or an acceptance step, which is news for the planner."""
    return (
        lost
        or report_due(state.written, change, heartbeat_s, now)
        or run_json != dict(state.acceptance)
    )


def run_once(
    config: AgentConfig,
    *,
    now: datetime | None = None,
    store: Any = None,
    to_stdout: bool = False,
    backend: GpuBackend | None = None,
    host: NodeHost | None = None,
    acceptance_bench: ToolBench | None = None,
    fabric_manager: FabricManagerHost | None = None,
) -> dict[str, Any]:
    """Run every check once, write the state and, when due, the signed report; return the
    report (built whether or not it was written; signed when it was written or printed).

    The report is written on the first check, when the change digest (verdict, fault set,
    consecutive counts below STREAK_WRITE_CAP, GPU-process state, notice: ``change_digest``)
    differs from the last written report's, when ``config.heartbeat_s`` passed since that
    write, after a lost state, or when the state cannot be saved (``report_due``). The kernel
    log is read from the cursor the state keeps, so a check reads only the new lines.

    now: aware UTC clock (default: the system clock). store: an ObjectStore (default:
    ``navarch.agent.store.open_agent_store(config.store)``); to_stdout: write nothing, neither the
    store nor the state file (the CLI prints the report). backend: GPU backend override (tests,
    the simulator). host: the node's state, kernel log, reset marker, notice and plugins
    (default: FileHost(config), the real machine; the simulator passes an in-memory one).
    acceptance_bench: the fake backend's acceptance tools and clock (the simulator's
    virtual tool time; navarch.agent.acceptance.ToolBench), None: the overrides file.
    fabric_manager: the node's fabric manager (navarch.agent.fabric.FabricManagerHost;
    default: navarch.agent.fabric.default_fabric_manager).
    Raises ConfigError (no/bad node key, bad store URL) and StoreError / OSError when the
    report cannot be written; every GPU, kernel-log or state-file problem becomes a check.
    """
    now = (now or datetime.now(UTC)).astimezone(UTC)
    node_key = config.node_key()
    boot_id = config.current_boot_id()
    store = _report_store(config, store, to_stdout)
    host = host or FileHost(config)
    state, problem = _loaded_state(host)
    backend = backend or choose_backend(config)
    fm = fabric_manager or default_fabric_manager(backend.name, now)
    seen = observe_node(config, host, state, backend, boot_id, now, fm)
    checks, probe, xids = seen.checks, seen.probe, seen.xids
    notice = host.read_notice(now)
    change = change_digest(checks, probe, boot_id, notice, seen.verdict_checks)
    run = tick_run(config, state.acceptance, boot_id, xids.reset, probe, now, acceptance_bench)
    run_json = run.to_json() if run is not None else {}
    due = to_stdout or _due(state, problem is not None, change, config.heartbeat_s, run_json, now)
    sequence = _report_sequence(state, problem, due, store, config.report_key, now)
    new_state = seen.next_state(sequence, boot_id, state.written, run_json)
    # --stdout is a look, not a run: it keeps the state file (latches, baselines, the
    # kernel log offset) and the reset marker as they are, so the timer's next run sees
    # exactly what it would have seen.
    state_check = None
    if not to_stdout:
        sequence, state_check = _keep_state(host, new_state, xids.reset, now)
    if state_check is not None:
        checks.append(state_check)
        due = True  # a node that cannot keep its state says so now, not at the heartbeat
    report, data = build_report(
        config,
        probe=probe,
        events=xids.latched,
        sequence=sequence,
        boot_id=boot_id,
        now=now,
        checks=checks,
        notice=notice,
        node_key=node_key,
        acceptance=run,
        sign=due,  # nothing reads the signature of a report neither written nor printed
    )
    written = due and not to_stdout
    if written:
        store.put(config.report_key, data)
        if state_check is None:
            _mark_written(host, new_state, change, now)
    _log_report(config, report, written, xids.source)
    return report

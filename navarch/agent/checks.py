"""Health checks: pure functions from a GPU probe, XID events and counter baselines to Checks.

Three kinds, evaluated by navarch.agent.runner in this order, and plugins last:

- node checks over the probe (here: ``probe_checks``: nvml, gpu_count, gpu_handle);
- per-GPU check components, gpud-style (navarch.agent.gpu_checks: ``GPU_LOST``, the
  table ``GPU_CHECKS`` and ``gpu_checks``, the loop over it);
- XID checks over this boot's latched events (here: ``xid_checks``);
- then checks from navarch.checks plugins (navarch.agent.plugin_checks), each guarded.

Each check yields ``Check(name, status, action, message, gpu_index, evidence)``. Status
order (worst wins) is navarch.report.health.Status's: healthy < degraded < unknown < unhealthy.
Thresholds and their sources are in each function's docstring (gpu-health.md §1).

The agent reports facts. Every degraded or unhealthy check names its fault
(``Check.fault_key()``: a kind such as ``xid:79``, ``ecc:dbe``, ``gpu_lost``, with the GPU
index as its own field) and ``action`` is the catalogue's recommended remedy for it (its
source in the check's docstring). Neither is a decision: the planner's ladder
(navarch.planner.ladder) alone maps a fault to a rung, under the pool's ``remediation``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from navarch.agent.gpu import FakeFaults, GpuProbe, InjectedFinding, ProbeErrorKind
from navarch.agent.kernel_log import HostSignal, XidEvent
from navarch.report.health import FaultKey, Remedy, Status, fault_kind
from navarch.report.health_report import ReportCheck
from navarch.report.xid import Severity

__all__ = [
    "Check",
    "CounterSample",
    "probe_checks",
    "nvml_check",
    "gpu_count_check",
    "handle_checks",
    "xid_checks",
    "host_signal_checks",
    "injected_checks",
    "SEVERITY_STATUS",
]


@dataclass(frozen=True)
class Check:
    """One finding. evidence: JSON-able facts; fault_kind: the fault's kind (default: the
    check's name; see ``fault_key``); boots_seen / first_seen: the boots this node saw the
    fault in and when it was first seen (RFC 3339), counted by the agent's fault history
    (navarch.agent.runner.count_faults); consecutive: the agent's consecutive observations
    of this fault (same kind and GPU) in this boot, this one included; plugin: the distribution of the navarch.checks
    plugin that made it (None: built-in)."""

    name: str
    status: Status
    action: Remedy
    message: str
    gpu_index: int | None = None
    evidence: Mapping[str, Any] = field(default_factory=dict)
    fault_kind: str | None = None
    plugin: str | None = None
    boots_seen: int | None = None
    first_seen: str | None = None
    consecutive: int | None = None

    def fault_key(self) -> FaultKey | None:
        """The fault this check reports, or None when it reports none (healthy, or unknown:
        doubt is not a fault). Kind: ``fault_kind``, else the check's name, in the report
        schema's key grammar (navarch.report.health.fault_kind)."""
        if self.status not in (Status.UNHEALTHY, Status.DEGRADED):
            return None
        return FaultKey(fault_kind(self.fault_kind or self.name), self.gpu_index)

    def to_report(self) -> ReportCheck:
        """The check as the report's checks[] item (navarch.report.health_report.ReportCheck):
        message capped at 1,024 characters, plugin at 200; the fault counts only with a
        fault key."""
        key = self.fault_key()
        counted = key is not None and self.boots_seen is not None
        return ReportCheck(
            self.name,
            self.status,
            self.action,
            self.message[:1024],
            self.gpu_index,
            dict(self.evidence),
            key,
            boots_seen=self.boots_seen if counted else None,
            first_seen=self.first_seen if counted else None,
            consecutive=self.consecutive if key is not None else None,
            plugin=self.plugin[:200] if self.plugin is not None else None,
        )

    def to_json(self) -> dict[str, Any]:
        """``to_report()`` as JSON (schemas/health-report.schema.json checks[] item)."""
        return self.to_report().to_json()


@dataclass(frozen=True)
class CounterSample:
    """A cumulative counter's value at a time (seconds since the epoch) in a boot."""

    value: int
    at_s: float
    boot_id: str


H, D, UK, U = Status.HEALTHY, Status.DEGRADED, Status.UNKNOWN, Status.UNHEALTHY

#: A catalogue severity as a check status (navarch.report.xid).
SEVERITY_STATUS = {Severity.IGNORE: H, Severity.WARNING: D, Severity.FATAL: U}

_INIT = {
    ProbeErrorKind.LIBRARY_NOT_FOUND: (
        UK,
        Remedy.NONE,
        "NVML library not found: node image lacks the NVIDIA driver (misconfigured)",
    ),
    ProbeErrorKind.NO_PERMISSION: (
        UK,
        Remedy.NONE,
        "no permission to use NVML: run the agent as root (agent misconfigured, not a node fault)",
    ),
    ProbeErrorKind.AGENT_ERROR: (
        UK,
        Remedy.NONE,
        "the agent failed while reading GPUs (agent bug, not a node fault)",
    ),
    ProbeErrorKind.DRIVER_NOT_LOADED: (U, Remedy.REBOOT, "NVIDIA kernel driver not loaded"),
    ProbeErrorKind.LIB_RM_VERSION_MISMATCH: (
        U,
        Remedy.REBOOT,
        "NVML library / kernel driver version mismatch (driver upgraded without reboot)",
    ),
}


def probe_checks(probe: GpuProbe, gpus_per_node: int | None) -> list[Check]:
    """Node-level checks: NVML usable, then GPU count and handles (skipped when NVML is not).

    Rules and sources: ``nvml_check``, ``gpu_count_check``, ``handle_checks``.
    """
    if probe.init_error is not None:
        return [nvml_check(probe)]
    return [
        nvml_check(probe),
        gpu_count_check(probe, gpus_per_node),
        *handle_checks(probe),
    ]


def nvml_check(probe: GpuProbe) -> Check:
    """Whether the GPU library started.

    NVML init (gpu-health.md §4 classification): LibraryNotFound -> unknown (image
    misconfigured); NoPermission -> unknown (agent misconfigured); an agent bug ->
    unknown; DriverNotLoaded / LibRmVersionMismatch -> unhealthy + reboot (gpud); anything
    else -> unhealthy + reboot. Unhealthy verdicts are reboot-fixable faults.
    """
    err = probe.init_error
    if err is None:
        return Check(
            "nvml",
            H,
            Remedy.NONE,
            f"{probe.backend} backend ready",
            evidence={"backend": probe.backend, "driver_version": probe.driver_version},
        )
    status, action, text = _INIT.get(err.kind, (U, Remedy.REBOOT, "NVML failed to initialise"))
    return Check(
        "nvml",
        status,
        action,
        f"{text}: {err.message}",
        evidence={"error": err.kind.value, "code": err.code, "backend": probe.backend},
        fault_kind=f"nvml_init:{err.kind.value}",
    )


def gpu_count_check(probe: GpuProbe, gpus_per_node: int | None) -> Check:
    """GPUs the library enumerated against the pool's gpus_per_node.

    Fewer -> unhealthy + reboot (a GPU fell off the bus or failed init); more -> degraded
    (the pool's gpus_per_node is wrong); gpus_per_node None or 0 -> healthy, not checked.
    Source: gpud gpu-counts, Meta GCM check_gpu_num, AzNHC check_gpu_count.
    """
    count = probe.device_count if probe.device_count is not None else len(probe.gpus)
    ev = {"found": count, "expected": gpus_per_node}
    if not gpus_per_node:
        text = f"{count} GPUs (no expected count configured)"
        return Check("gpu_count", H, Remedy.NONE, text, evidence=ev)
    if count < gpus_per_node:
        text = f"{count} of {gpus_per_node} GPUs visible"
        return Check("gpu_count", U, Remedy.REBOOT, text, evidence=ev, fault_kind="gpu_count")
    if count > gpus_per_node:
        text = f"{count} GPUs visible but the pool expects {gpus_per_node}"
        return Check("gpu_count", D, Remedy.NONE, text, evidence=ev)
    return Check("gpu_count", H, Remedy.NONE, f"{count} GPUs as expected", evidence=ev)


def handle_checks(probe: GpuProbe) -> list[Check]:
    """One unhealthy + reboot check per GPU whose handle could not be obtained.

    Source: gpud (InitError on a device handle).
    """
    return [
        Check(
            "gpu_handle",
            U,
            Remedy.REBOOT,
            f"cannot get a handle for GPU {index}: {message}",
            gpu_index=index,
            evidence={"error": message},
            fault_kind="gpu_handle",
        )
        for index, message in probe.handle_errors
    ]


def xid_checks(events: Sequence[XidEvent], bdf_to_index: Mapping[str, int]) -> list[Check]:
    """One check per (kind, code, PCI bus) among this boot's latched XID / SXid events.

    Severity (navarch.report.xid, NVIDIA XID catalogue): fatal -> unhealthy, warning -> degraded,
    ignore -> healthy with action none (the application, not the node, needs a restart).
    The fault kind is "<kind>:<code>" (``xid:79``, ``sxid:20034``), the GPU its PCI bus's.
    """
    groups: dict[tuple[str, int, str], list[XidEvent]] = {}
    for ev in events:
        groups.setdefault((ev.kind, ev.code, ev.pci_bus_id), []).append(ev)
    out: list[Check] = []
    for (kind, code, bdf), evs in list(groups.items())[:128]:
        info = max((e.info for e in evs), key=lambda x: (x.severity.rank, x.action.rank))
        status = SEVERITY_STATUS[info.severity]
        action = Remedy.NONE if info.severity is Severity.IGNORE else info.action
        count = sum(e.count for e in evs)
        label = "SXid" if kind == "sxid" else "XID"
        out.append(
            Check(
                "xid",
                status,
                action,
                f"{label} {code} ({info.mnemonic}) on {bdf} x{count}: {evs[-1].message}"[:1024],
                bdf_to_index.get(bdf),
                {
                    "code": code,
                    "kind": kind,
                    "pci_bus_id": bdf,
                    "count": count,
                    "severity": info.severity.value,
                    "reboot_fixable": info.reboot_fixable,
                },
                f"{kind}:{code}",
            )
        )
    if not out:
        out.append(Check("xid", H, Remedy.NONE, "no XID events this boot"))
    return out


def host_signal_checks(signals: Sequence[HostSignal]) -> list[Check]:
    """One unhealthy check per kind among this run's host signals (soft lockups, read
    from the kernel log by navarch.agent.kernel_log.parse_host_signals), the last line
    as its message and the count in its evidence; none when there were none.

    A soft lockup recommends a reboot: gpud's kmsg matcher and the EKS node monitoring
    agent's kernel monitor both name it, and only a reboot frees a CPU the kernel saw stuck.
    """
    groups: dict[str, list[HostSignal]] = {}
    for sig in signals:
        groups.setdefault(sig.kind, []).append(sig)
    return [
        Check(
            "host_signal",
            U,
            Remedy.REBOOT,
            f"{kind} x{len(sigs)}: {sigs[-1].message}"[:1024],
            evidence={**sigs[-1].evidence, "count": len(sigs), "line": sigs[-1].message},
            fault_kind=kind,
        )
        for kind, sigs in groups.items()
    ]


def injected_checks(backend: object) -> list[Check]:
    """The fake backend's injected findings (navarch.agent.gpu.InjectedFinding) as
    checks, as the real check of that part of the machine would make them; none for
    any other backend (one without fake ``faults``)."""
    faults = getattr(backend, "faults", None)
    findings: Sequence[InjectedFinding] = faults.findings if isinstance(faults, FakeFaults) else ()
    return [
        Check(
            f.check,
            f.status,
            f.action,
            f.message,
            f.gpu_index,
            {**f.evidence, "injected": True},
            f.kind,
        )
        for f in findings
    ]

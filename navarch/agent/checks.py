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
from dataclasses import dataclass, field, replace
from typing import Any

from navarch.agent.gpu import FakeFaults, GpuProbe, InjectedFinding, ProbeErrorKind
from navarch.agent.kernel_log import XidEvent
from navarch.report.health import FaultKey, Remedy, Status, fault_kind
from navarch.report.health_report import GpuRef, ReportCheck
from navarch.report.xid import Severity

__all__ = [
    "Check",
    "CounterSample",
    "probe_checks",
    "nvml_check",
    "gpu_count_check",
    "handle_checks",
    "gpu_hung_check",
    "is_transient",
    "TRANSIENT_NVML_TOLERATED",
    "xid_checks",
    "name_gpus",
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
    plugin that made it (None: built-in); gpu: the GPU's identity on a finding
    (``name_gpus``)."""

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
    gpu: GpuRef | None = None

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
            gpu=self.gpu,
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


#: Runs in a row with a transient NVML error (``is_transient``) tolerated before the
#: fourth is unhealthy. Source: gpud (an NVML error is retried; 4 failures in a row are
#: a fault).
TRANSIENT_NVML_TOLERATED = 3


def is_transient(probe: GpuProbe) -> bool:
    """Whether NVML failed to start for no named reason (kind OTHER: NVML_ERROR_UNKNOWN,
    TIMEOUT, ...), which a later run may not see again."""
    return probe.init_error is not None and probe.init_error.kind is ProbeErrorKind.OTHER


def probe_checks(
    probe: GpuProbe, gpus_per_node: int | None, transient_runs: int = 1
) -> list[Check]:
    """Node-level checks: NVML usable, a call that hung, then GPU count and handles
    (skipped when NVML is not usable, or hung before it counted the GPUs).

    transient_runs: runs in a row, this one included, with a transient NVML error (agent
    state). Rules and sources: ``nvml_check``, ``gpu_hung_check``, ``gpu_count_check``,
    ``handle_checks``.
    """
    if probe.init_error is not None:
        return [nvml_check(probe, transient_runs)]
    if probe.hung is not None and probe.device_count is None:
        return [gpu_hung_check(probe)]
    hung = [gpu_hung_check(probe)] if probe.hung is not None else []
    return [
        nvml_check(probe),
        *hung,
        gpu_count_check(probe, gpus_per_node),
        *handle_checks(probe),
    ]


def gpu_hung_check(probe: GpuProbe) -> Check:
    """An NVML call that did not return within its deadline -> unhealthy + reboot, fault
    ``gpu_hung`` on the GPU it was reading (node-wide when it was not reading one).

    The driver is stuck: every later call would hang too, so the GPUs after it were not
    read (evidence ``gpus_not_read``). A hung driver is not cleared by a GPU reset issued
    through the same driver; a reboot is the first rung (the remediation table's row).
    Source: NVSentinel's GPU health monitor (NVML hangs on a degrading GPU); gpud (NVML
    calls under a deadline; a GPU that does not answer -> reboot).
    """
    hung = probe.hung
    assert hung is not None
    count = probe.device_count
    start = hung.gpu_index + 1 if hung.gpu_index is not None else 0
    not_read = list(range(start, count)) if count is not None else []
    where = "" if hung.gpu_index is None else f"GPU {hung.gpu_index}"
    if hung.pci_bus_id:
        where += f" ({hung.pci_bus_id})"
    text = (
        f"{where + ': ' if where else ''}{hung.call} did not return within "
        f"{hung.waited_s:g} s; the agent abandoned it (driver hung)"
    )
    if not_read:
        text += f"; GPUs {not_read[0]}-{not_read[-1]} not read"
    ev = {
        "call": hung.call,
        "waited_s": hung.waited_s,
        "pci_bus_id": hung.pci_bus_id,
        "uuid": hung.uuid,
        "gpus_not_read": not_read,
    }
    return Check("gpu_hung", U, Remedy.REBOOT, text, hung.gpu_index, ev, fault_kind="gpu_hung")


def nvml_check(probe: GpuProbe, transient_runs: int = 1) -> Check:
    """Whether the GPU library started.

    NVML init (gpu-health.md §4 classification): LibraryNotFound -> unknown (image
    misconfigured); NoPermission -> unknown (agent misconfigured); an agent bug ->
    unknown; DriverNotLoaded / LibRmVersionMismatch -> unhealthy + reboot (gpud); anything
    else (``is_transient``) -> healthy for TRANSIENT_NVML_TOLERATED runs in a row
    (``transient_runs``), then unhealthy + reboot (gpud). Unhealthy verdicts are
    reboot-fixable faults.
    """
    err = probe.init_error
    if err is not None and is_transient(probe) and transient_runs <= TRANSIENT_NVML_TOLERATED:
        return Check(
            "nvml",
            H,
            Remedy.NONE,
            f"transient NVML error tolerated ({transient_runs} of "
            f"{TRANSIENT_NVML_TOLERATED} in a row): {err.message}",
            evidence={"error": err.kind.value, "code": err.code, "runs": transient_runs},
        )
    if err is None:
        return Check(
            "nvml",
            H,
            Remedy.NONE,
            f"{probe.backend} backend ready",
            evidence={"backend": probe.backend, "driver_version": probe.driver_version},
        )
    status, action, text = _INIT.get(err.kind, (U, Remedy.REBOOT, "NVML failed to initialise"))
    if is_transient(probe):
        text += f" ({transient_runs} runs in a row)"
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


def name_gpus(checks: Sequence[Check], probe: GpuProbe) -> list[Check]:
    """Each finding (a check not healthy) about one GPU, stamped with that GPU's identity
    (PCI bus id, serial, UUID) from the probe; a hung call's GPU from the call's record."""
    refs: dict[int, GpuRef] = {g.index: GpuRef(g.pci_bus_id, g.serial, g.uuid) for g in probe.gpus}
    hung = probe.hung
    if hung is not None and hung.gpu_index is not None and hung.gpu_index not in refs:
        refs[hung.gpu_index] = GpuRef(hung.pci_bus_id, None, hung.uuid)
    return [
        replace(c, gpu=refs.get(c.gpu_index))
        if c.status is not Status.HEALTHY and c.gpu_index is not None
        else c
        for c in checks
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

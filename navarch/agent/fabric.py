"""The NVLink/NVSwitch fabric: each GPU's fabric registration and health (NVML), and the
fabric manager's service state and fatal log lines (the node).

Two units, gpud-style:

- ``FABRIC``: a per-GPU component (navarch.agent.gpu_checks.GPU_CHECKS) over
  ``GpuSnapshot.fabric`` (nvmlDeviceGetGpuFabricInfoV): the registration state, its
  status, and the v2 health mask decoded field by field (``decode_health_mask``).
  ``NVML_GPU_FABRIC_STATE_NOT_SUPPORTED`` (a GPU with no NVSwitch fabric: PCIe cards, HGX
  without NVSwitch) reads as not supported, never as unhealthy.
- ``fabric_manager_checks``: node checks over what a ``FabricManagerHost`` saw: whether
  the machine has NVSwitches, the ``nvidia-fabricmanager`` unit's state, and the lines of
  ``/var/log/fabricmanager.log`` that say the fabric failed. Checked only where the
  machine has NVSwitches (an NVSwitch PCI function, or a GPU whose fabric state is
  supported); elsewhere there is no fabric manager to ask about.

Every fault kind starts with ``fabric`` (navarch.fleet.remedies: class ``fabric``).
Sources: nvml.h / nvidia-ml-py (``NVML_GPU_FABRIC_*`` constants), gpud's fabric-manager
component (fabric state: an unset-true field of the health mask is an issue; the
fabricmanager.log matchers and their sample lines), NVIDIA Fabric Manager user guide
(the service must be active on NVSwitch systems for CUDA to use the GPUs).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from navarch.agent.checks import Check
from navarch.agent.gpu import FabricInfo, GpuProbe, GpuSnapshot
from navarch.agent.log_rules import LogRule, first_found
from navarch.report.health import Remedy, Status

__all__ = [
    "FABRIC_STATES",
    "HEALTH_FIELDS",
    "FM_LOG_MATCHERS",
    "FabricManagerHost",
    "FabricManagerView",
    "FileFabricManager",
    "decode_health_mask",
    "default_fabric_manager",
    "fabric_rule",
    "fabric_manager_checks",
    "fabric_present",
    "match_fm_line",
    "fm_line_time",
]

H, D, UK, U = Status.HEALTHY, Status.DEGRADED, Status.UNKNOWN, Status.UNHEALTHY

#: NVML_GPU_FABRIC_STATE_* (nvml.h).
FABRIC_STATES = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}
_NOT_SUPPORTED, _COMPLETED = 0, 3


@dataclass(frozen=True)
class HealthField:
    """One field of the fabric health mask: (mask >> shift) & width.

    true_value: the value that reports the condition (NVML_GPU_FABRIC_HEALTH_MASK_*_TRUE);
    false_value: the value that reports it absent; 0 is always "not supported"; any other
    value is unknown to this agent. status / action: the verdict when the condition holds.
    """

    name: str
    shift: int
    width: int
    true_value: int
    false_value: int
    status: Status
    action: Remedy
    meaning: str


#: The v2 health mask (nvml.h NVML_GPU_FABRIC_HEALTH_MASK_{SHIFT,WIDTH}_*, nvidia-ml-py
#: 13). Degraded bandwidth and an unhealthy route mean the GPU cannot use its full fabric:
#: unhealthy, reboot (the driver re-registers the GPU with the fabric manager at boot);
#: route and access-timeout recovery are the fabric repairing itself: degraded, no action
#: (gpud reports each true field as an issue).
HEALTH_FIELDS: tuple[HealthField, ...] = (
    HealthField("degraded_bw", 0, 0x3, 1, 2, U, Remedy.REBOOT, "NVLink bandwidth degraded"),
    HealthField("route_recovery", 2, 0x3, 1, 2, D, Remedy.NONE, "route recovery in progress"),
    HealthField("route_unhealthy", 4, 0x3, 1, 2, U, Remedy.REBOOT, "fabric route unhealthy"),
    HealthField("access_timeout_recovery", 6, 0x3, 1, 2, D, Remedy.NONE, "access timeout recovery"),
)
#: NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_* (shift 8, width 0xf): 0 not
#: supported, 1 none, the rest name what is wrong.
INCORRECT_CONFIGURATION = {
    2: "incorrect_sysguid",
    3: "incorrect_chassis_sn",
    4: "no_partition",
    5: "insufficient_nvlinks",
    6: "incompatible_gpu_fw",
    7: "invalid_location",
    8: "gpu_state_invalid",
}
_CONFIG_SHIFT, _CONFIG_WIDTH = 8, 0xF


def decode_health_mask(mask: int) -> dict[str, str]:
    """Each health field's reading: "true", "false", "not_supported" or "unknown(<n>)";
    ``incorrect_configuration``: "none", "not_supported", a reason or "unknown(<n>)"."""
    out: dict[str, str] = {}
    for f in HEALTH_FIELDS:
        v = (mask >> f.shift) & f.width
        out[f.name] = {0: "not_supported", f.true_value: "true", f.false_value: "false"}.get(
            v, f"unknown({v})"
        )
    v = (mask >> _CONFIG_SHIFT) & _CONFIG_WIDTH
    out["incorrect_configuration"] = {0: "not_supported", 1: "none"}.get(
        v, INCORRECT_CONFIGURATION.get(v, f"unknown({v})")
    )
    return out


def _mask_checks(g: GpuSnapshot, mask: int, ev: dict[str, Any]) -> list[Check]:
    decoded = decode_health_mask(mask)
    out: list[Check] = []
    for f in HEALTH_FIELDS:
        reading = decoded[f.name]
        if reading == "true":
            text = f"GPU {g.index} fabric: {f.meaning}"
            out.append(Check("fabric", f.status, f.action, text, g.index, ev, f"fabric_{f.name}"))
        elif reading.startswith("unknown"):
            text = f"GPU {g.index} fabric health field {f.name} reads {reading}"
            out.append(Check("fabric", D, Remedy.NONE, text, g.index, ev, f"fabric_{f.name}"))
    config = decoded["incorrect_configuration"]
    if config not in ("none", "not_supported"):
        text = f"GPU {g.index} fabric configuration incorrect: {config}"
        kind = f"fabric_config:{config.split('(')[0]}"
        out.append(Check("fabric", U, Remedy.REBOOT, text, g.index, ev, kind))
    return out


def fabric_rule(g: GpuSnapshot, b: Any) -> list[Check]:
    """The GPU's NVSwitch fabric registration and health.

    State NOT_SUPPORTED -> healthy "not supported" (no NVSwitch fabric: never a fault);
    NOT_STARTED / IN_PROGRESS -> unhealthy + reboot (CUDA cannot start until the GPU is
    registered: the fabric manager never trained it); COMPLETED with a status other than
    NVML_SUCCESS -> unhealthy + reboot; then each health mask field (``HEALTH_FIELDS``,
    incorrect configuration -> unhealthy + reboot). Source: nvml.h
    nvmlDeviceGetGpuFabricInfoV; gpud fabric-manager component (state not completed,
    status not success and every true mask field are issues).
    """
    f: FabricInfo | None = g.fabric
    if f is None:
        return []
    state = FABRIC_STATES.get(f.state, f"unknown({f.state})")
    ev: dict[str, Any] = {"state": state, "status": f.status, "clique_id": f.clique_id}
    if f.health_mask is not None:
        ev["health_mask"] = f.health_mask
        ev["health"] = decode_health_mask(f.health_mask)
    if f.state == _NOT_SUPPORTED:
        text = f"GPU {g.index} fabric not supported (no NVSwitch fabric)"
        return [Check("fabric", H, Remedy.NONE, text, g.index, ev)]
    if f.state != _COMPLETED:
        text = f"GPU {g.index} fabric registration {state}: the GPU cannot use NVLink"
        return [Check("fabric", U, Remedy.REBOOT, text, g.index, ev, "fabric_state")]
    if f.status != 0:
        text = f"GPU {g.index} fabric registration failed (NVML status {f.status})"
        return [Check("fabric", U, Remedy.REBOOT, text, g.index, ev, "fabric_status")]
    out = _mask_checks(g, f.health_mask, ev) if f.health_mask is not None else []
    if not out:
        out.append(Check("fabric", H, Remedy.NONE, f"GPU {g.index} fabric healthy", g.index, ev))
    return out


# --- the fabric manager ------------------------------------------------------------------


#: fabricmanager.log lines that say the fabric failed. Patterns and sample lines: gpud
#: components/accelerator/nvidia/fabric-manager (e.g. "[Jul 23 2024 07:53:55] [ERROR]
#: [tid 841] detected NVSwitch fatal error 20034 on fid 0 on NVSwitch pci bus id
#: 00000000:86:00.0 physical id 3 port 33"). A fatal NVSwitch error or a topology that
#: does not match (a missing NVSwitch: the fabric manager aborts) -> unhealthy + reboot;
#: a non-fatal error or a multicast team failure -> degraded.
_GPUD_FM = "gpud components/accelerator/nvidia/fabric-manager"
FM_LOG_MATCHERS: tuple[LogRule, ...] = (
    LogRule(
        "fabric_manager:nvswitch_fatal",
        re.compile(r"detected NVSwitch fatal error (\d+)"),
        _GPUD_FM,
        "NVSwitch fatal error",
        U,
        Remedy.REBOOT,
    ),
    LogRule(
        "fabric_manager:topology_mismatch",
        re.compile(r"detected number of NVSwitches don't match with any supported system"),
        _GPUD_FM,
        "NVSwitch count matches no supported topology; fabric manager aborted",
        U,
        Remedy.REBOOT,
    ),
    LogRule(
        "fabric_manager:nvswitch_non_fatal",
        re.compile(r"detected NVSwitch non-fatal error (\d+)"),
        _GPUD_FM,
        "NVSwitch non-fatal error",
        D,
        Remedy.NONE,
    ),
    LogRule(
        "fabric_manager:multicast_team",
        re.compile(r"failed to find the GPU handle \d+ in the multicast team"),
        _GPUD_FM,
        "NVLink multicast team setup failed",
        D,
        Remedy.NONE,
    ),
)
#: "[Jul 23 2024 07:53:55]": the fabric manager's local time stamp.
_FM_TIME = re.compile(r"^\[(\w{3} \d{1,2} \d{4} \d{2}:\d{2}:\d{2})\]")


def match_fm_line(line: str) -> LogRule | None:
    """The first FM_LOG_MATCHERS entry a fabricmanager.log line matches, or None."""
    return first_found(FM_LOG_MATCHERS, line)


def fm_line_time(line: str) -> datetime | None:
    """The line's time stamp as a naive local datetime, or None without one."""
    found = _FM_TIME.match(line)
    if found is None:
        return None
    try:
        return datetime.strptime(found.group(1), "%b %d %Y %H:%M:%S")
    except ValueError:
        return None


@dataclass(frozen=True)
class FabricManagerView:
    """What the node said about its fabric manager.

    nvswitch_count: NVSwitch PCI functions found (None: could not look); service: the
    unit's state ("active", "inactive", "failed", "activating", ..., "not-found" when the
    unit is not installed; None when systemd could not be asked), service_error: why
    not; log_lines: this boot's fabricmanager.log lines that a matcher names.
    """

    nvswitch_count: int | None
    service: str | None = None
    service_error: str | None = None
    log_lines: tuple[str, ...] = ()


class FabricManagerHost(Protocol):
    """The node's fabric manager, read once per run (the seam tests replace)."""

    def view(self, nvswitch_by_nvml: bool) -> FabricManagerView:
        """The view; the service and log are read only where the machine has NVSwitches
        (``nvswitch_by_nvml``: a GPU reported a supported fabric state). Never raises."""
        ...


def fabric_present(probe: GpuProbe) -> bool:
    """Whether a GPU reported a supported fabric state (an NVSwitch fabric exists)."""
    return any(g.fabric is not None and g.fabric.state != _NOT_SUPPORTED for g in probe.gpus)


#: PCI class of an NVSwitch (Bridge, other: lspci "Bridge [0680]: NVIDIA Corporation").
_NVIDIA_VENDOR, _BRIDGE_OTHER_CLASS = "0x10de", "0x0680"
FM_UNIT = "nvidia-fabricmanager.service"
FM_LOG = "/var/log/fabricmanager.log"
#: systemctl answers in milliseconds; a systemd that does not answer in 5 s is stuck.
SYSTEMCTL_TIMEOUT_S = 5.0
_FM_LOG_TAIL_BYTES = 1 << 20

Runner = Callable[[list[str], float], "tuple[int, str]"]


class FileFabricManager:
    """The real machine: NVSwitches from sysfs, the unit from systemctl, the log file.

    pci_root: /sys/bus/pci/devices; log_path: /var/log/fabricmanager.log; run: runs a
    program (navarch.agent.deadline.run_tool); boot_time: this boot's start as a naive
    local datetime (the log's time stamps are local), None: every matching line counts.
    """

    def __init__(
        self,
        *,
        pci_root: str = "/sys/bus/pci/devices",
        log_path: str = FM_LOG,
        run: Runner | None = None,
        boot_time: datetime | None = None,
    ) -> None:
        from navarch.agent.deadline import run_tool

        self.pci_root = pci_root
        self.log_path = log_path
        self.run: Runner = run or run_tool
        self.boot_time = boot_time

    def nvswitch_count(self) -> int | None:
        """NVIDIA PCI functions of class bridge/other (NVSwitches); None when sysfs fails."""
        try:
            entries = os.listdir(self.pci_root)
        except OSError:
            return None
        count = 0
        for name in entries:
            base = Path(self.pci_root, name)
            try:
                vendor = (base / "vendor").read_text().strip()
                klass = (base / "class").read_text().strip()
            except OSError:
                continue
            if vendor == _NVIDIA_VENDOR and klass.startswith(_BRIDGE_OTHER_CLASS):
                count += 1
        return count

    def service(self) -> tuple[str | None, str | None]:
        """(state, error) of the unit from ``systemctl show``: LoadState=not-found reads
        "not-found", else ActiveState."""
        argv = ["systemctl", "show", "--property=LoadState,ActiveState", FM_UNIT]
        try:
            _, out = self.run(argv, SYSTEMCTL_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            return None, str(exc)
        props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        if props.get("LoadState") == "not-found":
            return "not-found", None
        state = props.get("ActiveState")
        return (state, None) if state else (None, f"systemctl said {out.strip()[:200]!r}")

    def log_lines(self) -> tuple[str, ...]:
        """This boot's matching lines of the log's last MiB (none when it cannot be read)."""
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(max(0, os.fstat(fh.fileno()).st_size - _FM_LOG_TAIL_BYTES))
                text = fh.read().decode(errors="replace")
        except OSError:
            return ()
        out: list[str] = []
        for line in text.splitlines():
            if match_fm_line(line) is None:
                continue
            at = fm_line_time(line)
            if self.boot_time is not None and at is not None and at < self.boot_time:
                continue
            out.append(line.strip()[:512])
        return tuple(out[-64:])

    def view(self, nvswitch_by_nvml: bool) -> FabricManagerView:
        """See FabricManagerHost.view."""
        count = self.nvswitch_count()
        if not nvswitch_by_nvml and not count:
            return FabricManagerView(count)
        state, error = self.service()
        return FabricManagerView(count, state, error, self.log_lines())


def _service_check(view: FabricManagerView) -> Check:
    ev: dict[str, Any] = {"unit": FM_UNIT, "state": view.service, "nvswitches": view.nvswitch_count}
    if view.service == "active":
        return Check("fabric_manager", H, Remedy.NONE, "fabric manager active", evidence=ev)
    if view.service is None:
        text = f"cannot ask systemd for {FM_UNIT}: {view.service_error}"
        return Check("fabric_manager", UK, Remedy.NONE, text, evidence=ev)
    if view.service == "not-found":
        text = f"{FM_UNIT} is not installed on an NVSwitch machine (node image)"
        return Check("fabric_manager", UK, Remedy.NONE, text, evidence=ev)
    text = f"fabric manager {view.service} on an NVSwitch machine: CUDA cannot use the GPUs"
    return Check(
        "fabric_manager",
        U,
        Remedy.REBOOT,
        text,
        evidence=ev,
        fault_kind="fabric_manager_inactive",
    )


def fabric_manager_checks(view: FabricManagerView | None, present: bool) -> list[Check]:
    """The fabric manager's checks: none where the machine has no NVSwitch.

    Service (systemd): active -> healthy; activating, inactive, failed, ... -> unhealthy +
    reboot (gpud: fabric manager not active on an NVSwitch system is unhealthy; NVIDIA
    Fabric Manager user guide: CUDA initialisation fails with "system not yet initialized"
    until it runs); not installed -> unknown (a setting of the image, not broken
    hardware); systemd unreachable -> unknown. Log: one check per matcher kind seen this
    boot (``FM_LOG_MATCHERS``), with the line count and the last line.
    """
    if view is None or not (present or view.nvswitch_count):
        return []
    out = [_service_check(view)]
    seen: dict[str, list[str]] = {}
    for line in view.log_lines:
        m = match_fm_line(line)
        if m is not None:
            seen.setdefault(m.kind, []).append(line)
    for m in FM_LOG_MATCHERS:
        lines = seen.get(m.kind)
        if lines:
            text = f"fabric manager log: {m.meaning} x{len(lines)}: {lines[-1]}"
            ev = {"lines": len(lines), "last": lines[-1], "log": FM_LOG}
            out.append(Check("fabric_manager", m.status, m.action, text, None, ev, m.kind))
    return out


def default_fabric_manager(backend: str, now: datetime) -> FabricManagerHost | None:
    """The real machine's fabric manager (FileFabricManager) for the backend named
    "nvml"; None for the fake one (a simulated node has no systemd to ask). Log lines
    count from this boot's start (/proc/uptime; all lines when unreadable)."""
    if backend != "nvml":
        return None
    try:
        with open("/proc/uptime") as fh:
            uptime_s = float(fh.read().split()[0])
        boot: datetime | None = datetime.fromtimestamp(now.timestamp() - uptime_s)
    except (OSError, ValueError, IndexError):
        boot = None
    return FileFabricManager(boot_time=boot)

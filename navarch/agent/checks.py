"""Health checks: pure functions from a GPU probe, XID events and counter baselines to Checks.

Each check yields ``Check(name, status, action, message, gpu_index, evidence)``. Status
order (worst wins): healthy < degraded < unknown < unhealthy. ``unknown`` ranks above
degraded because it means "the agent cannot vouch for this node", but below unhealthy
because doubt never terminates (DESIGN safety rule 2). Thresholds and their sources are
in each function's docstring (gpu-health.md §1).

``fault_key`` marks a reboot-fixable fault: the report builder counts, per key, the
boots in which it was seen and escalates to ``replace`` when it comes back after two
reboots (gpud ``DefaultRebootThreshold = 2``).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from navarch.agent.gpu import GpuProbe, GpuSnapshot, ProbeErrorKind
from navarch.agent.kernel_log import XidEvent
from navarch.xid import Action, Severity, recovery_action

__all__ = [
    "Status",
    "Check",
    "CounterSample",
    "probe_checks",
    "gpu_checks",
    "xid_checks",
    "worst_status",
    "PCIE_REPLAY_PER_LANE_PER_MIN",
]


class Status(enum.StrEnum):
    """Health of one check or of the node; ordered by ``rank``."""

    HEALTHY = "healthy"
    DEGRADED = "degraded"
    UNKNOWN = "unknown"
    UNHEALTHY = "unhealthy"

    @property
    def rank(self) -> int:
        return _STATUS_RANK[self]


_STATUS_RANK = {Status.HEALTHY: 0, Status.DEGRADED: 1, Status.UNKNOWN: 2, Status.UNHEALTHY: 3}


def worst_status(statuses: Iterable[Status]) -> Status:
    """Worst status of the iterable (healthy for an empty one)."""
    return max(statuses, key=lambda s: s.rank, default=Status.HEALTHY)


@dataclass(frozen=True)
class Check:
    """One finding. evidence: JSON-able facts; fault_key: set for reboot-fixable faults."""

    name: str
    status: Status
    action: Action
    message: str
    gpu_index: int | None = None
    evidence: Mapping[str, Any] = field(default_factory=dict)
    fault_key: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The check as the report schema's checks[] item."""
        return {
            "name": self.name,
            "status": self.status.value,
            "action": self.action.value,
            "message": self.message[:1024],
            "gpu_index": self.gpu_index,
            "evidence": dict(self.evidence),
        }


@dataclass(frozen=True)
class CounterSample:
    """A cumulative counter's value at a time (seconds since the epoch) in a boot."""

    value: int
    at_s: float
    boot_id: str


H, D, UK, U = Status.HEALTHY, Status.DEGRADED, Status.UNKNOWN, Status.UNHEALTHY

#: DCGM MonitorPcie per-lane replay limit per minute by PCIe generation
#: (1e-12 BER x line rate x 60 s).
PCIE_REPLAY_PER_LANE_PER_MIN = {1: 0.15, 2: 0.3, 3: 0.48, 4: 0.96, 5: 1.92, 6: 3.84}
#: NVML clock event bits that mean hardware trouble: HwSlowdown, HwThermalSlowdown,
#: HwPowerBrakeSlowdown (nvml.h; gpu-health.md row 10).
HW_SLOWDOWN_BITS = {
    0x8: "hw_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
}
#: gpud: HW slowdown in >= 6 of the last 10 samples -> unhealthy (hardware inspection).
HW_SLOWDOWN_WINDOW = 10
HW_SLOWDOWN_UNHEALTHY = 6
#: AzNHC check_gpu_ecc: DRAM correctable > 20,000,000 -> fail (we degrade).
ECC_CORRECTED_LIMIT = 20_000_000
#: DCGM_LIMIT_MAX_ROW_REMAP_UNCORRECTABLE
REMAP_UNCORRECTABLE_LIMIT = 512
#: DCGM_LIMIT_MAX_RETIRED_PAGES (SBE + DBE)
RETIRED_PAGES_LIMIT = 63
#: DCGM_LIMIT_MAX_NVLINK_CRC_ERROR (per second)
NVLINK_CRC_PER_S_LIMIT = 100.0
#: Fallback when the GPU does not report its thresholds (Meta GCM example threshold).
FALLBACK_DEGRADED_C = 85.0

_INIT = {
    ProbeErrorKind.LIBRARY_NOT_FOUND: (
        UK,
        Action.NONE,
        "NVML library not found: node image lacks the NVIDIA driver (misconfigured)",
    ),
    ProbeErrorKind.NO_PERMISSION: (
        UK,
        Action.NONE,
        "no permission to use NVML: run the agent as root (agent misconfigured, not a node fault)",
    ),
    ProbeErrorKind.AGENT_ERROR: (
        UK,
        Action.NONE,
        "the agent failed while reading GPUs (agent bug, not a node fault)",
    ),
    ProbeErrorKind.DRIVER_NOT_LOADED: (U, Action.REBOOT, "NVIDIA kernel driver not loaded"),
    ProbeErrorKind.LIB_RM_VERSION_MISMATCH: (
        U,
        Action.REBOOT,
        "NVML library / kernel driver version mismatch (driver upgraded without reboot)",
    ),
}


def probe_checks(probe: GpuProbe, gpus_per_node: int | None) -> list[Check]:
    """Node-level checks: NVML usable, GPU count, handles.

    - NVML init (gpu-health.md §4 classification): LibraryNotFound -> unknown (image
      misconfigured); NoPermission -> unknown (agent misconfigured); DriverNotLoaded /
      LibRmVersionMismatch -> unhealthy + reboot (gpud); anything else -> unhealthy + reboot.
    - GPU count (gpud gpu-counts, GCM check_gpu_num, AzNHC check_gpu_count): fewer than
      gpus_per_node -> unhealthy + reboot (a GPU fell off the bus or failed init); more ->
      degraded (the pool's gpus_per_node is wrong). gpus_per_node None or 0 skips it.
    - Handle failures (gpud InitError): unhealthy + reboot.
    """
    checks: list[Check] = []
    err = probe.init_error
    if err is not None:
        status, action, text = _INIT.get(err.kind, (U, Action.REBOOT, "NVML failed to initialise"))
        key = f"nvml_init:{err.kind.value}" if status is U else None
        checks.append(
            Check(
                "nvml",
                status,
                action,
                f"{text}: {err.message}",
                evidence={"error": err.kind.value, "code": err.code, "backend": probe.backend},
                fault_key=key,
            )
        )
        return checks
    checks.append(
        Check(
            "nvml",
            H,
            Action.NONE,
            f"{probe.backend} backend ready",
            evidence={"backend": probe.backend, "driver_version": probe.driver_version},
        )
    )
    count = probe.device_count if probe.device_count is not None else len(probe.gpus)
    ev = {"found": count, "expected": gpus_per_node}
    if not gpus_per_node:
        checks.append(
            Check(
                "gpu_count",
                H,
                Action.NONE,
                f"{count} GPUs (no expected count configured)",
                evidence=ev,
            )
        )
    elif count < gpus_per_node:
        checks.append(
            Check(
                "gpu_count",
                U,
                Action.REBOOT,
                f"{count} of {gpus_per_node} GPUs visible",
                evidence=ev,
                fault_key="gpu_count",
            )
        )
    elif count > gpus_per_node:
        checks.append(
            Check(
                "gpu_count",
                D,
                Action.NONE,
                f"{count} GPUs visible but the pool expects {gpus_per_node}",
                evidence=ev,
            )
        )
    else:
        checks.append(Check("gpu_count", H, Action.NONE, f"{count} GPUs as expected", evidence=ev))
    for index, message in probe.handle_errors:
        checks.append(
            Check(
                "gpu_handle",
                U,
                Action.REBOOT,
                f"cannot get a handle for GPU {index}: {message}",
                gpu_index=index,
                evidence={"error": message},
                fault_key="gpu_handle",
            )
        )
    return checks


def _rate_per_s(
    cur: int | None, base: CounterSample | None, now_s: float, boot_id: str
) -> float | None:
    """Counter rate since the baseline; None when no usable baseline (first run, new boot, reset)."""
    if cur is None or base is None or base.boot_id != boot_id:
        return None
    elapsed = now_s - base.at_s
    if elapsed <= 0 or cur < base.value:
        return None
    return (cur - base.value) / elapsed


def _delta(cur: int | None, base: CounterSample | None, boot_id: str) -> int | None:
    if cur is None or base is None or base.boot_id != boot_id or cur < base.value:
        return None
    return cur - base.value


def gpu_checks(
    g: GpuSnapshot,
    *,
    baselines: Mapping[str, CounterSample],
    slowdown_history: Sequence[bool],
    now_s: float,
    boot_id: str,
) -> list[Check]:
    """All per-GPU checks for one snapshot (gpu-health.md §1 rows 4-20).

    baselines: counter name -> sample from the previous run ("pcie_replay", "nvlink_replay",
    "nvlink_recovery", "nvlink_crc_flit", "nvlink_crc_data"); slowdown_history: earlier
    runs' HW-slowdown flags, oldest first. Rules and sources are in the comments below.
    """
    i = g.index
    out: list[Check] = []

    def add(
        name: str,
        status: Status,
        action: Action,
        message: str,
        fault_key: str | None = None,
        **ev: Any,
    ) -> None:
        out.append(Check(name, status, action, message, i, ev, fault_key))

    # Row 4: GpuIsLost / ResetRequired from any call (gpud ErrGPULost -> REBOOT_SYSTEM).
    if g.lost:
        add(
            "gpu_lost",
            U,
            Action.REBOOT,
            f"GPU {i} is lost (fallen off the bus / not responding)",
            "gpu_lost",
            uuid=g.uuid,
            pci_bus_id=g.pci_bus_id,
        )
        return out
    if g.reset_required:
        add(
            "gpu_lost",
            U,
            Action.RESET_GPU,
            f"GPU {i} requires a reset",
            "gpu_reset_required",
            uuid=g.uuid,
        )
        return out

    # Readings (DCGM: power unreadable -> WARN).
    if g.unreadable:
        add(
            "readings",
            D,
            Action.NONE,
            f"GPU {i}: unreadable metrics: {', '.join(sorted(g.unreadable))}",
            unreadable=dict(g.unreadable),
        )
    else:
        add(
            "readings",
            H,
            Action.NONE,
            f"GPU {i}: all metrics readable",
            not_supported=list(g.not_supported),
        )

    # Row 11: temperature vs the device's own thresholds (gpud: > GPU_MAX -> degraded).
    # At or above the shutdown threshold the driver powers the GPU off: unhealthy, and a
    # cooling fault is not fixed by a reboot -> replace.
    t = g.temperature_c
    if t is None:
        add("temperature", H, Action.NONE, f"GPU {i}: temperature not read", supported=False)
    else:
        ev = {
            "temperature_c": t,
            "slowdown_c": g.temperature_slowdown_c,
            "shutdown_c": g.temperature_shutdown_c,
            "gpu_max_c": g.temperature_gpu_max_c,
        }
        limits = [x for x in (g.temperature_gpu_max_c, g.temperature_slowdown_c) if x is not None]
        degrade_at = min(limits) if limits else FALLBACK_DEGRADED_C
        if g.temperature_shutdown_c is not None and t >= g.temperature_shutdown_c:
            add(
                "temperature",
                U,
                Action.REPLACE,
                f"GPU {i} at {t:.0f} C, at or above its shutdown threshold",
                **ev,
            )
        elif t > degrade_at:
            add(
                "temperature",
                D,
                Action.NONE,
                f"GPU {i} at {t:.0f} C, above its {degrade_at:.0f} C limit",
                **ev,
            )
        else:
            add("temperature", H, Action.NONE, f"GPU {i} at {t:.0f} C", **ev)

    # Row 12: power. Enforced limit below the default -> capped (gpu-health.md suggestion).
    if (
        g.power_limit_w is not None
        and g.power_default_limit_w is not None
        and g.power_limit_w < g.power_default_limit_w
    ):
        add(
            "power",
            D,
            Action.NONE,
            f"GPU {i} power limit {g.power_limit_w:.0f} W below default {g.power_default_limit_w:.0f} W",
            power_w=g.power_w,
            power_limit_w=g.power_limit_w,
            power_default_limit_w=g.power_default_limit_w,
        )

    # Row 5: driver recovery action (NVML field 230; DCGM MonitorGpuRecoveryAction).
    if g.recovery_action is not None:
        name, sev, act = recovery_action(g.recovery_action)
        status = {Severity.IGNORE: H, Severity.WARNING: D, Severity.FATAL: U}[sev]
        add(
            "recovery_action",
            status,
            act,
            f"GPU {i} driver recovery action {name}",
            f"recovery_action:{name}"
            if status is U and act in (Action.RESET_GPU, Action.REBOOT)
            else None,
            value=g.recovery_action,
        )

    # Row 8: remapped rows (gpud, DCGM, AzNHC). pending -> reset activates the remap;
    # failure -> RMA criterion (NVIDIA memory error management doc).
    if g.remapped_rows_failure:
        add(
            "remapped_rows",
            U,
            Action.REPLACE,
            f"GPU {i} row remapping failed (RMA)",
            pending=g.remapped_rows_pending,
            failure=True,
            uncorrectable=g.remapped_rows_uncorrected,
        )
    elif g.remapped_rows_pending:
        add(
            "remapped_rows",
            U,
            Action.RESET_GPU,
            f"GPU {i} has a row remap pending: reset to activate",
            "remapped_rows_pending",
            pending=True,
            failure=False,
            uncorrectable=g.remapped_rows_uncorrected,
        )
    elif (g.remapped_rows_uncorrected or 0) >= REMAP_UNCORRECTABLE_LIMIT:
        add(
            "remapped_rows",
            D,
            Action.NONE,
            f"GPU {i} has {g.remapped_rows_uncorrected} rows remapped for uncorrectable errors",
            uncorrectable=g.remapped_rows_uncorrected,
        )
    elif g.remapped_rows_pending is not None:
        add(
            "remapped_rows",
            H,
            Action.NONE,
            f"GPU {i} row remapping ok",
            corrected=g.remapped_rows_corrected,
            uncorrectable=g.remapped_rows_uncorrected,
        )

    # Row 9: retired pages, pre-Ampere (DCGM DCGM_LIMIT_MAX_RETIRED_PAGES; pending -> WARN).
    if g.retired_pages_sbe is not None or g.retired_pages_dbe is not None:
        total = (g.retired_pages_sbe or 0) + (g.retired_pages_dbe or 0)
        ev = {
            "sbe": g.retired_pages_sbe,
            "dbe": g.retired_pages_dbe,
            "pending": g.retired_pages_pending,
        }
        if total >= RETIRED_PAGES_LIMIT:
            add(
                "retired_pages",
                U,
                Action.REPLACE,
                f"GPU {i} has {total} retired pages (limit {RETIRED_PAGES_LIMIT})",
                **ev,
            )
        elif g.retired_pages_pending:
            add("retired_pages", D, Action.REBOOT, f"GPU {i} has a page retirement pending", **ev)
        else:
            add("retired_pages", H, Action.NONE, f"GPU {i} {total} retired pages", **ev)

    # Row 6: volatile uncorrectable ECC (DCGM MonitorMemVolatileDbes > 0 -> FAIL). When the
    # driver says no recovery is needed and no remap is pending, the error was contained:
    # degraded (watch), per gpu-health.md's recommendation.
    if g.ecc_uncorrected_volatile:
        contained = g.recovery_action == 0 and not g.remapped_rows_pending
        if contained:
            add(
                "ecc",
                D,
                Action.NONE,
                f"GPU {i} {g.ecc_uncorrected_volatile} uncorrectable ECC errors (contained)",
                uncorrected_volatile=g.ecc_uncorrected_volatile,
                corrected_volatile=g.ecc_corrected_volatile,
            )
        else:
            add(
                "ecc",
                U,
                Action.RESET_GPU,
                f"GPU {i} {g.ecc_uncorrected_volatile} uncorrectable ECC errors this boot",
                "ecc_uncorrected",
                uncorrected_volatile=g.ecc_uncorrected_volatile,
                corrected_volatile=g.ecc_corrected_volatile,
            )
    elif (g.ecc_corrected_volatile or 0) > ECC_CORRECTED_LIMIT:
        add(
            "ecc",
            D,
            Action.NONE,
            f"GPU {i} {g.ecc_corrected_volatile} correctable ECC errors (AzNHC limit 20M)",
            corrected_volatile=g.ecc_corrected_volatile,
        )
    elif g.ecc_uncorrected_volatile is not None:
        add(
            "ecc",
            H,
            Action.NONE,
            f"GPU {i} no uncorrectable ECC errors",
            uncorrected_volatile=0,
            corrected_volatile=g.ecc_corrected_volatile,
        )

    # Row 20: ECC mode. Off on a datacenter GPU, or a pending change -> degraded.
    if g.ecc_mode_current is not None:
        if not g.ecc_mode_current:
            add(
                "ecc_mode",
                D,
                Action.NONE,
                f"GPU {i} ECC is disabled",
                current=False,
                pending=g.ecc_mode_pending,
            )
        elif g.ecc_mode_pending is not None and g.ecc_mode_pending != g.ecc_mode_current:
            add(
                "ecc_mode",
                D,
                Action.REBOOT,
                f"GPU {i} ECC mode change pending a reboot",
                current=g.ecc_mode_current,
                pending=g.ecc_mode_pending,
            )

    # Row 10: clock event reasons; HW slowdown sustained >= 6 of 10 samples -> unhealthy (gpud).
    if g.clock_event_reasons is not None:
        bits = [name for bit, name in HW_SLOWDOWN_BITS.items() if g.clock_event_reasons & bit]
        if bits:
            recent = [*slowdown_history[-(HW_SLOWDOWN_WINDOW - 1) :], True]
            if sum(recent) >= HW_SLOWDOWN_UNHEALTHY:
                add(
                    "clock_events",
                    U,
                    Action.REPLACE,
                    f"GPU {i} sustained hardware slowdown ({sum(recent)} of last {len(recent)} runs)",
                    reasons=bits,
                    mask=g.clock_event_reasons,
                )
            else:
                add(
                    "clock_events",
                    D,
                    Action.NONE,
                    f"GPU {i} hardware slowdown: {', '.join(bits)}",
                    reasons=bits,
                    mask=g.clock_event_reasons,
                )

    # Row 13: PCIe link width (not gen: gen drops at idle for power saving).
    if (
        g.pcie_link_width is not None
        and g.pcie_link_width_max is not None
        and g.pcie_link_width < g.pcie_link_width_max
    ):
        add(
            "pcie_link",
            D,
            Action.NONE,
            f"GPU {i} PCIe link x{g.pcie_link_width} of x{g.pcie_link_width_max}",
            width=g.pcie_link_width,
            width_max=g.pcie_link_width_max,
        )

    # Row 14: PCIe replay rate (DCGM MonitorPcie): replays/min > ceil(per-lane limit x lanes).
    rate = _rate_per_s(g.pcie_replay_count, baselines.get("pcie_replay"), now_s, boot_id)
    if rate is not None and g.pcie_link_gen_max:
        lanes = g.pcie_link_width or g.pcie_link_width_max or 16
        limit_per_min = math.ceil(
            PCIE_REPLAY_PER_LANE_PER_MIN.get(g.pcie_link_gen_max, 1.92) * lanes
        )
        if rate * 60 > limit_per_min:
            add(
                "pcie_replay",
                D,
                Action.NONE,
                f"GPU {i} PCIe replays {rate * 60:.1f}/min above {limit_per_min}/min",
                replays_per_min=round(rate * 60, 3),
                limit_per_min=limit_per_min,
            )

    # Rows 15-16: NVLink state (DCGM: any link down -> FAIL) and error counters
    # (DCGM MonitorNVLink4Fields: replay/recovery delta >= 1 -> FAIL, CRC delta -> WARN,
    # CRC >= 100/s -> FAIL).
    if g.nvlink_active is not None:
        down = [n for n, up in enumerate(g.nvlink_active) if not up]
        if down:
            add(
                "nvlink",
                U,
                Action.REBOOT,
                f"GPU {i} NVLink links down: {down}",
                "nvlink_down",
                links_down=down,
                links=len(g.nvlink_active),
            )
        if g.nvlink_errors is not None:
            deltas = {
                k: _delta(v, baselines.get(f"nvlink_{k}"), boot_id)
                for k, v in g.nvlink_errors.items()
            }
            crc_rate = sum(
                r
                for r in (
                    _rate_per_s(
                        g.nvlink_errors.get(k), baselines.get(f"nvlink_{k}"), now_s, boot_id
                    )
                    for k in ("crc_flit", "crc_data")
                )
                if r is not None
            )
            hard = {k: d for k, d in deltas.items() if k in ("replay", "recovery") and d}
            crc = sum(d for k, d in deltas.items() if k.startswith("crc") and d)
            if hard or crc_rate >= NVLINK_CRC_PER_S_LIMIT:
                add(
                    "nvlink_errors",
                    U,
                    Action.RESET_GPU,
                    f"GPU {i} new NVLink errors: {hard or {'crc_per_s': crc_rate}}",
                    "nvlink_errors",
                    deltas=deltas,
                    crc_per_s=round(crc_rate, 3),
                )
            elif crc:
                add(
                    "nvlink_errors",
                    D,
                    Action.NONE,
                    f"GPU {i} {crc} new NVLink CRC errors",
                    deltas=deltas,
                )
        if not down:
            add(
                "nvlink",
                H,
                Action.NONE,
                f"GPU {i} {len(g.nvlink_active)} NVLink links up",
                links=len(g.nvlink_active),
            )

    # Row 18: persistence mode (DCGM diag L1).
    if g.persistence_mode is False:
        add(
            "persistence_mode",
            D,
            Action.NONE,
            f"GPU {i} persistence mode disabled (enable nvidia-persistenced)",
        )
    # Row 19: InfoROM (DCGM INFOROM watch -> WARN).
    if g.inforom_valid is False:
        add("inforom", D, Action.NONE, f"GPU {i} InfoROM is corrupted")
    return out


def xid_checks(events: Sequence[XidEvent], bdf_to_index: Mapping[str, int]) -> list[Check]:
    """One check per (kind, code, PCI bus) among this boot's latched XID / SXid events.

    Severity (navarch.xid, NVIDIA XID catalogue): fatal -> unhealthy, warning -> degraded,
    ignore -> healthy with action none (the application, not the node, needs a restart).
    Reboot-fixable fatal events carry fault_key "<kind>:<code>" for the recurrence rule.
    """
    groups: dict[tuple[str, int, str], list[XidEvent]] = {}
    for ev in events:
        groups.setdefault((ev.kind, ev.code, ev.pci_bus_id), []).append(ev)
    out: list[Check] = []
    for (kind, code, bdf), evs in list(groups.items())[:128]:
        info = max((e.info for e in evs), key=lambda x: (x.severity.rank, x.action.rank))
        status = {Severity.IGNORE: H, Severity.WARNING: D, Severity.FATAL: U}[info.severity]
        action = Action.NONE if info.severity is Severity.IGNORE else info.action
        count = sum(e.count for e in evs)
        label = "SXid" if kind == "sxid" else "XID"
        key = f"{kind}:{code}" if info.severity is Severity.FATAL and info.reboot_fixable else None
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
                key,
            )
        )
    if not out:
        out.append(Check("xid", H, Action.NONE, "no XID events this boot"))
    return out

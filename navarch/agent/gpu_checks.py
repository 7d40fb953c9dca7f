"""Per-GPU check components, gpud-style: ``GPU_LOST`` (the gate), then the table
``GPU_CHECKS`` of small named ``GpuCheck`` units, each with the readings it needs, a pure
``evaluate(gpu, baselines)`` and its rule and source in its docstring; ``gpu_checks`` is the
loop over the table (evaluated by navarch.agent.runner after the node checks of
navarch.agent.checks). Thresholds and their sources are in each rule's docstring
(gpu-health.md §1).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from navarch.agent.checks import SEVERITY_STATUS, Check, CounterSample
from navarch.agent.fabric import fabric_rule
from navarch.agent.gpu import GpuSnapshot
from navarch.report.health import Remedy, Status
from navarch.report.xid import recovery_action

__all__ = [
    "Baselines",
    "GpuCheck",
    "GpuComponent",
    "GPU_CHECKS",
    "GPU_LOST",
    "gpu_checks",
    "hw_slowdown",
    "HW_SLOWDOWN_WINDOW",
    "PCIE_REPLAY_PER_LANE_PER_MIN",
]

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

_CRC = ("crc_flit", "crc_data")


# --- per-GPU check components ----------------------------------------------------------


@dataclass(frozen=True)
class Baselines:
    """What one GPU's checks know besides its snapshot: the previous run's counters.

    counters: counter name -> sample from the previous run ("pcie_replay", "nvlink_replay",
    "nvlink_recovery", "nvlink_crc_flit", "nvlink_crc_data"); a sample from another boot is
    unusable (volatile counters reset at boot). slowdown_history: earlier runs' HW-slowdown
    flags in this boot, oldest first. now_s: this run's time, seconds since the epoch.
    """

    counters: Mapping[str, CounterSample]
    slowdown_history: Sequence[bool]
    now_s: float
    boot_id: str

    def rate_per_s(self, counter: str, cur: int | None) -> float | None:
        """Counter rate since the baseline; None without a usable one (first run, new boot,
        counter reset)."""
        base = self.counters.get(counter)
        if cur is None or base is None or base.boot_id != self.boot_id:
            return None
        elapsed = self.now_s - base.at_s
        if elapsed <= 0 or cur < base.value:
            return None
        return (cur - base.value) / elapsed

    def delta(self, counter: str, cur: int | None) -> int | None:
        """Counter increase since the baseline; None without a usable one."""
        base = self.counters.get(counter)
        if cur is None or base is None or base.boot_id != self.boot_id or cur < base.value:
            return None
        return cur - base.value


@runtime_checkable
class GpuCheck(Protocol):
    """One per-GPU health check component (gpud ``components/`` shape).

    The agent evaluates every component of ``GPU_CHECKS`` in order for every GPU that is
    neither lost nor waiting for a reset, and concatenates what they return. This is the
    extension point for agent-side checks: a third-party check is one more entry.

    - ``name``: the component's name (usually the name of the checks it yields).
    - ``readings``: the ``GpuSnapshot`` fields it reads (documentation and tests).
    - ``evaluate(gpu, baselines)``: pure (no I/O, no clock: the time is in baselines);
      returns zero or more ``Check``s with ``gpu_index = gpu.index``; must not raise for
      a ``None`` reading (None means "not read", never a fault).
    """

    @property
    def name(self) -> str: ...

    @property
    def readings(self) -> tuple[str, ...]: ...

    def evaluate(self, gpu: GpuSnapshot, baselines: Baselines) -> list[Check]: ...


Rule = Callable[[GpuSnapshot, Baselines], list[Check]]


@dataclass(frozen=True)
class GpuComponent:
    """A ``GpuCheck`` made of a pure rule function; the rule's docstring is its source."""

    name: str
    readings: tuple[str, ...]
    rule: Rule

    def evaluate(self, gpu: GpuSnapshot, baselines: Baselines) -> list[Check]:
        """The rule's checks for one GPU."""
        return self.rule(gpu, baselines)

    @property
    def source(self) -> str:
        """The rule's docstring: what it checks, thresholds and where they come from."""
        import inspect  # only docs and tests ask; the agent's start-up does not pay for it

        return inspect.getdoc(self.rule) or ""


def _check(
    g: GpuSnapshot,
    name: str,
    status: Status,
    action: Remedy,
    message: str,
    fault_kind: str | None = None,
    **evidence: Any,
) -> Check:
    return Check(name, status, action, message, g.index, evidence, fault_kind)


def _gpu_lost(g: GpuSnapshot, b: Baselines) -> list[Check]:
    """GpuIsLost from any call -> unhealthy + reboot; ResetRequired -> unhealthy + reset.

    Source: gpu-health.md row 4; gpud ErrGPULost -> REBOOT_SYSTEM.
    """
    i = g.index
    if g.lost:
        return [
            _check(
                g,
                "gpu_lost",
                U,
                Remedy.REBOOT,
                f"GPU {i} is lost (fallen off the bus / not responding)",
                "gpu_lost",
                uuid=g.uuid,
                pci_bus_id=g.pci_bus_id,
            )
        ]
    if g.reset_required:
        return [
            _check(
                g,
                "gpu_lost",
                U,
                Remedy.RESET_GPU,
                f"GPU {i} requires a reset",
                "gpu_reset_required",
                uuid=g.uuid,
            )
        ]
    return []


#: Readings NVML gives per MIG instance, not for the whole GPU, while MIG mode is on
#: (NVIDIA MIG user guide, "Device monitoring": utilization and processes are per instance).
MIG_NOT_APPLICABLE = ("utilization_pct", "process_count")


def _readings(g: GpuSnapshot, b: Baselines) -> list[Check]:
    """A metric that could not be read (not "not supported") -> degraded; under MIG the
    readings of ``MIG_NOT_APPLICABLE`` are left to the "mig" check, which says so.

    Source: DCGM (a blank power reading is a WARN).
    """
    i = g.index
    unreadable = {
        k: v for k, v in g.unreadable.items() if not (g.mig_current and k in MIG_NOT_APPLICABLE)
    }
    if unreadable:
        return [
            _check(
                g,
                "readings",
                D,
                Remedy.NONE,
                f"GPU {i}: unreadable metrics: {', '.join(sorted(unreadable))}",
                unreadable=dict(unreadable),
            )
        ]
    return [
        _check(
            g,
            "readings",
            H,
            Remedy.NONE,
            f"GPU {i}: all metrics readable",
            not_supported=list(g.not_supported),
        )
    ]


def _temperature(g: GpuSnapshot, b: Baselines) -> list[Check]:
    """Above the device's GPU_MAX or SLOWDOWN threshold (85 C if unknown) -> degraded;
    at or above its SHUTDOWN threshold -> unhealthy + replace (the driver powers the GPU
    off, and a cooling fault is not fixed by a reboot).

    Source: gpu-health.md row 11; gpud (> GPU_MAX degraded); 85 C fallback from Meta GCM;
    replace at shutdown is navarch's choice.
    """
    i, t = g.index, g.temperature_c
    if t is None:
        return [
            _check(
                g, "temperature", H, Remedy.NONE, f"GPU {i}: temperature not read", supported=False
            )
        ]
    ev: dict[str, Any] = {
        "temperature_c": t,
        "slowdown_c": g.temperature_slowdown_c,
        "shutdown_c": g.temperature_shutdown_c,
        "gpu_max_c": g.temperature_gpu_max_c,
    }
    limits = [x for x in (g.temperature_gpu_max_c, g.temperature_slowdown_c) if x is not None]
    degrade_at = min(limits) if limits else FALLBACK_DEGRADED_C
    if g.temperature_shutdown_c is not None and t >= g.temperature_shutdown_c:
        return [
            _check(
                g,
                "temperature",
                U,
                Remedy.REPLACE,
                f"GPU {i} at {t:.0f} C, at or above its shutdown threshold",
                "thermal",
                **ev,
            )
        ]
    if t > degrade_at:
        return [
            _check(
                g,
                "temperature",
                D,
                Remedy.NONE,
                f"GPU {i} at {t:.0f} C, above its {degrade_at:.0f} C limit",
                **ev,
            )
        ]
    return [_check(g, "temperature", H, Remedy.NONE, f"GPU {i} at {t:.0f} C", **ev)]


def _power(g: GpuSnapshot, b: Baselines) -> list[Check]:
    """Enforced power limit below the default limit (the GPU is capped) -> degraded.

    Source: gpu-health.md row 12.
    """
    limit, default = g.power_limit_w, g.power_default_limit_w
    if limit is None or default is None or limit >= default:
        return []
    return [
        _check(
            g,
            "power",
            D,
            Remedy.NONE,
            f"GPU {g.index} power limit {limit:.0f} W below default {default:.0f} W",
            power_w=g.power_w,
            power_limit_w=limit,
            power_default_limit_w=default,
        )
    ]


def _recovery_action(g: GpuSnapshot, b: Baselines) -> list[Check]:
    """Driver recovery action (NVML field 230): 0 NONE healthy, 3 DRAIN_P2P degraded,
    1/2/4/6/7 unhealthy with the catalogue's action (fault kind
    ``recovery_action:<name>``).

    Source: gpu-health.md row 5; DCGM MonitorGpuRecoveryAction; navarch.report.xid.recovery_action.
    """
    if g.recovery_action is None:
        return []
    name, sev, act = recovery_action(g.recovery_action)
    status = SEVERITY_STATUS[sev]
    return [
        _check(
            g,
            "recovery_action",
            status,
            act,
            f"GPU {g.index} driver recovery action {name}",
            f"recovery_action:{name.lower()}",
            value=g.recovery_action,
        )
    ]


def _remapped_rows(g: GpuSnapshot, b: Baselines) -> list[Check]:
    """Row remapping failed -> unhealthy + replace (RMA criterion); a remap pending ->
    unhealthy + reset (a reset activates it); >= 512 rows remapped for uncorrectable
    errors -> degraded.

    Source: gpu-health.md row 8; NVIDIA memory error management doc; gpud; DCGM
    (DCGM_LIMIT_MAX_ROW_REMAP_UNCORRECTABLE); AzNHC.
    """
    i = g.index
    if g.remapped_rows_failure:
        return [
            _check(
                g,
                "remapped_rows",
                U,
                Remedy.REPLACE,
                f"GPU {i} row remapping failed (RMA)",
                pending=g.remapped_rows_pending,
                failure=True,
                uncorrectable=g.remapped_rows_uncorrected,
            )
        ]
    if g.remapped_rows_pending:
        return [
            _check(
                g,
                "remapped_rows",
                U,
                Remedy.RESET_GPU,
                f"GPU {i} has a row remap pending: reset to activate",
                "remapped_rows_pending",
                pending=True,
                failure=False,
                uncorrectable=g.remapped_rows_uncorrected,
            )
        ]
    if (g.remapped_rows_uncorrected or 0) >= REMAP_UNCORRECTABLE_LIMIT:
        return [
            _check(
                g,
                "remapped_rows",
                D,
                Remedy.NONE,
                f"GPU {i} has {g.remapped_rows_uncorrected} rows remapped for uncorrectable errors",
                uncorrectable=g.remapped_rows_uncorrected,
            )
        ]
    if g.remapped_rows_pending is None:
        return []
    return [
        _check(
            g,
            "remapped_rows",
            H,
            Remedy.NONE,
            f"GPU {i} row remapping ok",
            corrected=g.remapped_rows_corrected,
            uncorrectable=g.remapped_rows_uncorrected,
        )
    ]


def _retired_pages(g: GpuSnapshot, b: Baselines) -> list[Check]:
    """Pre-Ampere page retirement: SBE + DBE >= 63 -> unhealthy + replace; a retirement
    pending -> degraded + reboot.

    Source: gpu-health.md row 9; DCGM DCGM_LIMIT_MAX_RETIRED_PAGES (pending -> WARN).
    """
    if g.retired_pages_sbe is None and g.retired_pages_dbe is None:
        return []
    i = g.index
    total = (g.retired_pages_sbe or 0) + (g.retired_pages_dbe or 0)
    ev: dict[str, Any] = {
        "sbe": g.retired_pages_sbe,
        "dbe": g.retired_pages_dbe,
        "pending": g.retired_pages_pending,
    }
    if total >= RETIRED_PAGES_LIMIT:
        text = f"GPU {i} has {total} retired pages (limit {RETIRED_PAGES_LIMIT})"
        return [_check(g, "retired_pages", U, Remedy.REPLACE, text, **ev)]
    if g.retired_pages_pending:
        text = f"GPU {i} has a page retirement pending"
        return [_check(g, "retired_pages", D, Remedy.REBOOT, text, **ev)]
    return [_check(g, "retired_pages", H, Remedy.NONE, f"GPU {i} {total} retired pages", **ev)]


def _ecc(g: GpuSnapshot, b: Baselines) -> list[Check]:
    """Volatile uncorrectable ECC > 0 -> unhealthy + reset, unless contained (recovery
    action NONE and no remap pending) -> degraded; volatile correctable > 20,000,000 ->
    degraded.

    Source: gpu-health.md row 6; DCGM MonitorMemVolatileDbes (> 0 FAIL); AzNHC
    check_gpu_ecc (correctable limit).
    """
    i, unc, corr = g.index, g.ecc_uncorrected_volatile, g.ecc_corrected_volatile
    if unc:
        if g.recovery_action == 0 and not g.remapped_rows_pending:
            text = f"GPU {i} {unc} uncorrectable ECC errors (contained)"
            return [
                _check(
                    g,
                    "ecc",
                    D,
                    Remedy.NONE,
                    text,
                    uncorrected_volatile=unc,
                    corrected_volatile=corr,
                )
            ]
        text = f"GPU {i} {unc} uncorrectable ECC errors this boot"
        return [
            _check(
                g,
                "ecc",
                U,
                Remedy.RESET_GPU,
                text,
                "ecc:dbe",
                uncorrected_volatile=unc,
                corrected_volatile=corr,
            )
        ]
    if (corr or 0) > ECC_CORRECTED_LIMIT:
        text = f"GPU {i} {corr} correctable ECC errors (AzNHC limit 20M)"
        return [_check(g, "ecc", D, Remedy.NONE, text, corrected_volatile=corr)]
    if unc is None:
        return []
    text = f"GPU {i} no uncorrectable ECC errors"
    return [_check(g, "ecc", H, Remedy.NONE, text, uncorrected_volatile=0, corrected_volatile=corr)]


def _ecc_mode(g: GpuSnapshot, b: Baselines) -> list[Check]:
    """ECC disabled on a datacenter GPU -> degraded; an ECC mode change pending ->
    degraded + reboot.

    Source: gpu-health.md row 20.
    """
    cur, pending = g.ecc_mode_current, g.ecc_mode_pending
    if cur is None:
        return []
    if not cur:
        text = f"GPU {g.index} ECC is disabled"
        return [_check(g, "ecc_mode", D, Remedy.NONE, text, current=False, pending=pending)]
    if pending is not None and pending != cur:
        text = f"GPU {g.index} ECC mode change pending a reboot"
        return [_check(g, "ecc_mode", D, Remedy.REBOOT, text, current=cur, pending=pending)]
    return []


def hw_slowdown(g: GpuSnapshot) -> list[str]:
    """Names of the hardware slowdown bits set in the GPU's clock event reasons."""
    mask = g.clock_event_reasons or 0
    return [name for bit, name in HW_SLOWDOWN_BITS.items() if mask & bit]


def _clock_events(g: GpuSnapshot, b: Baselines) -> list[Check]:
    """HW slowdown, HW thermal slowdown or power brake bit -> degraded; set in >= 6 of
    the last 10 runs of this boot -> unhealthy + replace (hardware inspection).

    Source: gpu-health.md row 10; nvml.h clock event reasons; gpud.
    """
    bits = hw_slowdown(g)
    if g.clock_event_reasons is None or not bits:
        return []
    recent = [*b.slowdown_history[-(HW_SLOWDOWN_WINDOW - 1) :], True]
    ev: dict[str, Any] = {"reasons": bits, "mask": g.clock_event_reasons}
    if sum(recent) >= HW_SLOWDOWN_UNHEALTHY:
        text = (
            f"GPU {g.index} sustained hardware slowdown ({sum(recent)} of last {len(recent)} runs)"
        )
        return [_check(g, "clock_events", U, Remedy.REPLACE, text, **ev)]
    text = f"GPU {g.index} hardware slowdown: {', '.join(bits)}"
    return [_check(g, "clock_events", D, Remedy.NONE, text, **ev)]


def _pcie_link(g: GpuSnapshot, b: Baselines) -> list[Check]:
    """PCIe link width below its maximum -> degraded. The generation is never compared:
    it drops at idle for power saving.

    Source: gpu-health.md row 13; Meta GCM check_pci.
    """
    width, width_max = g.pcie_link_width, g.pcie_link_width_max
    if width is None or width_max is None or width >= width_max:
        return []
    text = f"GPU {g.index} PCIe link x{width} of x{width_max}"
    return [_check(g, "pcie_link", D, Remedy.NONE, text, width=width, width_max=width_max)]


def _pcie_replay(g: GpuSnapshot, b: Baselines) -> list[Check]:
    """PCIe replays per minute since the last run > ceil(per-lane limit x lanes) ->
    degraded (Gen5 x16: 31/min).

    Source: gpu-health.md row 14; DCGM MonitorPcie (PCIE_REPLAY_PER_LANE_PER_MIN).
    """
    rate = b.rate_per_s("pcie_replay", g.pcie_replay_count)
    if rate is None or not g.pcie_link_gen_max:
        return []
    lanes = g.pcie_link_width or g.pcie_link_width_max or 16
    limit_per_min = math.ceil(PCIE_REPLAY_PER_LANE_PER_MIN.get(g.pcie_link_gen_max, 1.92) * lanes)
    if rate * 60 <= limit_per_min:
        return []
    return [
        _check(
            g,
            "pcie_replay",
            D,
            Remedy.NONE,
            f"GPU {g.index} PCIe replays {rate * 60:.1f}/min above {limit_per_min}/min",
            replays_per_min=round(rate * 60, 3),
            limit_per_min=limit_per_min,
        )
    ]


def _nvlink_errors(g: GpuSnapshot, b: Baselines) -> list[Check]:
    deltas = {k: b.delta(f"nvlink_{k}", v) for k, v in (g.nvlink_errors or {}).items()}
    if not any(deltas.values()):
        return []  # no counter rose since a usable baseline, so no rate is above 0 either
    rates = (b.rate_per_s(f"nvlink_{k}", (g.nvlink_errors or {}).get(k)) for k in _CRC)
    crc_rate = sum(r for r in rates if r is not None)
    hard = {k: d for k, d in deltas.items() if k in ("replay", "recovery") and d}
    crc = sum(d for k, d in deltas.items() if k.startswith("crc") and d)
    if hard or crc_rate >= NVLINK_CRC_PER_S_LIMIT:
        text = f"GPU {g.index} new NVLink errors: {hard or {'crc_per_s': crc_rate}}"
        return [
            _check(
                g,
                "nvlink_errors",
                U,
                Remedy.RESET_GPU,
                text,
                "nvlink_errors",
                deltas=deltas,
                crc_per_s=round(crc_rate, 3),
                **_links(g),
            )
        ]
    if crc:
        text = f"GPU {g.index} {crc} new NVLink CRC errors"
        return [_check(g, "nvlink_errors", D, Remedy.NONE, text, deltas=deltas, **_links(g))]
    return []


def _links(g: GpuSnapshot) -> dict[str, Any]:
    """Evidence naming the links whose counters are above 0 (cumulative this boot)."""
    if not g.nvlink_link_errors:
        return {}
    return {"links": {str(n): dict(c) for n, c in sorted(g.nvlink_link_errors.items())}}


def _nvlink(g: GpuSnapshot, b: Baselines) -> list[Check]:
    """Any existing NVLink link down -> unhealthy + reboot (check "nvlink"); new replay
    or recovery errors since the last run, or CRC errors >= 100/s -> unhealthy + reset,
    new CRC errors -> degraded (check "nvlink_errors"). One component, because the
    healthy "nvlink" check follows the error check in the report.

    Source: gpu-health.md rows 15-16; DCGM (link down FAIL) and MonitorNVLink4Fields
    (replay/recovery delta FAIL, CRC delta WARN, DCGM_LIMIT_MAX_NVLINK_CRC_ERROR 100/s).
    """
    if g.nvlink_active is None:
        return []
    links = len(g.nvlink_active)
    down = [n for n, up in enumerate(g.nvlink_active) if not up]
    out: list[Check] = []
    if down:
        text = f"GPU {g.index} NVLink links down: {down}"
        out.append(
            _check(g, "nvlink", U, Remedy.REBOOT, text, "nvlink_down", links_down=down, links=links)
        )
    if g.nvlink_errors is not None:
        out += _nvlink_errors(g, b)
    if not down:
        text = f"GPU {g.index} {links} NVLink links up"
        out.append(_check(g, "nvlink", H, Remedy.NONE, text, links=links))
    return out


def _mig(g: GpuSnapshot, b: Baselines) -> list[Check]:
    """MIG mode on -> healthy, naming the readings that do not apply to the whole GPU
    under MIG (``MIG_NOT_APPLICABLE``: not a failure, so never degraded); a pending mode
    other than the current one -> degraded, no action (the change waits for a GPU reset:
    a setting of the image, not broken hardware). MIG off -> no check.

    Source: nvmlDeviceGetMigMode (nvml.h); NVIDIA MIG user guide (mode changes take
    effect after a GPU reset; monitoring per instance).
    """
    if g.mig_current is None:
        return []
    out: list[Check] = []
    if g.mig_pending is not None and g.mig_pending != g.mig_current:
        want = "on" if g.mig_pending else "off"
        text = f"GPU {g.index} MIG mode change to {want} pending a GPU reset"
        out.append(_check(g, "mig", D, Remedy.NONE, text, current=g.mig_current, pending=want))
    if g.mig_current:
        na = [m for m in MIG_NOT_APPLICABLE if m in g.unreadable or m in g.not_supported]
        text = f"GPU {g.index} in MIG mode" + (
            f": {', '.join(na)} not applicable (reported per MIG instance)" if na else ""
        )
        out.append(_check(g, "mig", H, Remedy.NONE, text, mig=True, not_applicable=na))
    return out


def _persistence_mode(g: GpuSnapshot, b: Baselines) -> list[Check]:
    """Persistence mode disabled -> degraded (enable nvidia-persistenced).

    Source: gpu-health.md row 18; DCGM diag level 1.
    """
    if g.persistence_mode is not False:
        return []
    text = f"GPU {g.index} persistence mode disabled (enable nvidia-persistenced)"
    return [_check(g, "persistence_mode", D, Remedy.NONE, text)]


def _inforom(g: GpuSnapshot, b: Baselines) -> list[Check]:
    """InfoROM corrupted -> degraded.

    Source: gpu-health.md row 19; DCGM INFOROM watch (WARN).
    """
    if g.inforom_valid is not False:
        return []
    return [_check(g, "inforom", D, Remedy.NONE, f"GPU {g.index} InfoROM is corrupted")]


#: The gate: a lost GPU, or one waiting for a reset, has no readings worth checking, so
#: only this component runs for it.
GPU_LOST = GpuComponent("gpu_lost", ("lost", "reset_required", "uuid", "pci_bus_id"), _gpu_lost)

#: Every per-GPU check, in report order (gpu-health.md §1 rows 4-20). Add agent-side
#: checks here (any object satisfying ``GpuCheck``).
GPU_CHECKS: tuple[GpuCheck, ...] = (
    GpuComponent("readings", ("unreadable", "not_supported"), _readings),
    GpuComponent(
        "temperature",
        (
            "temperature_c",
            "temperature_slowdown_c",
            "temperature_shutdown_c",
            "temperature_gpu_max_c",
        ),
        _temperature,
    ),
    GpuComponent("power", ("power_w", "power_limit_w", "power_default_limit_w"), _power),
    GpuComponent("recovery_action", ("recovery_action",), _recovery_action),
    GpuComponent(
        "remapped_rows",
        (
            "remapped_rows_pending",
            "remapped_rows_failure",
            "remapped_rows_corrected",
            "remapped_rows_uncorrected",
        ),
        _remapped_rows,
    ),
    GpuComponent(
        "retired_pages",
        ("retired_pages_sbe", "retired_pages_dbe", "retired_pages_pending"),
        _retired_pages,
    ),
    GpuComponent(
        "ecc",
        (
            "ecc_uncorrected_volatile",
            "ecc_corrected_volatile",
            "recovery_action",
            "remapped_rows_pending",
        ),
        _ecc,
    ),
    GpuComponent("ecc_mode", ("ecc_mode_current", "ecc_mode_pending"), _ecc_mode),
    GpuComponent("clock_events", ("clock_event_reasons",), _clock_events),
    GpuComponent("pcie_link", ("pcie_link_width", "pcie_link_width_max"), _pcie_link),
    GpuComponent(
        "pcie_replay",
        ("pcie_replay_count", "pcie_link_gen_max", "pcie_link_width", "pcie_link_width_max"),
        _pcie_replay,
    ),
    GpuComponent("nvlink", ("nvlink_active", "nvlink_errors", "nvlink_link_errors"), _nvlink),
    GpuComponent("fabric", ("fabric",), fabric_rule),
    GpuComponent("mig", ("mig_current", "mig_pending", "unreadable", "not_supported"), _mig),
    GpuComponent("persistence_mode", ("persistence_mode",), _persistence_mode),
    GpuComponent("inforom", ("inforom_valid",), _inforom),
)


def gpu_checks(
    g: GpuSnapshot,
    *,
    baselines: Mapping[str, CounterSample],
    slowdown_history: Sequence[bool],
    now_s: float,
    boot_id: str,
    components: Sequence[GpuCheck] = GPU_CHECKS,
) -> list[Check]:
    """All per-GPU checks for one snapshot: ``GPU_LOST`` for a lost GPU, else every
    component of ``components`` (default ``GPU_CHECKS``) in order.

    baselines: counter name -> sample from the previous run (see ``Baselines``);
    slowdown_history: earlier runs' HW-slowdown flags in this boot, oldest first; now_s:
    seconds since the epoch. Rules and sources are in each component's ``source``.
    """
    b = Baselines(baselines, slowdown_history, now_s, boot_id)
    if g.lost or g.reset_required:
        return GPU_LOST.evaluate(g, b)
    return [check for component in components for check in component.evaluate(g, b)]

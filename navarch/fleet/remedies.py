"""The remediation table: per fault key or fault class, what the ladder does and when.

A pool's ``health.remedies`` rows (fleet.yaml) come first, then the built-in rows made
from the XID catalogue (navarch.report.xid, the "Recommend" column of the GPU health reference
§2) and the fault classes below. The first row that matches a fault decides, an exact
fault kind before a class (``row_for``). A row gives:

- ``actions``: the ladder for that fault, cheapest first (an ordered subset of reset_gpu,
  reboot, replace), or ``alert`` alone (reported, never cordoned); none: the pool's
  ``remediation`` from the fault's recommended remedy (``floor``) up;
- ``wait_s``: how long after the fault was first seen before acting;
- ``occurrences``: how many observations of it in a row before acting (the agent's
  consecutive checks or distinct unhealthy reports, whichever is more, on top of
  ``unhealthy_after``; a healthy report starts the count again);
- ``max_in_place`` within ``ladder_window_s``: how many in-place remedies (reset_gpu,
  reboot) of the same fault kind before the node is treated as hardware and replaced;
- ``source``: where the row comes from.

This is the shape the EKS node monitoring agent, gpud and NVSentinel give operators to
tune remediation. The planner's ladder (navarch.planner.ladder) reads it and nothing
else; ``is_hardware`` says whether a node's fault makes it hardware to hand back. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from navarch.fleet.durations import format_duration_s, parse_duration_s
from navarch.fleet.modes import Mode
from navarch.report.compat import StrEnum
from navarch.report.health import FAULT_KIND_PATTERN, Remedy
from navarch.report.xid import fatal_xids_by_remedy, lookup

__all__ = [
    "ALERT",
    "BUILTIN_ROWS",
    "FaultClass",
    "RemedyRow",
    "fault_class",
    "is_hardware",
    "hands_back",
    "HARDWARE_FAULT_KINDS",
    "parse_rows",
    "remedies_table",
    "row_for",
]

#: The word a row's actions use for "report it, act on nothing".
ALERT = "alert"


class FaultClass(StrEnum):
    """A family of fault kinds one row can name (``fault_class`` maps kinds to it)."""

    GPU_LOST = "gpu_lost"  # the GPU left the bus or the driver lost it
    HBM_ECC = "hbm_ecc"  # uncorrectable memory errors, row remapping, retired pages
    NVLINK = "nvlink"  # NVLink and NVSwitch errors, links down
    THERMAL = "thermal"  # temperature, thermal or power slowdown
    HOST_DOWN = "host_down"  # the host is gone: no reports, or the cloud says impaired
    GPU_HUNG = "gpu_hung"  # an NVML, DCGM or tool call on a GPU did not return in its deadline
    NETWORK = "network"  # InfiniBand, RoCE or EFA ports: down, slow, flapping, error counters
    FABRIC = "fabric"  # the NVSwitch fabric: GPU fabric state and health, fabric manager
    HOST_CPU = "host_cpu"  # soft lockups, hung tasks, RCU stalls, machine checks
    HOST_MEMORY = "host_memory"  # OOM kills of GPU processes, host memory errors
    HOST_STORAGE = "host_storage"  # NVMe timeouts and resets, a filesystem remounted read-only
    PCIE = "pcie"  # PCIe AER errors and counters
    CLOCK = "clock"  # the system clock is not synchronised

    def __str__(self) -> str:
        return self.value


# XID codes per class, from the GPU health reference §2 (NVIDIA XID catalogue mnemonics).
_XID_CLASS: dict[int, FaultClass] = {
    79: FaultClass.GPU_LOST,
    143: FaultClass.GPU_LOST,
    **{c: FaultClass.HBM_ECC for c in (48, 63, 64, 92, 94, 95, 140, 156, 157, 168, 171, 172)},
    **{c: FaultClass.NVLINK for c in (74, 136, 137, 155, *range(144, 151))},
}
# Fault kinds the agent's checks report (navarch.agent.gpu_checks), by prefix.
_KIND_CLASS: tuple[tuple[str, FaultClass], ...] = (
    ("gpu_lost", FaultClass.GPU_LOST),
    ("gpu_handle", FaultClass.GPU_LOST),
    ("gpu_count", FaultClass.GPU_LOST),
    ("ecc", FaultClass.HBM_ECC),
    ("remapped_rows", FaultClass.HBM_ECC),
    ("retired_pages", FaultClass.HBM_ECC),
    ("nvlink", FaultClass.NVLINK),
    ("sxid:", FaultClass.NVLINK),
    ("temperature", FaultClass.THERMAL),
    ("thermal", FaultClass.THERMAL),
    ("clock_events", FaultClass.THERMAL),
    ("gpu_hung", FaultClass.GPU_HUNG),
    ("fabric", FaultClass.FABRIC),  # fabric_*, fabric_manager*, fabric_config:* (agent.fabric)
    ("host_down", FaultClass.HOST_DOWN),
    ("offline", FaultClass.HOST_DOWN),
    ("instance_impaired", FaultClass.HOST_DOWN),
    # Host signals (navarch.agent.host_signals): the kind's prefix is its class.
    ("host_cpu:", FaultClass.HOST_CPU),
    ("host_memory:", FaultClass.HOST_MEMORY),
    ("host_storage:", FaultClass.HOST_STORAGE),
    ("pcie:", FaultClass.PCIE),
    ("clock:", FaultClass.CLOCK),
    # navarch.agent.network: ib_port_down, ib_rate, ib_link_flap, ib_counter:<name>,
    # efa_counter:<name>, mlx5:<event>
    ("ib_", FaultClass.NETWORK),
    ("efa_counter:", FaultClass.NETWORK),
    ("mlx5:", FaultClass.NETWORK),
    ("gpu_hung", FaultClass.GPU_HUNG),
    ("ib_", FaultClass.NETWORK),
    ("fabric", FaultClass.FABRIC),
    ("soft_lockup", FaultClass.HOST_CPU),
    ("host_memory", FaultClass.HOST_MEMORY),
    ("nvme_", FaultClass.HOST_STORAGE),
    ("pcie_", FaultClass.PCIE),
    ("clock_unsynchronised", FaultClass.CLOCK),
)


def fault_class(kind: str) -> FaultClass | None:
    """The class of a fault kind (``xid:79`` -> gpu_lost, ``ecc:dbe`` -> hbm_ecc, ...), or
    None when it is in no class. Source: the GPU health reference §1-2 (which check or
    XID reads which part of the machine)."""
    if kind.startswith("xid:") and kind[4:].isdigit():
        return _XID_CLASS.get(int(kind[4:]))
    for prefix, cls in _KIND_CLASS:
        if kind.startswith(prefix):
            return cls
    return None


@dataclass(frozen=True)
class RemedyRow:
    """One row of the remediation table (module docstring).

    match: a fault kind (``xid:79``, ``rule:NAME``, ``ecc:dbe``) or a FaultClass value;
    actions: the row's ladder, cheapest first, () for the pool's; alert: report only;
    floor: the cheapest rung for the fault (None: the report's recommended remedy);
    wait_s, ladder_window_s: seconds (ladder_window_s None: the pool's); occurrences:
    observations in a row;
    max_in_place: None for no limit beyond the ladder's own climbing; mode: how far
    navarch may act on a fault the row matches (None: the pool's; the stricter of the two
    applies, navarch.fleet.modes.stricter).
    """

    match: str
    source: str
    actions: tuple[Remedy, ...] = ()
    alert: bool = False
    floor: Remedy | None = None
    wait_s: int = 0
    occurrences: int = 1
    max_in_place: int | None = None
    ladder_window_s: int | None = None
    mode: Mode | None = None

    def ladder(self, pool_ladder: Sequence[Remedy]) -> tuple[Remedy, ...]:
        """The rungs the ladder climbs for this row: its own, else the pool's."""
        return self.actions or tuple(pool_ladder)

    def actions_text(self) -> str:
        """The actions as fleet.yaml writes them ("[reboot, replace]", "alert", or
        "pool remediation from <floor>")."""
        if self.alert:
            return ALERT
        if self.actions:
            return "[" + ", ".join(r.value for r in self.actions) + "]"
        return f"remediation from {self.floor.value}" if self.floor else "remediation"


_CATALOGUE = "NVIDIA XID catalogue via gpud and DCGM, gpu-health.md §2 Recommend column"


def _builtin() -> tuple[RemedyRow, ...]:
    """The built-in rows: each fatal XID at the catalogue's recommended remedy, then the
    fault classes (each at the report's recommended remedy, so the defaults decide as the
    ladder always has)."""
    rows = [
        RemedyRow(f"xid:{code}", f"{lookup(code).mnemonic}: {_CATALOGUE}", floor=remedy)
        for remedy, codes in fatal_xids_by_remedy().items()
        for code in codes
    ]
    rows.sort(key=lambda r: int(r.match[4:]))
    rows += [
        RemedyRow(
            FaultClass.GPU_LOST.value,
            "NVML GpuIsLost / XID 79: gpud ErrGPULost -> REBOOT_SYSTEM (gpu-health.md §1 row 4)",
        ),
        RemedyRow(
            FaultClass.HBM_ECC.value,
            "DCGM always-on ECC and row-remap checks; remap failure -> replace "
            "(gpu-health.md §1 rows 7-9, §2 XID 48/64)",
        ),
        RemedyRow(
            FaultClass.NVLINK.value,
            "NVIDIA WORKFLOW_NVLINK_ERR, NVSentinel XID 74 decode (gpu-health.md §2 XID 74)",
        ),
        RemedyRow(
            FaultClass.THERMAL.value,
            "NVML clock event reasons; DCGM thermal violations (gpu-health.md §1)",
        ),
        RemedyRow(
            FaultClass.GPU_HUNG.value,
            "an NVML call that never returned: the driver is stuck, so a GPU reset through "
            "it cannot run; reboot, then replace when it recurs (NVSentinel GPU health "
            "monitor hangs; gpud: unresponsive GPU -> reboot; gpu-health.md §2 RMA rule)",
            actions=(Remedy.REBOOT, Remedy.REPLACE),
        ),
        RemedyRow(
            FaultClass.FABRIC.value,
            "gpud fabric-manager component (fabric state, health mask, fabricmanager.log "
            "fatal NVSwitch errors); NVIDIA Fabric Manager user guide (a fatal NVSwitch "
            "error needs the GPUs reset and the fabric re-trained: a reboot does both)",
        ),
        RemedyRow(
            FaultClass.NETWORK.value,
            "gpud infiniband: ports below the expected count or rate and flaps (3 in a "
            "window) are unhealthy, held 10m, and call for hardware inspection; EKS node "
            "monitoring agent: EFA error counters over their rate limit are a Warning. "
            "One reboot re-trains the link; a repeat is hardware",
            max_in_place=1,
        ),
        RemedyRow(
            FaultClass.HOST_DOWN.value,
            "EC2 status checks, GCE instance status: no in-place rung fixes a dead host "
            "(cloud-apis.md; docs/design.md, Node lifecycle)",
            actions=(Remedy.REPLACE,),
        ),
        *_HOST_ROWS,
    ]
    return tuple(rows)


_GPUD = "gpud kmsg matchers (leptonai/gpud)"
_EKS = "EKS node monitoring agent (aws/eks-node-monitoring-agent pkg/reasons/reasons.yaml)"
#: Host signals (navarch.agent.host_signals): the agent counts transient ones in a window
#: and reports fatal ones at once; these rows say what the ladder does with them. Exact
#: kinds that are only reported come before their class.
_HOST_ROWS = (
    RemedyRow(
        "host_cpu:hung_task",
        f"{_EKS}: AppBlocked is a Warning event with no repair (a task blocked on I/O)",
        alert=True,
    ),
    RemedyRow(
        FaultClass.HOST_CPU.value,
        f"{_EKS}: SoftLockup, KernelBug; {_GPUD}; kernel/watchdog.c, kernel/rcu/tree_stall.h: "
        "repeated soft lockups or RCU stalls, a hard lockup: reboot; a machine check that "
        "was not corrected: replace",
    ),
    RemedyRow(
        "host_memory:oom_kill",
        f"{_EKS}: AppCrash is a Warning event; an OOM kill is the workload's memory, "
        "not the node's hardware (mm/oom_kill.c)",
        alert=True,
    ),
    RemedyRow(
        FaultClass.HOST_MEMORY.value,
        "Linux Documentation/driver-api/edac.rst: an uncorrectable error (UE) is data the "
        "DIMM lost; no in-place rung mends a DIMM, and Llama 3's Table 5 counts System "
        "Memory among the component failures: replace",
        actions=(Remedy.REPLACE,),
    ),
    RemedyRow(
        FaultClass.HOST_STORAGE.value,
        f"{_EKS}: InstanceStoreIOError is Fatal, IODelays a Warning; drivers/nvme/host/pci.c "
        "reset storms and fs/ext4 read-only remounts are cured by a reboot, then replace",
    ),
    RemedyRow(
        "pcie:aer_corrected",
        f"{_EKS}: NvidiaPCIeError (replays) is a Warning; corrected AER errors are reported",
        alert=True,
    ),
    RemedyRow(
        "pcie:aer_counter_correctable",
        f"{_EKS}: NvidiaPCIeError is a Warning; Documentation/ABI/testing/"
        "sysfs-bus-pci-devices-aer-stats",
        alert=True,
    ),
    RemedyRow(
        "pcie:peermem",
        f"{_GPUD} components/accelerator/nvidia/peermem: repeated invalid-context errors "
        "are reported, not acted on",
        alert=True,
    ),
    RemedyRow(
        FaultClass.PCIE.value,
        "drivers/pci/pcie/aer.c: an uncorrectable (fatal or non-fatal) AER error: reboot, "
        "then replace",
    ),
    RemedyRow(
        FaultClass.CLOCK.value,
        f"{_EKS} monitors/kernel/monitor.go ClockUnsynchronized: the time daemon is a "
        "setting of the image, not broken hardware",
        alert=True,
    ),
)


#: The built-in table (operator rows in health.remedies come before it).
BUILTIN_ROWS: tuple[RemedyRow, ...] = _builtin()


def row_for(rows: Sequence[RemedyRow], kind: str) -> RemedyRow | None:
    """The row that decides fault kind `kind`: the operator's `rows` first, then
    BUILTIN_ROWS; in each, a row naming the kind exactly before one naming its class.
    None when no row matches (the pool's remediation from the report's remedy)."""
    cls = fault_class(kind)
    for table in (rows, BUILTIN_ROWS):
        for row in table:
            if row.match == kind:
                return row
        if cls is not None:
            for row in table:
                if row.match == cls.value:
                    return row
    return None


#: Fault kinds that mean the machine's hardware is bad, not its software state: a node
#: replaced for one has its host handed back to the cloud. Sources: NVIDIA XID catalogue
#: (79 "GPU has fallen off the bus", 48 double-bit ECC, 64 and 63's failure row-remapping,
#: 95 uncontained ECC, 74 NVLink) and NVIDIA's memory error management guide (a row-remap
#: failure means RMA); Azure Guest Health Reporting's mark-out-for-repair categories
#: (XID79FallenOffBus, XID48DoubleBitECC, XID95UncontainedECCError, HpcRowRemapFailure,
#: NvLink, HpcDcgmiThermalReport, HpcMissingGpu). Read only through ``hands_back``.
HARDWARE_FAULT_KINDS = frozenset(
    {
        "gpu_lost",  # the GPU is gone from the bus (agent check gpu_lost)
        "xid:79",  # GPU has fallen off the bus
        "xid:48",  # double-bit ECC error
        "xid:64",  # row remapping failed
        "xid:95",  # uncontained ECC error
        "xid:74",  # NVLink error
        "ecc:dbe",  # uncorrected (double-bit) ECC count
        "remapped_rows",  # a row-remap failure (replace); a pending remap is reset instead
        "nvlink_down",  # NVLink links down
        "thermal",  # at or above the GPU's shutdown temperature
    }
)


def is_hardware(row: RemedyRow | None, need: Remedy, in_place: int) -> bool:
    """Whether a node's fault makes it hardware, to be replaced and handed back to the
    cloud (not remedied in place again).

    row: ``row_for`` the fault's kind (None: no row); need: the fault's recommended remedy
    (the report's); in_place: in-place remedies of the same fault kind already tried
    within the row's ladder_window. True when the row's ladder starts at replace, when
    the floor (the row's, else `need`) is replace, or when `in_place` reached the row's
    max_in_place. Source: gpu-health.md §2 "Hardware replacement (RMA)": row-remap
    failure, mechanical XIDs 54/81, and a reboot-recoverable fault that recurs after its
    remedies (gpud: 2 reboots; NVSentinel: more than 1 remediation in 7 days).
    """
    if row is not None and row.alert:
        return False
    floor = row.floor if row is not None and row.floor is not None else need
    if row is not None and row.actions and row.actions[0] is Remedy.REPLACE:
        return True
    if floor is Remedy.REPLACE:
        return True
    limit = row.max_in_place if row is not None else None
    return limit is not None and in_place >= limit


def hands_back(kind: str, action: Remedy) -> bool:
    """Whether a node terminated for a fault of `kind` (the report recommending `action`)
    has its host handed back to the cloud: kind in HARDWARE_FAULT_KINDS, and
    ``remapped_rows`` only when the agent recommends replacement (a failed remap; a pending
    one is cured by a GPU reset). Sources: HARDWARE_FAULT_KINDS."""
    if kind not in HARDWARE_FAULT_KINDS:
        return False
    return kind != "remapped_rows" or action is Remedy.REPLACE


def remedies_table(rows: Sequence[RemedyRow] = BUILTIN_ROWS) -> str:
    """The table as Markdown (docs/health-policy.md holds the built-in one, tested to
    match): match, actions, wait, occurrences in a row, max_in_place, source."""
    out = [
        "| match | actions | wait | occurrences | max_in_place | source |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        limit = "-" if r.max_in_place is None else str(r.max_in_place)
        if r.max_in_place is not None and r.ladder_window_s is not None:
            limit += f" / {format_duration_s(r.ladder_window_s)}"
        out.append(
            f"| {r.match} | {r.actions_text()} | {format_duration_s(r.wait_s)} | "
            f"{r.occurrences} | {limit} | {r.source} |"
        )
    return "\n".join(out) + "\n"


#: How fleet_file reports a bad row: (key path, what is wrong, what to do) -> the error.
Fail = Callable[[tuple[Any, ...], str, str], Exception]

_IN_PLACE = (Remedy.RESET_GPU, Remedy.REBOOT)
_LADDER_WORDS = {r.value: r for r in (Remedy.RESET_GPU, Remedy.REBOOT, Remedy.REPLACE)}


def parse_rows(
    raw: Sequence[Mapping[str, Any]],
    path: tuple[Any, ...],
    fail: Fail,
    rule_names: Iterable[str],
) -> tuple[RemedyRow, ...]:
    """fleet.yaml ``health.remedies`` (already valid against schemas/fleet.schema.json) as
    RemedyRows, in order. path: the list's key path (pools.<pool>.health.remedies);
    rule_names: the health rules a ``rule:NAME`` match may name.

    Raises what `fail` makes (ConfigError naming the row's key) when a match is neither a
    fault kind (FAULT_KIND_PATTERN) nor a class, names an undeclared rule, or is repeated;
    when ``alert`` is not alone; when actions are not cheapest first; when a duration is
    negative (wait) or zero (ladder_window).
    """
    rules = set(rule_names)
    out: list[RemedyRow] = []
    seen: set[str] = set()
    for i, r in enumerate(raw):
        here = (*path, i)
        match = str(r["match"])
        _check_match(match, here + ("match",), fail, rules)
        if match in seen:
            raise fail(here + ("match",), f"two rows match {match!r}", "merge them into one row")
        seen.add(match)
        words = list(r.get("actions", ()))
        alert = ALERT in words
        if alert and len(words) > 1:
            raise fail(
                here + ("actions",),
                f"alert cannot be combined with other actions, got {words}",
                "use [alert] alone to report only, or list remedies without alert",
            )
        actions = tuple(_LADDER_WORDS[w] for w in words if w != ALERT)
        if list(actions) != sorted(actions, key=lambda a: a.rank):
            raise fail(
                here + ("actions",),
                f"the row's ladder must go from cheapest to strongest, got {words}",
                "order its actions as reset_gpu, reboot, replace",
            )
        out.append(
            RemedyRow(
                match,
                str(r.get("source") or f"fleet.yaml {_dotted(here)}"),
                actions=actions,
                alert=alert,
                wait_s=_duration(r, "wait", "0s", here, fail, zero_ok=True),
                occurrences=int(r.get("occurrences", 1)),
                max_in_place=r.get("max_in_place"),
                ladder_window_s=(
                    _duration(r, "ladder_window", "", here, fail, zero_ok=False)
                    if "ladder_window" in r
                    else None
                ),
                mode=Mode(r["mode"]) if "mode" in r else None,
            )
        )
    return tuple(out)


def _dotted(path: tuple[Any, ...]) -> str:
    """A key path as errors write it: pools.train.health.remedies[0]."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def _check_match(match: str, where: tuple[Any, ...], fail: Fail, rules: set[str]) -> None:
    """A row's match must be a class, a fault kind, and for rule:NAME a declared rule."""
    if match in {c.value for c in FaultClass}:
        return
    if not re.fullmatch(FAULT_KIND_PATTERN, match):
        raise fail(
            where,
            f"{match!r} is not a fault kind or class",
            "use a fault kind such as xid:79 or ecc:dbe, rule:NAME, or one of "
            + ", ".join(c.value for c in FaultClass),
        )
    if match.startswith("xid:") and not match[4:].isdigit():
        raise fail(where, f"{match!r} names no XID code", "write xid:<code>, e.g. xid:79")
    if match.startswith("rule:") and match[5:] not in rules:
        raise fail(
            where,
            f"{match!r} names no health rule of this pool or the fleet",
            f"declare a rule named {match[5:]!r} under health.rules, or use one of "
            + (", ".join(sorted(rules)) or "none declared"),
        )


def _duration(
    r: Mapping[str, Any],
    key: str,
    default: str,
    where: tuple[Any, ...],
    fail: Fail,
    *,
    zero_ok: bool,
) -> int:
    """The row's duration `key` in seconds; ConfigError (via fail) when it is not one or
    is zero where zero means nothing."""
    text = str(r.get(key, default))
    try:
        seconds = parse_duration_s(text)
    except ValueError as exc:
        raise fail(
            where + (key,), f"{text!r} is not a duration", "write e.g. 30s, 10m, 1h, 7d"
        ) from exc
    if seconds < 0 or (seconds == 0 and not zero_ok):
        raise fail(where + (key,), f"{key} must be longer than 0s", "use e.g. 1h")
    return seconds

"""The one XID catalogue: what each NVIDIA XID (and NVSwitch SXid) means and what to do.

Every XID event the agent reports gets its severity and recommended action from here,
and nowhere else. Sources (the design notes' GPU health reference, its section 2):

- NVIDIA XID catalogue ("analyzing-xid-catalog", resolution buckets RESTART_APP,
  RESET_GPU, RESTART_BM, CHECK_MECHANICALS, ...), as embedded by gpud and NVSentinel;
- gpud (leptonai/gpud) XID table: event type and repair action, reboot escalation;
- DCGM ``BuildXidMappings()`` and its always-on "devastating" set {48, 74, 79, 95, 119, 120, 140};
- k8s-device-plugin and Meta GCM application-error ignore lists {13, 31, 43, 45, 68, (109)}.

Vocabulary:

- ``Severity``: ``ignore`` (application error or informational: never affects node
  health), ``warning`` (node degraded, keeps serving), ``fatal`` (node unhealthy).
- ``action``: the catalogue's recommended ``navarch.report.health.Remedy`` (``none <
  restart_app < reset_gpu < reboot < replace``). It is the default order of the planner's
  remediation ladder (navarch.planner.ladder), which alone decides the remedy a node gets:
  the pool's ``remediation``, ``ladder_window`` and ``lemon_after`` apply on top.
- ``reboot_fixable``: a reboot (or GPU reset) is expected to clear the fault.

Unknown codes are ``warning`` / ``none``: an XID we do not know is not evidence of a fault.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from navarch.report.compat import StrEnum
from navarch.report.health import Remedy

__all__ = [
    "Severity",
    "XidInfo",
    "lookup",
    "lookup_event",
    "lookup_sxid",
    "recovery_action",
    "fatal_xids_by_remedy",
    "APPLICATION_XIDS",
]


class Severity(StrEnum):
    """How an XID bears on node health (ordered: ignore < warning < fatal)."""

    IGNORE = "ignore"
    WARNING = "warning"
    FATAL = "fatal"

    def __str__(self) -> str:
        return self.value

    @property
    def rank(self) -> int:
        return _SEVERITY_RANK[self]


_SEVERITY_RANK = {Severity.IGNORE: 0, Severity.WARNING: 1, Severity.FATAL: 2}


@dataclass(frozen=True)
class XidInfo:
    """One catalogue entry.

    code: the XID (or SXid) number; kind: "xid" or "sxid"; mnemonic: NVIDIA's name;
    meaning: one line for humans; severity / action / reboot_fixable: see module docstring;
    known: False for codes outside the catalogue.
    """

    code: int
    mnemonic: str
    meaning: str
    severity: Severity
    action: Remedy
    reboot_fixable: bool
    kind: str = "xid"
    known: bool = True


_I, _W, _F = Severity.IGNORE, Severity.WARNING, Severity.FATAL
_N, _APP, _RST, _RBT, _RPL = (
    Remedy.NONE,
    Remedy.RESTART_APP,
    Remedy.RESET_GPU,
    Remedy.REBOOT,
    Remedy.REPLACE,
)

# code: (mnemonic, meaning, severity, action, reboot_fixable) -- the "Recommend" column of
# gpu-health.md §2 (NVIDIA XID catalogue, gpud, DCGM, k8s-device-plugin, AWS, Azure).
_TABLE: dict[int, tuple[str, str, Severity, Remedy, bool]] = {
    8: ("IDLE_TIMEOUT", "GPU stopped processing (application)", _W, _APP, False),
    13: ("GR_EXCEPTION", "graphics engine exception (application error)", _I, _APP, False),
    31: ("MMU_ERR_FLT", "GPU memory page fault (application error)", _I, _APP, False),
    32: ("PBDMA_ERROR", "corrupted push buffer stream", _W, _APP, True),
    38: ("FECS_WATCHDOG", "driver firmware error", _W, _N, True),
    43: ("RESETCHANNEL_VERIF_ERROR", "GPU stopped processing (application)", _I, _APP, False),
    44: ("GR_CTXSW_FAULT", "graphics engine fault during context switch", _W, _N, True),
    45: ("PREEMPTIVE_REMOVAL", "channel cleanup after another error (sympathetic)", _I, _N, False),
    46: ("GPU_TIMEOUT_ERROR", "GPU stopped responding", _F, _RST, True),
    48: ("GPU_ECC_DBE", "double-bit (uncorrectable) ECC error", _F, _RST, True),
    54: ("AUX_POWER_NOT_CONNECTED", "auxiliary power not connected", _F, _RPL, False),
    56: ("DISPLAY_ENGINE_ERROR", "unused on Ampere+ (legacy clock/power change)", _W, _N, False),
    57: ("FB_LINK_TRAINING", "unused on Ampere+ (legacy clock/power change)", _W, _N, False),
    58: ("FB_REGISTER_ERROR", "unused on Ampere+ (legacy clock/power change)", _W, _N, False),
    61: ("PMU_BREAKPOINT", "internal micro-controller breakpoint", _W, _RBT, True),
    62: ("PMU_HALT_ERROR", "internal micro-controller halt", _F, _RST, True),
    63: (
        "ROW_REMAP_EVENT",
        "DRAM row remap / page retirement event (see remapped rows)",
        _W,
        _N,
        True,
    ),
    64: ("ROW_REMAP_FAILURE", "DRAM row remap / page retirement failure", _F, _RPL, False),
    68: ("NVDEC0_EXCEPTION", "video decoder exception (application)", _I, _APP, False),
    69: ("GR_CLASS_ERROR", "graphics engine class error (application)", _W, _APP, False),
    74: ("NVLINK_ERROR", "NVLink error", _F, _RST, True),
    79: ("GPU_FALLEN_OFF_BUS", "GPU has fallen off the bus", _F, _RBT, True),
    80: ("PBDMA_PUSHBUFFER_CRC", "push buffer CRC mismatch (application)", _W, _APP, False),
    81: ("VGA_SUBSYSTEM_ERROR", "VGA subsystem error", _F, _RPL, False),
    92: ("EXCESSIVE_SBE_INTERRUPTS", "high single-bit ECC error rate", _W, _N, False),
    93: ("INFOROM_ERASE_LIMIT", "InfoROM erase limit reached", _W, _N, False),
    94: ("CONTAINED_ERROR", "contained ECC error (application restart)", _W, _APP, False),
    95: ("UNCONTAINED_ERROR", "uncontained ECC error", _F, _RST, True),
    109: ("CTXSW_TIMEOUT_ERROR", "context switch timeout (sources conflict)", _W, _N, True),
    110: ("SEC_FAULT_ERROR", "security fault", _F, _RST, True),
    119: ("GSP_RPC_TIMEOUT", "GSP RPC timeout", _F, _RBT, True),
    120: ("GSP_ERROR", "GSP error", _F, _RBT, True),
    121: ("C2C_ERROR", "chip-to-chip interconnect error", _W, _N, True),
    136: ("ALI_TRAINING_FAIL", "link training failed", _F, _RST, True),
    137: ("NVLINK_PRIV_ERR", "NVLink FLA privilege error (application)", _I, _APP, False),
    140: ("UNRECOVERABLE_ECC_ERROR_ESCAPE", "unrecoverable ECC error escape", _F, _RST, True),
    143: ("GPU_INIT_ERROR", "GPU initialisation error", _F, _RBT, True),
    144: ("NVLINK_SAW_ERROR", "NVLink5 SAW error (decode Fatal/Nonfatal)", _F, _RST, True),
    145: ("NVLINK_RLW_ERROR", "NVLink5 RLW error (decode Fatal/Nonfatal)", _F, _RST, True),
    146: ("NVLINK_TLW_ERROR", "NVLink5 TLW error (decode Fatal/Nonfatal)", _F, _RST, True),
    147: ("NVLINK_TREX_ERROR", "NVLink5 TREX error (decode Fatal/Nonfatal)", _F, _RST, True),
    148: (
        "NVLINK_NVLPW_CTRL_ERROR",
        "NVLink5 NVLPW_CTRL error (decode Fatal/Nonfatal)",
        _F,
        _RST,
        True,
    ),
    149: ("NVLINK_NETIR_ERROR", "NVLink5 NETIR error (decode Fatal/Nonfatal)", _F, _RST, True),
    150: ("NVLINK_MSE_ERROR", "NVLink5 MSE error (decode Fatal/Nonfatal)", _F, _RST, True),
    151: ("KEY_ROTATION_ERROR", "confidential-computing key rotation error", _F, _RBT, True),
    154: ("GPU_RECOVERY_ACTION_CHANGED", "driver changed the GPU recovery action", _W, _N, True),
    155: ("NVLINK_SW_DEFINED_ERROR", "NVLink software-defined error", _F, _RST, True),
    156: ("RESOURCE_RETIREMENT_EVENT", "resource retirement event", _F, _RST, True),
    157: ("RESOURCE_RETIREMENT_FAILURE", "resource retirement failure", _W, _N, False),
    158: ("GPU_FATAL_TIMEOUT", "GPU fatal timeout", _F, _RST, True),
    159: ("CHI_NON_DATA_ERROR", "CHI non-data error", _W, _N, False),
    162: ("POWER_SMOOTHING_ENGAGED", "power smoothing circuitry engaged", _W, _N, False),
    163: ("POWER_SMOOTHING_DISENGAGED", "power smoothing circuitry disengaged", _W, _N, False),
    164: ("POWER_SMOOTHING_LOW_LIFETIME", "power smoothing lifetime low", _W, _N, False),
    165: ("POWER_SMOOTHING_ZERO_LIFETIME", "power smoothing lifetime exhausted", _F, _RPL, False),
    168: (
        "REDUCED_GPU_MEMORY_CAPACITY",
        "reduced GPU memory capacity (WPR errors)",
        _F,
        _RBT,
        True,
    ),
    171: (
        "UNCORRECTABLE_DRAM_ERROR",
        "uncorrectable DRAM error (detail of XID 48)",
        _F,
        _RST,
        True,
    ),
    172: (
        "UNCORRECTABLE_SRAM_ERROR",
        "uncorrectable SRAM error (detail of XID 48)",
        _F,
        _RPL,
        False,
    ),
}

#: XIDs caused by user code (k8s-device-plugin, Meta GCM, NVIDIA RESTART_APP bucket, and
#: 63 on Ampere+ where remapped rows are read from NVML instead). Never unhealthy.
APPLICATION_XIDS = frozenset({8, 13, 31, 43, 45, 63, 68, 69, 80, 94, 137})

_NVLINK5 = range(144, 151)

# NVML_FI_DEV_GET_GPU_RECOVERY_ACTION values (NVML nvmlDeviceGpuRecoveryAction_t, v615)
# with DCGM MonitorGpuRecoveryAction's verdicts: value -> (name, severity, action).
_RECOVERY: dict[int, tuple[str, Severity, Remedy]] = {
    0: ("NONE", _I, _N),
    1: ("GPU_RESET", _F, _RST),
    2: ("NODE_REBOOT", _F, _RBT),
    3: ("DRAIN_P2P", _W, _RST),
    4: ("DRAIN_AND_RESET", _F, _RST),
    5: ("RECOVER_IMEX_DOMAIN", _W, _N),
    6: ("BUS_RESET", _F, _RBT),
    7: ("SYSTEM_REBOOT", _F, _RBT),
}


def lookup(code: int) -> XidInfo:
    """Catalogue entry for an XID code.

    Unknown codes return severity ``warning``, action ``none``, known=False (an unknown XID
    is logged and surfaced, never treated as a fault). Source: NVIDIA XID catalogue,
    gpud, DCGM (module docstring).
    """
    row = _TABLE.get(code)
    if row is None:
        return XidInfo(
            code, f"XID_{code}", "XID not in navarch's catalogue", _W, _N, False, known=False
        )
    mnemonic, meaning, severity, action, fixable = row
    return XidInfo(code, mnemonic, meaning, severity, action, fixable)


def fatal_xids_by_remedy() -> dict[Remedy, tuple[int, ...]]:
    """The catalogue's fatal XIDs grouped by recommended remedy (weakest remedy first,
    codes ascending): the ladder's default order, tabulated in docs/health-policy.md."""
    out: dict[Remedy, list[int]] = {}
    for code, (_, _, severity, action, _) in sorted(_TABLE.items()):
        if severity is Severity.FATAL:
            out.setdefault(action, []).append(code)
    return {r: tuple(out[r]) for r in sorted(out, key=lambda r: r.rank)}


def recovery_action(value: int) -> tuple[str, Severity, Remedy]:
    """Name, severity and action for a driver GPU recovery action value (0-7).

    Source: NVML ``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`` (field 230) values; DCGM
    ``MonitorGpuRecoveryAction`` (DRAIN_P2P warns, the others fail). Unknown values are
    treated as ``warning`` / ``none``.
    """
    return _RECOVERY.get(value, (f"UNKNOWN_{value}", _W, _N))


_RECOVERY_TEXT = re.compile(
    r"recovery action changed from 0x[0-9a-fA-F]+ \([^)]*\) to 0x(?P<to>[0-9a-fA-F]+)", re.I
)
_NVLINK5_FLAG = re.compile(r"\b(?P<flag>Fatal|Nonfatal|Non-fatal)\b")


def lookup_event(code: int, message: str) -> XidInfo:
    """Catalogue entry refined by the event's own text.

    - XID 144-150 (NVLink5): a ``Nonfatal`` entry is ``ignore``; ``Fatal`` keeps the
      catalogue's fatal / reset_gpu (NVIDIA WORKFLOW_NVLINK5_ERR).
    - XID 154: the *target* recovery action in "changed from 0x<a> (..) to 0x<b> (..)" is
      the signal; severity and action come from ``recovery_action(b)`` (AWS healthcheck).
    Everything else is ``lookup(code)``.
    """
    info = lookup(code)
    if code in _NVLINK5:
        flag = _NVLINK5_FLAG.search(message)
        if flag and flag.group("flag").lower() != "fatal":
            return replace(info, severity=_I, action=_N)
        return info
    if code == 154:
        m = _RECOVERY_TEXT.search(message)
        if m:
            name, severity, action = recovery_action(int(m.group("to"), 16))
            return replace(
                info, severity=severity, action=action, meaning=f"recovery action -> {name}"
            )
    return info


def lookup_sxid(code: int, fatal: bool) -> XidInfo:
    """Catalogue entry for an NVSwitch SXid.

    A ``Fatal`` SXid makes the node unhealthy with action ``reboot`` (gpud: REBOOT_SYSTEM
    then HARDWARE_INSPECTION; e.g. 20034 link down needs a VM restart); ``Non-fatal`` is a
    ``warning`` with no action. Source: gpu-health.md §1 row 23, gpud nvswitch component.
    """
    if fatal:
        return XidInfo(code, f"SXID_{code}", "fatal NVSwitch error", _F, _RBT, True, kind="sxid")
    return XidInfo(code, f"SXID_{code}", "non-fatal NVSwitch error", _W, _N, False, kind="sxid")

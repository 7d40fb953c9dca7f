"""What `navarch local inject --fault CLASS|KIND` puts into a local node, per fault class.

Each class of navarch.fleet.remedies.FaultClass that the fake GPU backend does not
simulate through its own readings (an XID line, a lost GPU, ECC counts, temperatures) has
one representative fault kind here, reaching the node's agent one of two ways:

- ``kernel``: a real kernel line appended to the node's simulated kernel log, parsed by
  the agent's kernel-log matchers (navarch.agent.kernel_log) on its next check;
- ``finding``: an entry in the fake backend's faults file (navarch.agent.gpu.
  InjectedFinding), reported as the check of that part of the machine would report it.

README.md ("Faults you can inject") lists the table. Pure data and one lookup.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from navarch.agent.gpu import InjectedFinding
from navarch.agent.host_signals import HOST_RULES
from navarch.errors import ConfigError
from navarch.fleet.remedies import FaultClass
from navarch.report.compat import StrEnum
from navarch.report.health import Remedy, Status

__all__ = [
    "Delivery",
    "InjectableFault",
    "INJECTABLE",
    "injectable",
    "deliver",
    "finding",
    "append_kernel_line",
    "SOFT_LOCKUP_LINE",
]


class Delivery(StrEnum):
    """How an injected fault reaches the node's agent (module docstring)."""

    KERNEL = "kernel"
    FINDING = "finding"


#: A soft lockup as kernel/watchdog.c prints it (pr_fmt "watchdog: ", then
#: "BUG: soft lockup - CPU#%d stuck for %us! [%s:%d]").
SOFT_LOCKUP_LINE = "watchdog: BUG: soft lockup - CPU#3 stuck for 23s! [python3:12345]"


@dataclass(frozen=True)
class InjectableFault:
    """One row: the class, its representative kind, how it is delivered, and for a
    finding its status, recommended remedy, message and evidence; for a kernel line, the
    line. per_gpu: the finding names the GPU given by --gpu (else the node)."""

    fault_class: FaultClass
    kind: str
    delivery: Delivery
    text: str
    status: Status = Status.UNHEALTHY
    action: Remedy = Remedy.REBOOT
    per_gpu: bool = False
    evidence: Mapping[str, Any] = field(default_factory=dict)


#: The representative kind of each class (the remedy is what the agent recommends; the
#: planner's remediation table decides).
INJECTABLE: tuple[InjectableFault, ...] = (
    InjectableFault(
        FaultClass.NETWORK,
        "ib_link_flap",
        Delivery.FINDING,
        "InfiniBand port mlx5_0/1 flapped: 3 down/up transitions within 5m",
        evidence={"device": "mlx5_0", "port": 1, "flaps": 3, "window_s": 300},
    ),
    InjectableFault(
        FaultClass.FABRIC,
        "fabric_degraded_bandwidth",
        Delivery.FINDING,
        "GPU fabric health: degraded bandwidth (NVML GPU fabric info health mask)",
        per_gpu=True,
        evidence={"fabric_state": "completed", "health": "degraded_bandwidth"},
    ),
    InjectableFault(FaultClass.HOST_CPU, "host_cpu:soft_lockup", Delivery.KERNEL, SOFT_LOCKUP_LINE),
    InjectableFault(
        FaultClass.HOST_MEMORY,
        "host_memory_uncorrected",
        Delivery.FINDING,
        "uncorrected host memory error (EDAC)",
    ),
    InjectableFault(
        FaultClass.HOST_STORAGE,
        "nvme_timeout",
        Delivery.FINDING,
        "nvme0: I/O timeout, controller reset",
    ),
    InjectableFault(
        FaultClass.PCIE,
        "pcie_aer_uncorrected",
        Delivery.FINDING,
        "PCIe AER uncorrected (fatal) error on the GPU's root port",
        per_gpu=True,
    ),
    InjectableFault(
        FaultClass.CLOCK,
        "clock_unsynchronised",
        Delivery.FINDING,
        "system clock not synchronised (adjtimex TIME_ERROR)",
    ),
    InjectableFault(
        FaultClass.GPU_HUNG,
        "gpu_hung",
        Delivery.FINDING,
        "nvmlDeviceGetTemperature did not return within 30s",
        action=Remedy.RESET_GPU,
        per_gpu=True,
        evidence={"call": "nvmlDeviceGetTemperature", "waited_s": 30},
    ),
)


def injectable(name: str) -> InjectableFault:
    """The row for `name`: a class (``network``) or a representative kind
    (``ib_link_flap``). Raises ConfigError (key --fault) naming the choices otherwise."""
    for row in INJECTABLE:
        if name in (row.fault_class.value, row.kind):
            return row
    choices = ", ".join(f"{r.fault_class.value} ({r.kind})" for r in INJECTABLE)
    raise ConfigError(
        f"--fault {name!r} is not a fault class or kind the local provider can inject",
        key_path="--fault",
        hint=f"use one of {choices}; --xid, --gpu-lost, --ecc, --temperature for the GPU's own",
    )


def append_kernel_line(kernel_log: Path, line: str) -> str:
    """Append one line, as given, to a machine's kernel log; what was done, as a line."""
    with open(kernel_log, "a") as fh:
        fh.write(line + "\n")
    return f"kernel log: {line}"


def finding(row: InjectableFault, gpu: int) -> InjectedFinding:
    """The row as the finding its check would make (GPU `gpu` when per_gpu). A kernel-line
    row becomes the finding its matcher makes of the line (navarch.agent.host_signals), for
    the simulator, whose faults last until cured."""
    if row.delivery is Delivery.KERNEL:
        return InjectedFinding(
            row.kind,
            row.status,
            row.action,
            f"{row.kind} x1: {row.text}",
            None,
            {**row.evidence, "fault_class": row.fault_class.value, "line": row.text},
            check="host_signal",
        )
    return InjectedFinding(
        row.kind,
        row.status,
        row.action,
        row.text,
        gpu if row.per_gpu else None,
        {**row.evidence, "fault_class": row.fault_class.value},
        check=row.fault_class.value,
    )


def _lines_in(path: Path) -> int:
    try:
        return sum(1 for _ in path.open("rb"))
    except FileNotFoundError:
        return 0


def deliver(row: InjectableFault, kernel_log: Path, faults: dict[str, Any], gpu: int) -> str:
    """Deliver one row to a machine: its kernel line appended to `kernel_log`, or its
    finding (for GPU `gpu` when per_gpu) set in `faults`, the decoded faults.json (in
    place, replacing a finding of the same kind). Returns what was done, as a line."""
    if row.delivery is Delivery.KERNEL:
        # A counted host signal acts at its threshold (navarch.agent.host_signals): write
        # the line as many times, so one --fault shows the class's action.
        # Each line in /dev/kmsg's record form with its own uptime, so the reader counts
        # separate events rather than one burst (navarch.agent.kernel_log.split_prefix).
        times = next((r.threshold for r in HOST_RULES if r.kind == row.kind), 1)
        seq = _lines_in(kernel_log)
        for i in range(times):
            usec = (seq + i + 1) * 10_000_000
            append_kernel_line(kernel_log, f"2,{seq + i + 1},{usec},-;{row.text}")
        return f"kernel log: {row.text} x{times} ({row.fault_class}: {row.kind})"
    kept = [f for f in faults.get("findings", []) if f.get("kind") != row.kind]
    faults["findings"] = [*kept, finding(row, gpu).to_dict()]
    where = f" on GPU {gpu}" if row.per_gpu else ""
    return f"{row.fault_class}: {row.kind}{where} ({row.status}, recommends {row.action})"

"""GPU backends behind one small seam: a probe returns plain snapshots, checks are pure.

    GpuBackend.probe() -> GpuProbe(init_error?, device_count, gpus: tuple[GpuSnapshot, ...])

Two backends:

- ``FakeGpuBackend``: realistic H100 80GB HBM3 readings with fault injection from a JSON
  file (the local provider and tests). Chosen by ``NAVARCH_FAKE_GPU=true`` or config
  ``fake_gpu: true``.
- ``NvmlGpuBackend`` (navarch.agent.nvml): nvidia-ml-py; used otherwise.

A ``None`` reading means "not read": the metric name is then in ``not_supported`` (the GPU
cannot report it: never a fault, gpud pattern) or in ``unreadable`` (the call failed).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from navarch.report.compat import StrEnum
from navarch.report.health import Remedy, Status

__all__ = [
    "ProbeErrorKind",
    "ProbeError",
    "HungCall",
    "FabricInfo",
    "GpuSnapshot",
    "GpuProbe",
    "GpuBackend",
    "FakeGpuBackend",
    "FakeFaults",
    "InjectedFinding",
    "load_faults",
    "fake_requested",
]

MIB = 1024 * 1024


class ProbeErrorKind(StrEnum):
    """Why the GPU library could not be used, in navarch's terms (see navarch.agent.nvml)."""

    LIBRARY_NOT_FOUND = "library_not_found"
    DRIVER_NOT_LOADED = "driver_not_loaded"
    LIB_RM_VERSION_MISMATCH = "lib_rm_version_mismatch"
    NO_PERMISSION = "no_permission"
    NOT_SUPPORTED = "not_supported"
    FUNCTION_NOT_FOUND = "function_not_found"
    GPU_LOST = "gpu_lost"
    RESET_REQUIRED = "reset_required"
    CORRUPTED_INFOROM = "corrupted_inforom"
    AGENT_ERROR = "agent_error"
    OTHER = "other"


@dataclass(frozen=True)
class ProbeError:
    """A classified library error: kind, message (the library's text), code (its number)."""

    kind: ProbeErrorKind
    message: str
    code: int | None = None


@dataclass(frozen=True)
class HungCall:
    """A library call that did not return within its deadline (navarch.agent.deadline).

    call: the function's name (``nvmlDeviceGetPowerUsage``); waited_s: seconds the agent
    waited before abandoning it; gpu_index / pci_bus_id / uuid: the GPU it was reading,
    None where the call was not about one GPU (nvmlInit) or the GPU's identity was not
    read yet.
    """

    call: str
    waited_s: float
    gpu_index: int | None = None
    pci_bus_id: str | None = None
    uuid: str | None = None


@dataclass(frozen=True)
class FabricInfo:
    """NVML GPU fabric info (nvmlDeviceGetGpuFabricInfoV, nvml.h ``nvmlGpuFabricInfo_v2_t``).

    state: NVML_GPU_FABRIC_STATE_* (0 not supported, 1 not started, 2 in progress,
    3 completed); status: the nvmlReturn_t of the registration (meaningful when completed;
    0 success); health_mask: the v2 health mask bit fields (None from the v1 call, which
    has none); clique_id: the fabric clique.
    """

    state: int
    status: int = 0
    health_mask: int | None = None
    clique_id: int | None = None


@dataclass(frozen=True)
class GpuSnapshot:
    """Everything one probe read from one GPU. Units are in the names.

    Counters are cumulative as the driver reports them (volatile ones reset at boot); the
    checks turn them into rates with the baselines kept in the agent state.
    nvlink_active: per existing link, True when up. nvlink_errors: totals over links,
    keys "replay", "recovery", "crc_flit", "crc_data"; nvlink_link_errors: the same
    counters per link, for the links where any is above 0 (which link to look at). clock_event_reasons: NVML bitmask.
    recovery_action: NVML_FI_DEV_GET_GPU_RECOVERY_ACTION value (0-7).
    serial: the board serial (nvmlDeviceGetSerial), None where NVML does not know it.
    mig_current / mig_pending: MIG mode (nvmlDeviceGetMigMode), True when enabled.
    fabric: the GPU's NVSwitch fabric registration and health (None: not read).
    """

    index: int
    uuid: str
    name: str
    pci_bus_id: str
    temperature_c: float | None = None
    temperature_slowdown_c: float | None = None
    temperature_shutdown_c: float | None = None
    temperature_gpu_max_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    power_default_limit_w: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    utilization_pct: float | None = None
    process_count: int | None = None
    ecc_uncorrected_volatile: int | None = None
    ecc_corrected_volatile: int | None = None
    remapped_rows_corrected: int | None = None
    remapped_rows_uncorrected: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    retired_pages_sbe: int | None = None
    retired_pages_dbe: int | None = None
    retired_pages_pending: bool | None = None
    recovery_action: int | None = None
    clock_event_reasons: int | None = None
    pcie_link_width: int | None = None
    pcie_link_width_max: int | None = None
    pcie_link_gen_max: int | None = None
    pcie_replay_count: int | None = None
    nvlink_active: tuple[bool, ...] | None = None
    nvlink_errors: Mapping[str, int] | None = None
    nvlink_link_errors: Mapping[int, Mapping[str, int]] | None = None
    persistence_mode: bool | None = None
    inforom_valid: bool | None = None
    ecc_mode_current: bool | None = None
    ecc_mode_pending: bool | None = None
    serial: str | None = None
    mig_current: bool | None = None
    mig_pending: bool | None = None
    fabric: FabricInfo | None = None
    lost: bool = False
    reset_required: bool = False
    unreadable: Mapping[str, str] = field(default_factory=dict)
    not_supported: tuple[str, ...] = ()


@dataclass(frozen=True)
class GpuProbe:
    """Result of one probe.

    backend: "fake" or "nvml"; init_error: set when the library could not start (then
    gpus is empty); device_count: what the library enumerated; handle_errors: (index,
    message) for GPUs whose handle could not be obtained; driver_version or None; hung:
    the call that did not return within its deadline (then the GPUs after it were not
    read: the library is stuck, navarch.agent.deadline).
    """

    backend: str
    gpus: tuple[GpuSnapshot, ...] = ()
    device_count: int | None = None
    init_error: ProbeError | None = None
    handle_errors: tuple[tuple[int, str], ...] = ()
    driver_version: str | None = None
    hung: HungCall | None = None


class GpuBackend(Protocol):
    """What the agent needs from a GPU library: one probe per run, never raising."""

    name: str

    def probe(self) -> GpuProbe:
        """Read every GPU once. Library errors are classified into the probe, not raised."""
        ...


def fake_requested(config_fake: bool) -> bool:
    """True when the fake backend is asked for: config fake_gpu or env NAVARCH_FAKE_GPU=true/1/yes."""
    env = os.environ.get("NAVARCH_FAKE_GPU", "").strip().lower()
    return config_fake or env in {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class InjectedFinding:
    """A finding the fake node's sensors report as such (``navarch local inject --fault``):
    the reading a check that navarch's fake backend does not simulate (an InfiniBand port,
    the NVSwitch fabric, a hung NVML call, the host) would turn into a fault.

    kind: the fault kind (``ib_link_flap``); status / action: the check's status and
    recommended remedy; gpu_index: the GPU it names, None for the node; evidence: JSON-able;
    check: the name of the check that reports it (its fault class, e.g. ``network``).
    """

    kind: str
    status: Status
    action: Remedy
    message: str
    gpu_index: int | None = None
    evidence: Mapping[str, Any] = field(default_factory=dict)
    check: str = "injected"

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> InjectedFinding:
        """From faults.json's ``findings`` item; ValueError (KeyError) when malformed."""
        gpu = doc.get("gpu")
        return cls(
            kind=str(doc["kind"]),
            status=Status(doc.get("status", "unhealthy")),
            action=Remedy(doc.get("action", "reboot")),
            message=str(doc.get("message", doc["kind"])),
            gpu_index=None if gpu is None else int(gpu),
            evidence=dict(doc.get("evidence") or {}),
            check=str(doc.get("check", "injected")),
        )

    def to_dict(self) -> dict[str, Any]:
        """As faults.json's ``findings`` item."""
        return {
            "kind": self.kind,
            "status": self.status.value,
            "action": self.action.value,
            "message": self.message,
            "gpu": self.gpu_index,
            "evidence": dict(self.evidence),
            "check": self.check,
        }


@dataclass(frozen=True)
class FakeFaults:
    """Faults to inject into the fake backend; the JSON format the local provider writes.

    ``{"gpu_lost": [3], "temperature_c": {"2": 97.0}, "ecc_uncorrected": {"1": 2},
    "unreadable": {"4": ["power_w"]}, "utilization_pct": 35.0, "process_count": {"0": 1},
    "remapped_rows_pending": [5], "remapped_rows_failure": [6], "nvlink_down": [7],
    "fabric_degraded": [2], "gpu_hung": 4}`` (every key optional; GPU indices are strings in
    objects, integers in lists; utilization_pct applies to all GPUs; nvlink_down: GPUs
    whose first NVLink link is down; fabric_degraded: GPUs whose fabric health mask says
    degraded bandwidth; gpu_hung: the GPU whose NVML call never returns, so the probe
    stops there, as the NVML backend's does).
    "remapped_rows_pending": [5], "remapped_rows_failure": [6], "nvlink_down": [7]}`` (every
    key optional; GPU indices are strings in objects, integers in lists; utilization_pct
    applies to all GPUs; nvlink_down: GPUs whose first NVLink link is down; ``findings``:
    a list of InjectedFinding objects, ``{"kind": "ib_link_flap", "status": "unhealthy",
    "action": "reboot", "message": "...", "gpu": null, "evidence": {}, "check": "network"}``).
    """

    gpu_lost: frozenset[int] = frozenset()
    temperature_c: Mapping[int, float] = field(default_factory=dict)
    ecc_uncorrected: Mapping[int, int] = field(default_factory=dict)
    unreadable: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    utilization_pct: float | None = None
    process_count: Mapping[int, int] = field(default_factory=dict)
    remapped_rows_pending: frozenset[int] = frozenset()
    remapped_rows_failure: frozenset[int] = frozenset()
    nvlink_down: frozenset[int] = frozenset()
    fabric_degraded: frozenset[int] = frozenset()
    gpu_hung: int | None = None
    findings: tuple[InjectedFinding, ...] = ()

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> FakeFaults:
        """Build from the decoded JSON. Raises ValueError (TypeError) on a malformed document."""

        def idx_map(key: str, conv: Any) -> dict[int, Any]:
            return {int(k): conv(v) for k, v in dict(doc.get(key) or {}).items()}

        util = doc.get("utilization_pct")
        hung = doc.get("gpu_hung")
        return cls(
            gpu_lost=frozenset(int(i) for i in doc.get("gpu_lost") or ()),
            temperature_c=idx_map("temperature_c", float),
            ecc_uncorrected=idx_map("ecc_uncorrected", int),
            unreadable=idx_map("unreadable", lambda v: tuple(str(x) for x in v)),
            utilization_pct=None if util is None else float(util),
            process_count=idx_map("process_count", int),
            remapped_rows_pending=frozenset(int(i) for i in doc.get("remapped_rows_pending") or ()),
            remapped_rows_failure=frozenset(int(i) for i in doc.get("remapped_rows_failure") or ()),
            nvlink_down=frozenset(int(i) for i in doc.get("nvlink_down") or ()),
            fabric_degraded=frozenset(int(i) for i in doc.get("fabric_degraded") or ()),
            gpu_hung=None if hung is None else int(hung),
            findings=tuple(InjectedFinding.from_dict(f) for f in doc.get("findings") or ()),
        )


def load_faults(path: str | os.PathLike[str] | None) -> FakeFaults:
    """Read a faults file; a missing path or file means no faults.

    Raises ValueError when the file exists but is not a valid faults document.
    """
    if not path:
        return FakeFaults()
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return FakeFaults()
    if not text.strip():
        return FakeFaults()
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict):
            raise ValueError("top level must be an object")
        return FakeFaults.from_dict(doc)
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"{path}: bad fake-GPU faults file: {exc}") from exc


# HGX H100 8-GPU baseboard bus numbers as seen on common cloud shapes (e.g. p5.48xlarge).
_H100_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
_H100_NAME = "NVIDIA H100 80GB HBM3"
_H100_MEMORY_BYTES = 81559 * MIB
_H100_NVLINKS = 18
#: Registered with the fabric (state completed), every health field false but degraded
#: bandwidth true, configuration none (nvml.h health mask layout).
_FABRIC_DEGRADED_BW = FabricInfo(
    state=3, status=0, health_mask=0x1 | 2 << 2 | 2 << 4 | 2 << 6 | 1 << 8
)


_READING_FIELDS = frozenset(
    f.name
    for f in dataclasses.fields(GpuSnapshot)
    if f.name
    not in (
        "index",
        "uuid",
        "name",
        "pci_bus_id",
        "lost",
        "reset_required",
        "unreadable",
        "not_supported",
        "serial",
        "mig_current",
        "mig_pending",
        "fabric",
    )
)


def _fake_uuid(node: str, index: int) -> str:
    h = hashlib.sha256(f"navarch-fake-gpu|{node}|{index}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _bus(index: int) -> int:
    if index < len(_H100_BUSES):
        return _H100_BUSES[index]
    return (0xE0 + index - len(_H100_BUSES)) & 0xFF


class FakeGpuBackend:
    """H100 80GB HBM3 node simulated from the node name, with injected faults.

    Readings are deterministic per (node, GPU index): temperature 35-45 C, power 70-120 W
    idle, thresholds of an H100 SXM (slowdown 89 C, shutdown 92 C, max operating 87 C).
    An injected uncorrectable ECC count also sets the driver recovery action to GPU_RESET,
    as the driver does after an uncontained DBE (XID 48 then XID 154). The readings are a
    pure function of the node, the GPU count and the faults, so one backend probes once
    and returns that probe again (navarch simulate probes each node every agent period).
    """

    name = "fake"

    def __init__(self, node: str, gpu_count: int = 8, faults: FakeFaults | None = None) -> None:
        self.node = node
        self.gpu_count = gpu_count
        self.faults = faults or FakeFaults()
        self._probe: GpuProbe | None = None

    def _gpu(self, i: int) -> GpuSnapshot:
        f = self.faults
        seed = int(hashlib.sha256(f"{self.node}|{i}".encode()).hexdigest()[:8], 16)
        uuid = _fake_uuid(self.node, i)
        bdf = f"0000:{_bus(i):02x}:00"
        if i in f.gpu_lost:
            return GpuSnapshot(
                index=i,
                uuid=uuid,
                name=_H100_NAME,
                pci_bus_id=bdf,
                lost=True,
                unreadable={"all": "GPU is lost"},
            )
        processes = f.process_count.get(i, 0)
        util = (
            f.utilization_pct
            if f.utilization_pct is not None
            else (0.0 if processes == 0 else 92.0)
        )
        values: dict[str, Any] = {
            "temperature_c": f.temperature_c.get(i, 35.0 + (seed % 100) / 10.0),
            "power_w": round(70.0 + (seed >> 8) % 500 / 10.0 + 4.5 * util, 1),
            "memory_used_bytes": (processes * 61440 + 1) * MIB if processes else 1 * MIB,
            "utilization_pct": min(100.0, max(0.0, util)),
        }
        unreadable = {m: "injected: unreadable" for m in f.unreadable.get(i, ())}
        ecc = f.ecc_uncorrected.get(i, 0)
        snap = GpuSnapshot(
            index=i,
            uuid=uuid,
            name=_H100_NAME,
            pci_bus_id=bdf,
            serial=f"165{seed % 10**10:010d}",
            mig_current=False,
            mig_pending=False,
            temperature_slowdown_c=89.0,
            temperature_shutdown_c=92.0,
            temperature_gpu_max_c=87.0,
            power_limit_w=700.0,
            power_default_limit_w=700.0,
            memory_total_bytes=_H100_MEMORY_BYTES,
            process_count=processes,
            ecc_uncorrected_volatile=ecc,
            ecc_corrected_volatile=0,
            remapped_rows_corrected=0,
            remapped_rows_uncorrected=0,
            remapped_rows_pending=i in f.remapped_rows_pending,
            remapped_rows_failure=i in f.remapped_rows_failure,
            recovery_action=1 if ecc > 0 else 0,
            clock_event_reasons=0x1 if util == 0 else 0x0,
            pcie_link_width=16,
            pcie_link_width_max=16,
            pcie_link_gen_max=5,
            pcie_replay_count=0,
            nvlink_active=(i not in f.nvlink_down,) + (True,) * (_H100_NVLINKS - 1),
            nvlink_errors={"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0},
            persistence_mode=True,
            inforom_valid=True,
            ecc_mode_current=True,
            ecc_mode_pending=True,
            fabric=_FABRIC_DEGRADED_BW if i in f.fabric_degraded else None,
            unreadable=unreadable,
            not_supported=("retired_pages",),
            **values,
        )
        # Any reading named in "unreadable" reads as None (e.g. "power_w", "process_count").
        blank: dict[str, Any] = {m: None for m in unreadable if m in _READING_FIELDS}
        return dataclasses.replace(snap, **blank) if blank else snap

    def probe(self) -> GpuProbe:
        """Snapshot of gpu_count fake GPUs with the faults applied."""
        if self._probe is None:
            hung_at = self.faults.gpu_hung
            read = self.gpu_count if hung_at is None else min(hung_at, self.gpu_count)
            hung = None
            if hung_at is not None and hung_at < self.gpu_count:
                bdf = f"0000:{_bus(hung_at):02x}:00"
                uuid = _fake_uuid(self.node, hung_at)
                hung = HungCall("nvmlDeviceGetPowerUsage", 10.0, hung_at, bdf, uuid)
            self._probe = GpuProbe(
                backend="fake",
                gpus=tuple(self._gpu(i) for i in range(read)),
                device_count=self.gpu_count,
                driver_version="570.133.20",
                hung=hung,
            )
        return self._probe

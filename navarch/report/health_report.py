"""The node health report as types: what the agent writes and the reconciler reads.

One report per node, written by ``navarch agent run --once`` to
``health/<fleet>/<pool>/<node>.json`` and described by schemas/health-report.schema.json
(version ``REPORT_SCHEMA_VERSION``). gpud's ``api/v1/types.go`` is the model: the message
is defined once, here, and the agent (navarch.agent.runner), the reconciler
(navarch.reconcile.reports) and the tests (tests/support/reports.py) share it.
tests/reports/test_health_report_types.py walks the schema and these dataclasses both
ways, so the two cannot drift apart.

::

    HealthReport                         the whole report
      checks:  tuple[ReportCheck, ...]   one finding each (fault_key: navarch.report.health.FaultKey)
      gpus:    tuple[GpuReading, ...]    identity and readings per GPU
      xids:    tuple[ReportXid, ...]     this boot's latched XID / SXid events
      notice:  ReportNotice | None       a pending preemption or maintenance
      signature: ReportSignature | None  HMAC-SHA256 (navarch.report.signing); None until signed
      acceptance: AcceptanceRun | None   this boot's acceptance run (navarch.report.acceptance); None:
                                         the pool asks for none

Field names are the JSON keys. ``to_json`` gives the dict the agent signs (navarch.report.signing
signs its RFC 8785 canonical form, so the stored bytes are the same whatever the key
order); ``from_json`` is its inverse for a document the schema accepts (it raises
KeyError, TypeError or ValueError on one it does not). Times stay the RFC 3339 text that
was signed. A field whose default is None and whose schema type has no null is left out
of the JSON when None (``boots_seen``, ``first_seen``, ``consecutive``, ``plugin``,
``acceptance``).

Also here, the words of the report's seams: ``NoticeKind`` (what a notice announces),
``NoticeSource``, ``XidKind`` and ``RejectReason`` (why the reconciler refused a stored
report).

This module is shipped to GPU nodes in the agent bundle (Python 3.9, standard library
and navarch's bundled modules only): no ``match``, no ``X | Y`` outside annotations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from navarch.report.acceptance import AcceptanceRun
from navarch.report.compat import StrEnum
from navarch.report.health import FaultKey, Remedy, Status
from navarch.report.xid import Severity

__all__ = [
    "REPORT_SCHEMA_VERSION",
    "SIGNATURE_ALG",
    "GpuReading",
    "GpuRef",
    "HealthReport",
    "NoticeKind",
    "NoticeSource",
    "RejectReason",
    "ReportCheck",
    "ReportNotice",
    "ReportSignature",
    "ReportXid",
    "XidKind",
]

#: The health report's schema version; version 2 gave every check its structured fault
#: key and the agent's fault counts. The reconciler reads only this version.
REPORT_SCHEMA_VERSION = 2
#: The one signature algorithm (navarch.report.signing.ALG).
SIGNATURE_ALG = "HMAC-SHA256"


class NoticeKind(StrEnum):
    """What a cloud's notice announces: the spot instance is being reclaimed
    (``preemption``), or the host is going down for ``maintenance``. Serialised by value."""

    PREEMPTION = "preemption"
    MAINTENANCE = "maintenance"


class NoticeSource(StrEnum):
    """The cloud whose metadata service announced a notice (``local``: the local provider's
    notice file, and any source the agent does not know)."""

    AWS = "aws"
    GCP = "gcp"
    AZURE = "azure"
    LOCAL = "local"


class XidKind(StrEnum):
    """An event of the GPU's XID catalogue (``xid``) or of the NVSwitch's (``sxid``)."""

    XID = "xid"
    SXID = "sxid"


class RejectReason(StrEnum):
    """Why the reconciler refused a stored report, in the order it checks (the first that
    fails is the reason; navarch.reconcile.reports explains each). Serialised by value: it
    is the ``rejected`` word of ``navarch status`` and a metrics label."""

    UNREADABLE = "unreadable"
    OVERSIZED = "oversized"
    MALFORMED = "malformed"
    SCHEMA = "schema"
    IDENTITY = "identity"
    UNSIGNED = "unsigned"
    NO_SECRET = "no_secret"
    BAD_SIGNATURE = "bad_signature"
    REPLAYED = "replayed"
    FUTURE = "future"
    CHECK_FAILED = "check_failed"
    #: not a reason this version checks: read from a state another version wrote
    UNRECOGNISED = "unrecognised"

    @classmethod
    def of(cls, value: str) -> RejectReason:
        """The member whose value is `value`; UNRECOGNISED for a word this version does
        not know (a state document written by another version), never an error."""
        try:
            return cls(value)
        except ValueError:
            return cls.UNRECOGNISED


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


# Members by value: a dict lookup is several times cheaper than calling the enum, and the
# reconciler types every check that says something (navarch.reconcile.reports.summarize).
_STATUSES = {m.value: m for m in Status}
_REMEDIES = {m.value: m for m in Remedy}


def _status(value: Any) -> Status:
    return _STATUSES.get(value) or Status(value)


def _remedy(value: Any) -> Remedy:
    return _REMEDIES.get(value) or Remedy(value)


@dataclass(frozen=True)
class GpuRef:
    """Which GPU a finding is about, beyond its index (``checks[].gpu``): the PCI bus id
    (normalised dddd:bb:dd), the board serial and the UUID, each None where NVML did not
    say. Lets an operator find the board to swap without reading gpus[]."""

    pci_bus_id: str | None = None
    serial: str | None = None
    uuid: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The ``gpu`` object: only the fields known."""
        doc = {"pci_bus_id": self.pci_bus_id, "serial": self.serial, "uuid": self.uuid}
        return {k: v for k, v in doc.items() if v is not None}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> GpuRef:
        """Inverse of ``to_json``."""
        return cls(doc.get("pci_bus_id"), doc.get("serial"), doc.get("uuid"))


@dataclass(frozen=True)
class ReportCheck:
    """One finding (``checks[]``). gpu_index: None for a node-wide check; evidence: the
    JSON facts behind it; fault_key: the fault it reports (None when healthy or unknown);
    boots_seen / first_seen (RFC 3339 UTC) / consecutive: the agent's counts of that fault,
    only with a fault_key; plugin: the navarch.checks plugin that made it (None: built-in);
    gpu: the GPU's identity on a finding (a check not healthy) about one GPU.
    """

    name: str
    status: Status
    action: Remedy
    message: str
    gpu_index: int | None = None
    evidence: Mapping[str, Any] = field(default_factory=dict)
    fault_key: FaultKey | None = None
    boots_seen: int | None = None
    first_seen: str | None = None
    consecutive: int | None = None
    plugin: str | None = None
    gpu: GpuRef | None = None

    def to_json(self) -> dict[str, Any]:
        """The ``checks[]`` item; the counts, plugin and gpu only when set."""
        out: dict[str, Any] = {
            "name": self.name,
            "status": self.status.value,
            "action": self.action.value,
            "message": self.message,
            "gpu_index": self.gpu_index,
            "evidence": dict(self.evidence),
            "fault_key": self.fault_key.to_json() if self.fault_key is not None else None,
        }
        if self.boots_seen is not None:
            out["boots_seen"] = self.boots_seen
        if self.first_seen is not None:
            out["first_seen"] = self.first_seen
        if self.consecutive is not None:
            out["consecutive"] = self.consecutive
        if self.plugin is not None:
            out["plugin"] = self.plugin
        if self.gpu is not None:
            out["gpu"] = self.gpu.to_json()
        return out

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ReportCheck:
        """Inverse of ``to_json``."""
        key = doc.get("fault_key")
        return cls(
            str(doc["name"]),
            _status(doc["status"]),
            _remedy(doc["action"]),
            str(doc["message"]),
            _opt_int(doc.get("gpu_index")),
            doc.get("evidence") or {},
            FaultKey.from_json(key) if key is not None else None,
            _opt_int(doc.get("boots_seen")),
            doc.get("first_seen"),
            _opt_int(doc.get("consecutive")),
            doc.get("plugin"),
            GpuRef.from_json(doc["gpu"]) if doc.get("gpu") is not None else None,
        )


@dataclass(frozen=True)
class GpuReading:
    """One GPU (``gpus[]``): its identity and readings, units in the names; None: not read.
    serial: the board serial; mig_mode: MIG enabled (both written only when known)."""

    index: int
    uuid: str
    name: str
    pci_bus_id: str
    temperature_c: float | None = None
    power_w: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    utilization_pct: float | None = None
    process_count: int | None = None
    serial: str | None = None
    mig_mode: bool | None = None

    def to_json(self) -> dict[str, Any]:
        """The ``gpus[]`` item, every reading present (null when not read); serial and
        mig_mode only when known (reports from older agents have neither)."""
        extra: dict[str, Any] = {}
        if self.serial is not None:
            extra["serial"] = self.serial
        if self.mig_mode is not None:
            extra["mig_mode"] = self.mig_mode
        return {
            **extra,
            "index": self.index,
            "uuid": self.uuid,
            "name": self.name,
            "pci_bus_id": self.pci_bus_id,
            "temperature_c": self.temperature_c,
            "power_w": self.power_w,
            "memory_used_bytes": self.memory_used_bytes,
            "memory_total_bytes": self.memory_total_bytes,
            "utilization_pct": self.utilization_pct,
            "process_count": self.process_count,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> GpuReading:
        """Inverse of ``to_json``."""
        return cls(
            int(doc["index"]),
            str(doc["uuid"]),
            str(doc["name"]),
            str(doc["pci_bus_id"]),
            doc.get("temperature_c"),
            doc.get("power_w"),
            doc.get("memory_used_bytes"),
            doc.get("memory_total_bytes"),
            doc.get("utilization_pct"),
            doc.get("process_count"),
            doc.get("serial"),
            doc.get("mig_mode"),
        )


@dataclass(frozen=True)
class ReportXid:
    """One latched XID / SXid event (``xids[]``). time: RFC 3339 UTC when the kernel log
    gave a wall time, else None; severity and action: navarch's XID catalogue
    (navarch.report.xid); count: kernel log lines collapsed into this event (bursts)."""

    code: int
    pci_bus_id: str
    time: str | None
    boot_id: str
    severity: Severity
    action: Remedy
    message: str
    kind: XidKind = XidKind.XID
    count: int = 1

    def to_json(self) -> dict[str, Any]:
        """The ``xids[]`` item, kind and count always present."""
        return {
            "code": self.code,
            "kind": self.kind.value,
            "pci_bus_id": self.pci_bus_id,
            "time": self.time,
            "boot_id": self.boot_id,
            "severity": self.severity.value,
            "action": self.action.value,
            "message": self.message,
            "count": self.count,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ReportXid:
        """Inverse of ``to_json`` (kind "xid" and count 1 when absent)."""
        return cls(
            int(doc["code"]),
            str(doc["pci_bus_id"]),
            doc.get("time"),
            str(doc["boot_id"]),
            Severity(doc["severity"]),
            Remedy(doc["action"]),
            str(doc["message"]),
            XidKind(doc.get("kind", XidKind.XID.value)),
            int(doc.get("count", 1)),
        )


@dataclass(frozen=True)
class ReportNotice:
    """A pending interruption (``notice``): its kind, the cloud that announced it, its
    deadline (RFC 3339 UTC) when known, and the cloud's words (at most 512 characters)."""

    kind: NoticeKind
    source: NoticeSource
    deadline: str | None = None
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        """The ``notice`` object, every field present."""
        return {
            "kind": self.kind.value,
            "source": self.source.value,
            "deadline": self.deadline,
            "detail": self.detail,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ReportNotice:
        """Inverse of ``to_json``."""
        return cls(
            NoticeKind(doc["kind"]),
            NoticeSource(doc["source"]),
            doc.get("deadline"),
            str(doc.get("detail", "")),
        )


@dataclass(frozen=True)
class ReportSignature:
    """HMAC-SHA256 over the canonical JSON of every other field (navarch.report.signing)."""

    alg: str
    value: str

    def to_json(self) -> dict[str, Any]:
        """The ``signature`` object."""
        return {"alg": self.alg, "value": self.value}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ReportSignature:
        """Inverse of ``to_json``."""
        return cls(str(doc["alg"]), str(doc["value"]))


@dataclass(frozen=True)
class HealthReport:
    """One node's health report (schemas/health-report.schema.json).

    status: the worst check status; action: the strongest remedy the catalogue recommends
    over the checks (the planner's ladder alone decides); health_score: 0..100;
    sequence: grows by one with every report the node writes, across reboots;
    generated_at: RFC 3339 UTC by the node's clock; boot_id: the kernel's, new each boot.
    signature: None until signed (navarch.report.signing.sign_for_store adds it to the JSON).
    acceptance: the acceptance suite's run for this boot (and GPU-reset generation), in
    every report of the boot once started; None (left out of the JSON) when the agent has
    no acceptance policy.
    """

    fleet: str
    pool: str
    node: str
    instance_id: str
    boot_id: str
    agent_version: str
    sequence: int
    generated_at: str
    status: Status
    action: Remedy
    health_score: int
    checks: tuple[ReportCheck, ...] = ()
    gpus: tuple[GpuReading, ...] = ()
    xids: tuple[ReportXid, ...] = ()
    notice: ReportNotice | None = None
    signature: ReportSignature | None = None
    schema_version: int = REPORT_SCHEMA_VERSION
    acceptance: AcceptanceRun | None = None

    def to_json(self) -> dict[str, Any]:
        """The report document; ``signature`` only when signed."""
        out: dict[str, Any] = {
            "schema_version": self.schema_version,
            "fleet": self.fleet,
            "pool": self.pool,
            "node": self.node,
            "instance_id": self.instance_id,
            "boot_id": self.boot_id,
            "agent_version": self.agent_version,
            "sequence": self.sequence,
            "generated_at": self.generated_at,
            "status": self.status.value,
            "action": self.action.value,
            "health_score": self.health_score,
            "checks": [c.to_json() for c in self.checks],
            "gpus": [g.to_json() for g in self.gpus],
            "xids": [x.to_json() for x in self.xids],
            "notice": self.notice.to_json() if self.notice is not None else None,
        }
        if self.signature is not None:
            out["signature"] = self.signature.to_json()
        if self.acceptance is not None:
            out["acceptance"] = self.acceptance.to_json()
        return out

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> HealthReport:
        """Inverse of ``to_json``, for a document the schema accepts."""
        notice = doc.get("notice")
        signature = doc.get("signature")
        acceptance = doc.get("acceptance")
        return cls(
            fleet=str(doc["fleet"]),
            pool=str(doc["pool"]),
            node=str(doc["node"]),
            instance_id=str(doc["instance_id"]),
            boot_id=str(doc["boot_id"]),
            agent_version=str(doc["agent_version"]),
            sequence=int(doc["sequence"]),
            generated_at=str(doc["generated_at"]),
            status=Status(doc["status"]),
            action=Remedy(doc["action"]),
            health_score=int(doc["health_score"]),
            checks=tuple(ReportCheck.from_json(c) for c in doc.get("checks", ())),
            gpus=tuple(GpuReading.from_json(g) for g in doc.get("gpus", ())),
            xids=tuple(ReportXid.from_json(x) for x in doc.get("xids", ())),
            notice=ReportNotice.from_json(notice) if notice is not None else None,
            signature=ReportSignature.from_json(signature) if signature is not None else None,
            schema_version=int(doc.get("schema_version", REPORT_SCHEMA_VERSION)),
            acceptance=AcceptanceRun.from_json(acceptance) if acceptance is not None else None,
        )

"""The one report builder for tests that read health reports (navarch.report.health_report types,
schemas/health-report.schema.json version 2).

``health_report(**over)`` gives a typed report, ``report_doc(**over)`` its JSON with
top-level fields replaced as given (raw JSON, so a test may put there what no agent
writes), ``signed_report_bytes`` the bytes an agent stores. Parts: ``GPU0``, ``XID79``,
``xid_check``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from navarch.report import signing
from navarch.report.health import FaultKey, Remedy, Status
from navarch.report.health_report import GpuReading, HealthReport, ReportCheck, ReportXid
from navarch.report.xid import Severity

#: One GPU running one process, as an H100 reports it.
GPU0 = GpuReading(
    index=0,
    uuid="GPU-1",
    name="NVIDIA H100 80GB HBM3",
    pci_bus_id="0000:18:00",
    utilization_pct=40.0,
    process_count=1,
)

#: XID 79 on GPU0, as the agent latches it.
XID79 = ReportXid(
    code=79,
    pci_bus_id="0000:18:00",
    time=None,
    boot_id="boot-a",
    severity=Severity.FATAL,
    action=Remedy.REBOOT,
    message="GPU has fallen off the bus",
)

#: A healthy report of demo-train-0001 (GPU0, no XID, generated 2026-11-01 11:59:30 UTC,
#: unsigned).
HEALTHY = HealthReport(
    fleet="demo",
    pool="train",
    node="demo-train-0001",
    instance_id="i-1",
    boot_id="boot-a",
    agent_version="0.1.0",
    sequence=7,
    generated_at="2026-11-01T11:59:30Z",
    status=Status.HEALTHY,
    action=Remedy.NONE,
    health_score=100,
    gpus=(GPU0,),
)


def xid_check(message: str, *, gpu_index: int | None = 0, kind: str = "xid:79") -> ReportCheck:
    """The unhealthy ``xid`` check an agent writes for a latched fatal XID (action reboot)."""
    return ReportCheck(
        "xid",
        Status.UNHEALTHY,
        Remedy.REBOOT,
        message,
        gpu_index,
        {},
        FaultKey(kind, gpu_index),
    )


def health_report(**over: Any) -> HealthReport:
    """HEALTHY with the given fields replaced (dataclasses.replace: typed values)."""
    return replace(HEALTHY, **over)


def report_doc(**over: Any) -> dict[str, Any]:
    """HEALTHY as JSON; keyword arguments replace its top-level fields (raw JSON values)."""
    return {**HEALTHY.to_json(), **over}


def xid79_report_doc(**over: Any) -> dict[str, Any]:
    """report_doc with XID 79 latched: unhealthy, reboot, and a zero signature in place."""
    return report_doc(
        **{
            "status": "unhealthy",
            "action": "reboot",
            "health_score": 20,
            "xids": [XID79.to_json()],
            "signature": {"alg": "HMAC-SHA256", "value": "0" * 64},
            **over,
        }
    )


def signed_report_bytes(report: HealthReport | dict[str, Any], fleet_secret: bytes) -> bytes:
    """The bytes the node's agent stores for report: signed with the node's key derived
    from fleet_secret (navarch.report.signing.sign_for_store)."""
    doc = report.to_json() if isinstance(report, HealthReport) else report
    key = signing.derive_node_key(fleet_secret, doc["fleet"], doc["node"])
    return signing.sign_for_store(doc, key)[1]

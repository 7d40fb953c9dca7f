"""Agent reports for tests that read them (schemas/health-report.schema.json, version 2)."""

from __future__ import annotations

from typing import Any

#: One GPU running one process, as an H100 reports it.
GPU0: dict[str, Any] = {
    "index": 0,
    "uuid": "GPU-1",
    "name": "NVIDIA H100 80GB HBM3",
    "pci_bus_id": "0000:18:00",
    "utilization_pct": 40.0,
    "process_count": 1,
}

#: XID 79 on GPU0, as the agent latches it.
XID79: dict[str, Any] = {
    "code": 79,
    "pci_bus_id": "0000:18:00",
    "time": None,
    "boot_id": "boot-a",
    "severity": "fatal",
    "action": "reboot",
    "message": "GPU has fallen off the bus",
}


def report_doc(**over: Any) -> dict[str, Any]:
    """A healthy report of demo-train-0001 (GPU0, no XID, generated 2026-11-01 11:59:30 UTC,
    unsigned); keyword arguments replace its top-level fields."""
    report: dict[str, Any] = {
        "schema_version": 2,
        "fleet": "demo",
        "pool": "train",
        "node": "demo-train-0001",
        "instance_id": "i-1",
        "boot_id": "boot-a",
        "agent_version": "0.1.0",
        "sequence": 7,
        "generated_at": "2026-11-01T11:59:30Z",
        "status": "healthy",
        "action": "none",
        "health_score": 100,
        "checks": [],
        "gpus": [dict(GPU0)],
        "xids": [],
        "notice": None,
    }
    report.update(over)
    return report


def xid79_report_doc(**over: Any) -> dict[str, Any]:
    """report_doc with XID 79 latched: unhealthy, reboot, and a zero signature in place."""
    return report_doc(
        **{
            "status": "unhealthy",
            "action": "reboot",
            "health_score": 20,
            "xids": [dict(XID79)],
            "signature": {"alg": "HMAC-SHA256", "value": "0" * 64},
            **over,
        }
    )

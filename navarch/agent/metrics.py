"""The agent's Prometheus textfile: `navarch agent run --metrics-textfile
PATH` writes the node's GPU readings beside its report, for node_exporter's textfile
collector (atomic write then rename).

Metrics are derived from the report the agent just made (one source of truth: what the
reconciler judges is what Prometheus graphs). Names follow the Prometheus conventions
(base units, ratios 0-1, `_total` for counters); labels fleet, pool, node, and per GPU
gpu (index), uuid, pci_bus_id:

    navarch_node_gpu_temperature_celsius      gauge
    navarch_node_gpu_power_watts              gauge
    navarch_node_gpu_utilization_ratio        gauge (utilization_pct / 100)
    navarch_node_gpu_memory_used_bytes        gauge
    navarch_node_gpu_memory_total_bytes       gauge
    navarch_node_gpu_ecc_errors_total{type}   counter: volatile ECC errors (corrected |
                                              uncorrected), from the ecc check's evidence
    navarch_node_gpu_xid_errors_total{code}   counter: XID events in the kernel log since
                                              boot (latched), per GPU and code
    navarch_node_health_score                 gauge 0-100
    navarch_node_health_status{status}        gauge: 1 for the report's status, else 0
    navarch_node_report_timestamp_seconds     gauge: the report's generated_at
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

STATUSES = ("healthy", "degraded", "unhealthy", "unknown")


_BASE_LABELS = ("fleet", "pool", "node")
_PER_GPU_LABELS = (*_BASE_LABELS, "gpu", "uuid", "pci_bus_id")

#: Report field of a GPU reading -> (metric name, help text, scale to the metric's unit).
_READINGS = (
    ("temperature_c", "navarch_node_gpu_temperature_celsius", "GPU temperature", 1.0),
    ("power_w", "navarch_node_gpu_power_watts", "GPU power draw", 1.0),
    ("utilization_pct", "navarch_node_gpu_utilization_ratio", "GPU utilisation, 0 to 1", 0.01),
    ("memory_used_bytes", "navarch_node_gpu_memory_used_bytes", "GPU memory in use", 1.0),
    ("memory_total_bytes", "navarch_node_gpu_memory_total_bytes", "GPU memory size", 1.0),
)

#: ECC check evidence key -> the `type` label of the ECC counter.
_ECC_KINDS = (("corrected_volatile", "corrected"), ("uncorrected_volatile", "uncorrected"))


def report_registry(report: Mapping[str, Any]) -> Any:
    """A prometheus_client CollectorRegistry holding the metrics of one health report
    (schemas/health-report.schema.json). Missing readings are left out, never zero."""
    from prometheus_client import CollectorRegistry, disable_created_metrics

    disable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus_client is untyped here
    reg = CollectorRegistry()
    node = [str(report.get(k, "")) for k in _BASE_LABELS]
    gpu_labels, by_pci = _gpu_readings(reg, report, node)
    _ecc_errors(reg, report, gpu_labels)
    _xid_errors(reg, report, node, by_pci)
    _node_health(reg, report, node)
    return reg


def _gpu_readings(
    reg: Any, report: Mapping[str, Any], node: list[str]
) -> tuple[dict[int, list[str]], dict[str, list[str]]]:
    """Set each GPU's readings; return its labels by GPU index and by lower-case PCI bus id."""
    from prometheus_client import Gauge

    gauges = [
        (field, Gauge(name, doc, _PER_GPU_LABELS, registry=reg), scale)
        for field, name, doc, scale in _READINGS
    ]
    gpu_labels: dict[int, list[str]] = {}
    by_pci: dict[str, list[str]] = {}
    for g in report.get("gpus", ()):
        labels = [
            *node,
            str(g.get("index", "")),
            str(g.get("uuid", "")),
            str(g.get("pci_bus_id", "")),
        ]
        gpu_labels[int(g.get("index", -1))] = labels
        by_pci[str(g.get("pci_bus_id", "")).lower()] = labels
        for field, metric, scale in gauges:
            if g.get(field) is not None:
                metric.labels(*labels).set(float(g[field]) * scale)
    return gpu_labels, by_pci


def _ecc_errors(reg: Any, report: Mapping[str, Any], gpu_labels: dict[int, list[str]]) -> None:
    """Count the ecc checks' volatile errors against the GPU each check names."""
    from prometheus_client import Counter as PromCounter

    ecc = PromCounter(
        "navarch_node_gpu_ecc_errors",
        "Volatile ECC errors since the driver loaded",
        [*_PER_GPU_LABELS, "type"],
        registry=reg,
    )
    for c in report.get("checks", ()):
        if c.get("name") == "ecc" and c.get("gpu_index") in gpu_labels:
            ev = c.get("evidence") or {}
            for key, kind in _ECC_KINDS:
                if isinstance(ev.get(key), int | float):
                    ecc.labels(*gpu_labels[c["gpu_index"]], kind).inc(ev[key])


def _xid_errors(
    reg: Any, report: Mapping[str, Any], node: list[str], by_pci: dict[str, list[str]]
) -> None:
    """Count XID events per GPU (by PCI bus id; an unknown bus id keeps only that) and code."""
    from prometheus_client import Counter as PromCounter

    xid = PromCounter(
        "navarch_node_gpu_xid_errors",
        "XID events in the kernel log since boot",
        [*_PER_GPU_LABELS, "code"],
        registry=reg,
    )
    counts = Counter(
        (str(x.get("pci_bus_id", "")).lower(), int(x.get("code", 0)))
        for x in report.get("xids", ())
    )
    for (pci, code), n in sorted(counts.items()):
        labels = by_pci.get(pci, [*node, "", "", pci])
        xid.labels(*labels, str(code)).inc(n)


def _node_health(reg: Any, report: Mapping[str, Any], node: list[str]) -> None:
    """Set the node's score, its one-hot status and, when the report has one, its timestamp."""
    from prometheus_client import Gauge

    Gauge(
        "navarch_node_health_score", "The node's health score, 0-100", _BASE_LABELS, registry=reg
    ).labels(*node).set(float(report.get("health_score", 0)))
    status = Gauge(
        "navarch_node_health_status",
        "1 for the node's current status",
        [*_BASE_LABELS, "status"],
        registry=reg,
    )
    for s in STATUSES:
        status.labels(*node, s).set(1 if report.get("status") == s else 0)
    when = report.get("generated_at")
    if isinstance(when, str):
        stamp = datetime.fromisoformat(when.replace("Z", "+00:00")).timestamp()
        Gauge(
            "navarch_node_report_timestamp_seconds",
            "When the report was made",
            _BASE_LABELS,
            registry=reg,
        ).labels(*node).set(stamp)


def write_report_metrics(path: str | Path, report: Mapping[str, Any]) -> None:
    """Write the report's metrics to path for node_exporter's textfile collector
    (prometheus_client.write_to_textfile: a temporary file renamed into place).
    Raises OSError when the directory is not writable."""
    from prometheus_client import write_to_textfile

    write_to_textfile(str(path), report_registry(report))

"""Reading and verifying node health reports (reconciler side).

A report is accepted only if it is (checked in this order; the first failure is the
rejection reason, counted by reason in the state and shown by `navarch status`):
  oversized     larger than MAX_REPORT_BYTES
  malformed     not UTF-8 JSON object
  schema        not valid against schemas/health-report.schema.json
  identity      its fleet/pool/node differ from the key it was stored under
  unsigned      no signature
  no_secret     the reconciler has no fleet secret to check it with
  bad_signature HMAC-SHA256 does not match the node's derived key (navarch.signing)
  replayed      its sequence is not above the last accepted one for the node
  future        generated more than FUTURE_SKEW_S ahead of the reconciler's clock
A rejected report never makes a node unhealthy (DESIGN.md safety rule 2).

Schema checks use jsonschema-rs (the same JSON Schema 2020-12 semantics as the
jsonschema package, compiled): a cold plan checks thousands of reports, and the pure-
Python validator cost about 4 ms per report, most of a cold plan's time.

Unchanged reports are not fetched again: listing gives each object's version (ETag,
generation, inode), and a node whose version equals the one in Memory reuses its summary.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timedelta
from functools import cache
from typing import Any

from navarch import signing
from navarch.errors import NotFound, ReportRejected
from navarch.planner.model import Memory, ReportObservation, ReportSummary, parse_ts
from navarch.reconcile.state import health_prefix
from navarch.spec import load_schema
from navarch.stores.base import ObjectStore, parallel_map

MAX_REPORT_BYTES = 256 * 1024
FUTURE_SKEW_S = 120
REJECT_REASONS = ("oversized", "malformed", "schema", "identity", "unsigned", "no_secret",
                  "bad_signature", "replayed", "future")
_SEVERITY_RANK = {"unhealthy": 0, "degraded": 1, "unknown": 2, "healthy": 3}


@cache
def _report_validator() -> Any:
    """The compiled validator for schemas/health-report.schema.json (formats checked)."""
    import jsonschema_rs

    return jsonschema_rs.validator_for(load_schema("health-report.schema.json"),
                                       validate_formats=True)


def summarize(report: Mapping[str, Any]) -> ReportSummary:
    """Reduce a verified report to what the planner needs (see ReportSummary)."""
    findings: list[str] = []
    fatal = False
    for x in report.get("xids", []):
        if x.get("severity") == "fatal":
            fatal = True
            label = "SXid" if x.get("kind") == "sxid" else "XID"
            findings.append(f"{label} {x['code']}: {x['message']} on {x['pci_bus_id']}")
    checks = sorted(
        (c for c in report.get("checks", []) if c["status"] in ("unhealthy", "degraded", "unknown")),
        key=lambda c: (_SEVERITY_RANK[c["status"]], c["name"]),
    )
    for c in checks:
        where = f" (GPU {c['gpu_index']})" if c.get("gpu_index") is not None else ""
        findings.append(f"{c['name']}{where}: {c['message']}")
    gpus = report.get("gpus", [])
    procs = [g.get("process_count") for g in gpus]
    utils = [g.get("utilization_pct") for g in gpus if g.get("utilization_pct") is not None]
    notice = report.get("notice") or {}
    return ReportSummary(
        sequence=report["sequence"],
        boot_id=report["boot_id"],
        generated_at=parse_ts(report["generated_at"]),
        status=report["status"],
        action=report["action"],
        health_score=report["health_score"],
        fatal=fatal,
        findings=tuple(dict.fromkeys(findings))[:5],
        notice_kind=notice.get("kind"),
        notice_deadline=parse_ts(notice.get("deadline")),
        process_count=sum(procs) if gpus and all(p is not None for p in procs) else None,
        utilization_pct=round(sum(utils) / len(utils), 1) if utils else None,
        gpu_count=len(gpus),
    )


def verify_report(
    data: bytes,
    *,
    fleet: str,
    pool: str,
    node: str,
    fleet_secret: bytes | None,
    last_sequence: int,
    now: datetime,
) -> ReportSummary:
    """Check one stored report; return its summary or raise ReportRejected(reason)."""
    if len(data) > MAX_REPORT_BYTES:
        raise ReportRejected("oversized", f"{len(data)} bytes > {MAX_REPORT_BYTES}")
    try:
        report = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ReportRejected("malformed", str(exc)[:100]) from exc
    if not isinstance(report, dict):
        raise ReportRejected("malformed", "not a JSON object")
    if "signature" not in report:
        raise ReportRejected("unsigned")
    validator = _report_validator()
    if not validator.is_valid(report):
        first = next(iter(validator.iter_errors(report)))
        raise ReportRejected("schema", first.message[:200])
    if (report["fleet"], report["pool"], report["node"]) != (fleet, pool, node):
        raise ReportRejected("identity", f"claims {report['fleet']}/{report['pool']}/{report['node']}")
    if fleet_secret is None:
        raise ReportRejected("no_secret")
    if not signing.verify(report, signing.derive_node_key(fleet_secret, fleet, node)):
        raise ReportRejected("bad_signature")
    if report["sequence"] <= last_sequence:
        raise ReportRejected("replayed", f"sequence {report['sequence']} <= {last_sequence}")
    try:
        generated = parse_ts(report["generated_at"])
    except ValueError as exc:
        raise ReportRejected("schema", "generated_at is not RFC 3339 with a timezone") from exc
    if generated is None or generated > now + timedelta(seconds=FUTURE_SKEW_S):
        raise ReportRejected("future", f"generated_at {report['generated_at']}")
    return summarize(report)


def read_reports(
    store: ObjectStore,
    fleet: str,
    memory: Memory,
    fleet_secret: bytes | None,
    now: datetime,
) -> dict[str, ReportObservation]:
    """List health/<fleet>/, fetch changed reports, verify them -> node -> observation.

    Reports whose version equals the one remembered for the node are not fetched. Keys
    that do not look like health/<fleet>/<pool>/<node>.json are ignored.
    """
    prefix = health_prefix(fleet)
    listed: dict[str, tuple[str, str, str]] = {}  # key -> (pool, node, version)
    for info in store.list(prefix):
        parts = info.key[len(prefix):].split("/")
        if len(parts) != 2 or not parts[1].endswith(".json"):
            continue
        listed[info.key] = (parts[0], parts[1][: -len(".json")], info.version)

    out: dict[str, ReportObservation] = {}
    to_fetch: list[str] = []
    for key, (pool, node, version) in listed.items():
        nm = memory.node(node)
        if nm is not None and nm.report_version == version and nm.pool == pool:
            out[node] = ReportObservation(node, pool, nm.report, version)
        else:
            to_fetch.append(key)

    def fetch_and_verify(key: str) -> ReportObservation | None:
        # Runs on store.parallel_gets threads: checking one report overlaps fetching others.
        pool, node, _ = listed[key]
        try:
            blob = store.get(key)
        except NotFound:
            return None  # deleted between list and get: as if missing
        nm = memory.node(node)
        last_seq = nm.report.sequence if nm is not None and nm.report is not None else 0
        try:
            summary = verify_report(blob.data, fleet=fleet, pool=pool, node=node,
                                    fleet_secret=fleet_secret, last_sequence=last_seq, now=now)
            return ReportObservation(node, pool, summary, blob.version)
        except ReportRejected as rej:
            return ReportObservation(node, pool, nm.report if nm else None, blob.version,
                                     rejected=rej.reason)

    for observation in parallel_map(fetch_and_verify, to_fetch, store.parallel_gets):
        if observation is not None:
            out[observation.node] = observation
    return out

"""Reading and verifying node health reports (reconciler side).

The report's types and the reasons below are navarch.report.health_report's (HealthReport and
its parts; RejectReason). A report is accepted only if it is (checked in this order; the
first failure is the rejection reason, counted by reason in the state and shown by
`navarch status`):
  unreadable    the store listed it but could not return it (a StoreError other than
                NotFound: permissions, a torn object, the backend failing)
  oversized     larger than MAX_REPORT_BYTES (judged from the listing before fetching,
                and again on the bytes fetched)
  malformed     not a UTF-8 JSON object with a canonical form: invalid JSON, nesting
                deeper than MAX_NESTING, NaN/Infinity, lone surrogates, integers
                beyond +-(2**53 - 1) (RFC 8785 JCS, see navarch.report.signing)
  schema        not valid against schemas/health-report.schema.json
  identity      its fleet/pool/node differ from the key it was stored under
  unsigned      no signature
  no_secret     the reconciler has no fleet secret to check it with
  bad_signature HMAC-SHA256 does not match the node's derived key (navarch.report.signing)
  replayed      its sequence is not above the last accepted one for the node
  future        generated more than FUTURE_SKEW_S ahead of the reconciler's clock; only
                judged when the store gave no modification time (see "Clocks" below)
  check_failed  checking it raised an error navarch did not expect (a navarch bug: the
                error's type and message are in the rejection's detail)
A rejected report never makes a node unhealthy (docs/design.md, Safety rules, rule 2), and no report
can stop a run: every failure while reading, parsing, checking or verifying one report
is a rejection of that report.

Clocks: a node's clock may be wrong. Each accepted summary carries
`stored_at`, the store's own modification time of the object (ObjectInfo.modified_at
from the listing), and the planner judges a report's age by it. The difference between
the node's `generated_at` and `stored_at` is the node's clock skew, shown as a condition
(ReportSummary.clock_skew_s), never a reason to replace a node. Every run judges ages
this way, a replayed or simulated one too: its store keeps times on the run's clock (the
simulator's store, the local provider's `local tick`).

Schema checks use jsonschema-rs (the same JSON Schema 2020-12 semantics as the
jsonschema package, compiled): a cold plan checks thousands of reports, and the pure-
Python validator cost about 4 ms per report, most of a cold plan's time.

Health policy: with rule sets (a pool's health.rule_sets(), see navarch.fleet.policy),
a verified report's status and action are what navarch.fleet.policy.evaluate makes of it, and a
user rule that decided is the first finding ("rule NAME: unhealthy, action replace"). A rule
that raises never changes the verdict: the agent's status and action stand and the error
is a finding ("policy error: ..."), shown by `navarch status`.

Unchanged reports are not fetched again: listing gives each object's version (ETag,
generation, inode), and a node whose version equals the one in Memory reuses its summary;
any other version verified before comes from the verified-report cache
(navarch.reconcile.report_cache), which only ever saves time.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import cache, lru_cache
from typing import Any

from navarch.errors import NotFound, ReportRejected
from navarch.fleet.policy import Rule, evaluate
from navarch.fleet.schemas import load_schema
from navarch.planner.model import Memory, NodeMemory, NodeView, ReportObservation, ReportSummary
from navarch.reconcile.acceptance_text import plain_run
from navarch.reconcile.named_reports import named_listing
from navarch.reconcile.report_cache import CacheMemo, ReportCache, rules_digest
from navarch.reconcile.state import health_prefix
from navarch.report import signing
from navarch.report.acceptance import AcceptanceRun
from navarch.report.health import FaultKey, Remedy, Status
from navarch.report.health_report import (
    RejectReason,
    ReportCheck,
    ReportNotice,
    ReportXid,
    XidKind,
)
from navarch.report.timefmt import parse_ts, required_ts
from navarch.report.xid import Severity
from navarch.stores.base import ObjectInfo, ObjectStore, parallel_map
from navarch.textsafe import node_text

MAX_REPORT_BYTES = 256 * 1024
#: Deepest nesting of arrays/objects accepted. A real report nests 4 deep (checks[].
#: evidence{}); the compiled schema validator refuses input past its own recursion limit.
MAX_NESTING = 32
FUTURE_SKEW_S = 120
FLEET_REJECTION_MIN_NODES = 2
#: Every reason a report is rejected for, in the order they are checked.
REJECT_REASONS = tuple(r for r in RejectReason if r is not RejectReason.UNRECOGNISED)


@cache
def _report_validator() -> Any:
    """The compiled validator for schemas/health-report.schema.json (formats checked)."""
    import jsonschema_rs

    return jsonschema_rs.validator_for(
        load_schema("health-report.schema.json"), validate_formats=True
    )


#: signing.derive_node_key, remembered: every report of a node is checked with its key.
_node_key = lru_cache(maxsize=65536)(signing.derive_node_key)

RuleSets = Sequence[Sequence[Rule]]


def _policy(
    report: Mapping[str, Any], rule_sets: RuleSets | None
) -> tuple[Status, Remedy, list[str], FaultKey | None]:
    """(status, action, findings to put first / last, the fault a user rule names) by the
    health policy rules; without rule sets, the agent's own status and action."""
    status, action = Status(report["status"]), Remedy(report["action"])
    if rule_sets is None:
        return status, action, [], None
    result = evaluate(rule_sets, report)
    if result.error is not None:
        return status, action, [f"policy error: {result.error}"], None
    user = [r.name for r in result.user_rules]
    if not user:
        return result.status, result.action, [], None
    first = [f"rule {', '.join(user)}: {result.status.value}, action {result.action.value}"]
    return result.status, result.action, first, FaultKey(f"rule:{user[0]}")


def _acceptance(report: Mapping[str, Any]) -> AcceptanceRun | None:
    """The report's acceptance run, its text made plain and capped (plain_run); None when
    the report has none."""
    raw = report.get("acceptance")
    return plain_run(AcceptanceRun.from_json(raw)) if raw else None


def _first_seen(check: ReportCheck | None) -> datetime | None:
    """When the agent first saw the check's fault (None when it did not say, or said it in
    a form that is no RFC 3339 time: a node's text never fails a summary)."""
    try:
        return parse_ts(check.first_seen) if check is not None else None
    except ValueError:
        return None


def _fault_check(checks: Sequence[ReportCheck]) -> ReportCheck | None:
    """The check whose fault the report shows: among those with a structured fault key,
    the worst (XID checks first among equals, then by name), or None."""
    faulty = [c for c in checks if c.fault_key is not None]
    if not faulty:
        return None
    return min(faulty, key=lambda c: (-c.status.rank, c.name != "xid", c.name))


def _telling_checks(report: Mapping[str, Any]) -> list[ReportCheck]:
    """The checks that say something (not healthy, or naming a fault), typed. The healthy
    rest, most of every report, is never parsed: typing a whole 8-GPU report costs about
    ten times what summarizing it does (the micro-benchmark in summarize's docstring)."""
    return [
        ReportCheck.from_json(c)
        for c in report.get("checks", ())
        if c["status"] != Status.HEALTHY or c.get("fault_key")
    ]


_FATAL = Severity.FATAL.value


def _fatal_xids(report: Mapping[str, Any]) -> list[ReportXid]:
    """The report's fatal XID / SXid events, typed (the others are not parsed)."""
    return [ReportXid.from_json(x) for x in report.get("xids", ()) if x.get("severity") == _FATAL]


#: Fault kinds that act at once, like a fatal XID: a GPU call that never returned means
#: the driver is stuck for every process on the node, and the agent's next run would hang
#: on it again (NVSentinel's monitor hung on NVML run after run and never reported).
_IMMEDIATE_KINDS = frozenset({"gpu_hung"})


def _hung(telling: Sequence[ReportCheck]) -> bool:
    """Whether an unhealthy check names a fault kind of _IMMEDIATE_KINDS."""
    return any(
        c.status is Status.UNHEALTHY
        and c.fault_key is not None
        and c.fault_key.kind in _IMMEDIATE_KINDS
        for c in telling
    )


def summarize(
    report: Mapping[str, Any], stored_at: datetime | None = None, rule_sets: RuleSets | None = None
) -> ReportSummary:
    """Reduce a verified report to what the planner needs (see ReportSummary).

    report: a document schemas/health-report.schema.json accepts (navarch.report.health_report
    types its parts). stored_at: the store's modification time of the object (aware UTC),
    when known. rule_sets: the pool's health policy rule sets (HealthPolicy.rule_sets());
    None keeps the agent's verdict. See the module docstring for how they change the
    summary. Every string kept (findings, boot id, fault kind) is node_text: plain,
    visible, one line, capped (navarch.textsafe).

    Speed: this runs for every changed report of a 100,000-node fleet (bench/scale.py).
    Only the parts that say something are typed (``_telling_checks``, ``_fatal_xids``,
    the notice); the healthy checks are not parsed and the GPU readings are read as JSON.
    Typing all of a healthy 8-GPU report with HealthReport.from_json costs about 145 us,
    against about 15 us for this (a micro-benchmark of tests/agent/golden reports).
    """
    status, action, policy_lines, rule_fault = _policy(report, rule_sets)
    policy_lines = [node_text(line) for line in policy_lines]  # an error may quote the report
    findings: list[str] = []
    xids = _fatal_xids(report)
    for x in xids:
        label = "SXid" if x.kind is XidKind.SXID else "XID"
        findings.append(node_text(f"{label} {x.code}: {x.message} on {x.pci_bus_id}"))
    telling = _telling_checks(report)
    for c in sorted(
        (c for c in telling if c.status is not Status.HEALTHY),
        key=lambda c: (-c.status.rank, c.name),
    ):
        where = f" (GPU {c.gpu_index})" if c.gpu_index is not None else ""
        findings.append(node_text(f"{c.name}{where}: {c.message}"))
    # GPU readings stay JSON (the schema's gpus[] items, GpuReading's fields): typing eight
    # of them would double the time of a healthy report's summary.
    gpus: Sequence[Mapping[str, Any]] = report.get("gpus", ())
    # A GPU the agent reports lost (fallen off the bus) runs no CUDA work and cannot be
    # asked for its processes: counting it as busy forever would hold its node's drain,
    # and so its reboot, until drain_timeout (NVIDIA XID catalogue: XID 79, GPU lost).
    lost = {
        c.fault_key.gpu_index
        for c in telling
        if c.fault_key is not None and c.fault_key.kind == "gpu_lost"
    }
    procs: list[int | None] = [
        0 if g.get("process_count") is None and g.get("index") in lost else g.get("process_count")
        for g in gpus
    ]
    utils: list[float] = [u for g in gpus if (u := g.get("utilization_pct")) is not None]
    raw_notice = report.get("notice")
    notice = ReportNotice.from_json(raw_notice) if raw_notice else None
    fault_check = _fault_check(telling)
    if policy_lines and policy_lines[0].startswith("policy error"):
        findings = findings[:4] + policy_lines
    else:
        findings = policy_lines + findings
    fault_key = rule_fault or (fault_check.fault_key if fault_check is not None else None)
    return ReportSummary(
        sequence=report["sequence"],
        # Every string of a report the summary keeps is made plain here, once: Memory, the
        # audit log and every renderer then hold only visible one-line text.
        boot_id=node_text(report["boot_id"]),
        generated_at=required_ts(report["generated_at"]),
        status=status,
        action=action,
        health_score=report["health_score"],
        fatal=bool(xids) or _hung(telling),
        findings=tuple(dict.fromkeys(findings))[:5],
        fault_key=replace(fault_key, kind=node_text(fault_key.kind)) if fault_key else None,
        consecutive=(fault_check.consecutive or 0) if fault_check is not None else 0,
        first_seen=_first_seen(fault_check),
        notice_kind=notice.kind if notice is not None else None,
        notice_deadline=parse_ts(notice.deadline) if notice is not None else None,
        process_count=sum(p or 0 for p in procs) if gpus and None not in procs else None,
        utilization_pct=round(sum(utils) / len(utils), 1) if utils else None,
        gpu_count=len(gpus),
        stored_at=stored_at,
        acceptance=_acceptance(report),
    )


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (RFC 8259)")


_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")
#: An innermost container: an empty pair once everything but brackets is gone.
_EMPTY_PAIR = re.compile(rb"\[\]|\{\}")


def _nesting(data: bytes, limit: int = MAX_NESTING) -> int:
    """Deepest nesting of arrays/objects in a JSON text that parsed (a scalar is 0), counted
    up to limit + 1: the depth of its brackets outside strings. Each round removes the
    innermost pairs, so the rounds are the depth. A text walk in C, not a walk of the
    parsed value: an 8-GPU report has hundreds of containers and every report is checked."""
    brackets = signing.outside_strings(data).translate(None, _NOT_BRACKETS)
    depth = 0
    while brackets and depth <= limit:
        brackets = _EMPTY_PAIR.sub(b"", brackets)
        depth += 1
    return depth


_DECODER = json.JSONDecoder(parse_constant=_no_constant)


def _parse(data: bytes) -> tuple[dict[str, Any], bytes]:
    """UTF-8 JSON object -> (report, canonical bytes of its body); ReportRejected (malformed)."""
    try:
        report = _DECODER.decode(data.decode("utf-8"))
    except RecursionError as exc:
        raise ReportRejected(RejectReason.MALFORMED, "JSON nested too deeply") from exc
    except (UnicodeDecodeError, ValueError) as exc:
        raise ReportRejected(RejectReason.MALFORMED, str(exc)[:100]) from exc
    if not isinstance(report, dict):
        raise ReportRejected(RejectReason.MALFORMED, "not a JSON object")
    # Each level opens a bracket: with few brackets in all, the walk is not needed.
    brackets = data.count(b"[") + data.count(b"{")
    if brackets > MAX_NESTING and _nesting(data) > MAX_NESTING:
        raise ReportRejected(RejectReason.MALFORMED, f"JSON nested deeper than {MAX_NESTING}")
    try:
        canonical = signing.canonical_bytes(report)
    except RecursionError as exc:
        raise ReportRejected(RejectReason.MALFORMED, "JSON nested too deeply") from exc
    except ValueError as exc:  # rfc8785: lone surrogate, huge integer, non-finite float
        raise ReportRejected(
            RejectReason.MALFORMED, f"no RFC 8785 canonical form: {str(exc)[:100]}"
        ) from exc
    return report, canonical


def verify_report(
    data: bytes,
    *,
    fleet: str,
    pool: str,
    node: str,
    fleet_secret: bytes | None,
    last_sequence: int,
    now: datetime,
    stored_at: datetime | None = None,
    rule_sets: RuleSets | None = None,
) -> ReportSummary:
    """Check one stored report; return its summary or raise ReportRejected(reason).

    data: the object's bytes as stored. stored_at: the store's modification time of the
    object (aware UTC) or None; with it, a node's clock skew is a condition shown on the
    summary, not a rejection ("future" is judged only without it). rule_sets: the pool's
    health policy (see summarize). Never raises anything but ReportRejected: an unexpected
    error is rejection "check_failed".
    """
    try:
        return _verify(
            data,
            fleet=fleet,
            pool=pool,
            node=node,
            fleet_secret=fleet_secret,
            last_sequence=last_sequence,
            now=now,
            stored_at=stored_at,
            rule_sets=rule_sets,
        )
    except ReportRejected:
        raise
    except Exception as exc:  # the boundary: no report may stop a run
        raise ReportRejected(
            RejectReason.CHECK_FAILED, f"{type(exc).__name__}: {str(exc)[:100]}"
        ) from exc


def _verify(
    data: bytes,
    *,
    fleet: str,
    pool: str,
    node: str,
    fleet_secret: bytes | None,
    last_sequence: int,
    now: datetime,
    stored_at: datetime | None,
    rule_sets: RuleSets | None = None,
) -> ReportSummary:
    if len(data) > MAX_REPORT_BYTES:
        raise ReportRejected(RejectReason.OVERSIZED, f"{len(data)} bytes > {MAX_REPORT_BYTES}")
    report, canonical = _parse(data)
    if "signature" not in report:
        raise ReportRejected(RejectReason.UNSIGNED)
    validator = _report_validator()
    if not validator.is_valid(report):
        first = next(iter(validator.iter_errors(report)))
        raise ReportRejected(RejectReason.SCHEMA, first.message[:200])
    if (report["fleet"], report["pool"], report["node"]) != (fleet, pool, node):
        raise ReportRejected(
            RejectReason.IDENTITY, f"claims {report['fleet']}/{report['pool']}/{report['node']}"
        )
    if fleet_secret is None:
        raise ReportRejected(RejectReason.NO_SECRET)
    key = _node_key(fleet_secret, fleet, node)
    if not signing.verify_canonical(canonical, report["signature"], key):
        raise ReportRejected(RejectReason.BAD_SIGNATURE)
    if report["sequence"] <= last_sequence:
        raise ReportRejected(
            RejectReason.REPLAYED, f"sequence {report['sequence']} <= {last_sequence}"
        )
    try:
        generated = parse_ts(report["generated_at"])
    except ValueError as exc:
        raise ReportRejected(
            RejectReason.SCHEMA, "generated_at is not RFC 3339 with a timezone"
        ) from exc
    if generated is None:
        raise ReportRejected(RejectReason.SCHEMA, "generated_at is missing")
    if stored_at is None and generated > now + timedelta(seconds=FUTURE_SKEW_S):
        raise ReportRejected(RejectReason.FUTURE, f"generated_at {report['generated_at']}")
    return summarize(report, stored_at, rule_sets)


def _stored_at(info: ObjectInfo) -> datetime | None:
    """The listing's modification time as aware UTC, or None when the backend gave none."""
    try:
        return parse_ts(info.modified_at) if info.modified_at else None
    except ValueError:
        return None


def read_reports(
    store: ObjectStore,
    fleet: str,
    memory: Memory,
    fleet_secret: bytes | None,
    now: datetime,
    *,
    rule_sets: Mapping[str, RuleSets] | None = None,
    cache: CacheMemo | None = None,
    named: Collection[str] | None = None,
    stale_after_s: Mapping[str, int] | None = None,
) -> dict[str, ReportObservation]:
    """List health/<fleet>/, fetch changed reports, verify them -> node -> observation.

    Reports whose version equals the one remembered for the node are not fetched. Keys
    that do not look like health/<fleet>/<pool>/<node>.json are ignored. Freshness is
    judged by the store's modification times (see the module docstring). No report raises: each failure is a rejected observation;
    only listing the store may raise StoreError. rule_sets: pool name -> its health policy
    rule sets (HealthPolicy.rule_sets()); a pool not in it (or None) keeps the agents'
    verdicts. An unchanged report keeps the verdict it was given when it was read.
    cache: use the fleet's verified-report cache (navarch.reconcile.report_cache),
    with this process's memo of it: the reader loads it, does not fetch a report whose
    version it holds a verified summary of, and saves what this run used or verified
    (a failed save is logged, never raised); None reads without a cache.
    named: the report keys an event-started run was started for: only they are listed,
    the others taken from Memory, when navarch.reconcile.named_reports allows it
    (stale_after_s: pool -> health.stale_after_s); None lists health/<fleet>/ in full.
    """
    listed = (
        named_listing(store, fleet, memory, named, now, stale_after_s or {})
        if named is not None
        else None
    )
    if listed is None:
        listed = _listed_reports(store, health_prefix(fleet))
    loaded = ReportCache.load(store, fleet, fleet_secret, cache) if cache is not None else None
    out = read_listed(store, fleet, memory, fleet_secret, now, listed, rule_sets, loaded)
    if loaded is not None:
        loaded.save(store)
    return out


def read_listed(
    store: ObjectStore,
    fleet: str,
    memory: Memory,
    fleet_secret: bytes | None,
    now: datetime,
    listed: Mapping[str, tuple[str, str, ObjectInfo]],
    rule_sets: Mapping[str, RuleSets] | None = None,
    cache: ReportCache | None = None,
) -> dict[str, ReportObservation]:
    """The observations of the listed reports (key -> (pool, node, listing entry)) ->
    node -> observation: what read_reports does once it has listed, for a caller that
    listed some keys itself (navarch.reconcile.named_reports). Never raises for a report."""
    rules = rule_sets or {}
    # One digest per pool, not per report: hashing the rules is 4 us a call.
    pools = {pool for pool, _, _ in listed.values()}
    digests = {pool: rules_digest(rules.get(pool)) for pool in pools}
    out, to_fetch = _known_reports(listed, memory, cache, digests, now)

    reader = _Reader(store, fleet, fleet_secret, memory, now, cache)

    def fetch(key: str) -> ReportObservation | None:
        # Runs on store.parallel_gets threads: checking one report overlaps fetching others.
        pool, node, info = listed[key]
        return reader.fetch_and_verify(key, pool, node, info, rules.get(pool), digests[pool])

    for observation in parallel_map(fetch, to_fetch, store.parallel_gets):
        if observation is not None:
            out[observation.node] = observation
    return out


#: key -> (pool, node, the listing's entry)
_Listed = dict[str, tuple[str, str, ObjectInfo]]


def _listed_reports(store: ObjectStore, prefix: str) -> _Listed:
    """The keys under prefix that look like <pool>/<node>.json, with their listing."""
    listed: _Listed = {}
    for info in store.list(prefix):
        parts = info.key[len(prefix) :].split("/")
        if len(parts) != 2 or not parts[1].endswith(".json"):
            continue
        listed[info.key] = (parts[0], parts[1][: -len(".json")], info)
    return listed


def _known_reports(
    listed: Mapping[str, tuple[str, str, ObjectInfo]],
    memory: Memory,
    cache: ReportCache | None,
    digests: Mapping[str, str],
    now: datetime,
) -> tuple[dict[str, ReportObservation], list[str]]:
    """The observations of reports read before (the version Memory or the cache holds),
    and the keys that must be fetched and verified."""
    out: dict[str, ReportObservation] = {}
    to_fetch: list[str] = []
    for key, (pool, node, info) in listed.items():
        nm = memory.node(node)
        if nm is not None and nm.report_version == info.version and nm.pool == pool:
            # Unchanged object: its earlier verdict stands (a rejected one stays rejected).
            # The cache does not keep a copy: Memory holds it, and a cache of only what
            # Memory lacks stays small (a 100,000-node copy costs 0.4 s a run to read and
            # write). Should Memory be lost, the reports are verified again: time only.
            out[node] = ReportObservation(
                node, pool, nm.report, info.version, rejected=nm.report_rejected
            )
            continue
        cached = _from_cache(cache, key, info, digests[pool], nm, now)
        if cached is not None:
            out[node] = ReportObservation(
                node, pool, cached, info.version, stored_at=cached.stored_at
            )
        else:
            to_fetch.append(key)
    return out, to_fetch


@dataclass(frozen=True)
class _Reader:
    """What every fetch of one run shares."""

    store: ObjectStore
    fleet: str
    fleet_secret: bytes | None
    memory: Memory
    now: datetime
    cache: ReportCache | None

    def fetch_and_verify(
        self,
        key: str,
        pool: str,
        node: str,
        info: ObjectInfo,
        rule_sets: RuleSets | None,
        digest: str,
    ) -> ReportObservation | None:
        """One changed report fetched and verified: its observation (rejected with a
        reason when it fails), or None when it was deleted between listing and fetch."""
        nm = self.memory.node(node)
        last_seq = nm.report.sequence if nm is not None and nm.report is not None else 0
        stored_at = _stored_at(info)

        def rejected(reason: RejectReason, version: str) -> ReportObservation:
            report = nm.report if nm else None
            return ReportObservation(
                node, pool, report, version, rejected=reason, stored_at=stored_at
            )

        if info.size_bytes > MAX_REPORT_BYTES:
            return rejected(RejectReason.OVERSIZED, info.version)  # not worth fetching
        try:
            blob = self.store.get(key)
        except NotFound:
            return None  # deleted between list and get: as if missing
        except Exception:  # StoreError, or a backend's own bug: this report only
            return rejected(RejectReason.UNREADABLE, info.version)
        try:
            summary = verify_report(
                blob.data,
                fleet=self.fleet,
                pool=pool,
                node=node,
                fleet_secret=self.fleet_secret,
                last_sequence=last_seq,
                now=self.now,
                stored_at=stored_at,
                rule_sets=rule_sets,
            )
        except ReportRejected as rej:
            return rejected(rej.reason, blob.version)
        if self.cache is not None:
            self.cache.remember(key, blob.version, digest, summary)
        return ReportObservation(node, pool, summary, blob.version, stored_at=stored_at)


def _from_cache(
    cache: ReportCache | None,
    key: str,
    info: ObjectInfo,
    rules: str,
    nm: NodeMemory | None,
    now: datetime,
) -> ReportSummary | None:
    """The cache's verified summary of the listed version, when verifying the bytes again
    would accept it too: its sequence above the node's last accepted one (the replay rule)
    and, judged by the node's clock, not from the future. None: fetch and verify."""
    if cache is None:
        return None
    summary = cache.lookup(key, info.version, rules)
    if summary is None:
        return None
    last_seq = nm.report.sequence if nm is not None and nm.report is not None else 0
    if summary.sequence <= last_seq:
        return None
    stored_at = _stored_at(info)
    if stored_at is None and summary.generated_at > now + timedelta(seconds=FUTURE_SKEW_S):
        return None
    # The entry was remembered with the object's modification time: usually nothing to set.
    return summary if summary.stored_at == stored_at else replace(summary, stored_at=stored_at)


#: What to check when every node's report is rejected for one reason.
_FLEET_HINTS: dict[str, str] = {
    RejectReason.BAD_SIGNATURE: "the agents' keys are not derived from this fleet secret: was the secret "
    "changed after the nodes were launched, or is this the wrong secret?",
    RejectReason.IDENTITY: "the agents write under keys that do not match their fleet/pool/node",
    RejectReason.SCHEMA: "the agents write reports this navarch does not accept: agent version mismatch?",
    RejectReason.MALFORMED: "the objects are not JSON reports: is something else writing to the store?",
    RejectReason.REPLAYED: "no report is newer than the last one accepted: are the agents running?",
    RejectReason.UNREADABLE: "the store refuses to return the reports: check its permissions",
    RejectReason.CHECK_FAILED: "navarch fails to check them: a bug, please report it",
}


def fleet_rejection(views: Sequence[NodeView]) -> str | None:
    """A one-line error when every node that has a report has it rejected for one reason
    (at least FLEET_REJECTION_MIN_NODES nodes), else None.

    One bad node is a node's problem; all of them for one reason is the fleet's (a wrong
    secret, an agent/reconciler version mismatch, a broken store), and a table of
    `unknown` nodes would hide it.
    """
    reporting = 0
    reason = None
    for v in views:  # one pass that stops at the first accepted report (the usual case)
        if v.rejected is None:
            if v.summary is not None:
                return None
            continue
        if reason is not None and v.rejected != reason:
            return None
        reason = v.rejected
        reporting += 1
    if reporting < FLEET_REJECTION_MIN_NODES or reason is None:
        return None
    hint = _FLEET_HINTS.get(reason, "see `navarch status` for each node")
    return (
        f"every node's health report is rejected ({reason}, {reporting} of "
        f"{reporting} nodes): {hint}"
    )

"""Memory <-> state/<fleet>.json: the JSON forms of the planner's data, and their cache.

The planner's model (navarch.planner.model) is plain immutable data; this module turns
it into the state document the reconciler writes by compare-and-swap
(navarch.reconcile.state) and back, with times as RFC 3339 UTC strings. The one cache,
NodeDocCache, lives here and not on the data: see its docstring for the benchmark that
justifies it.

Strings a node once supplied (a report's boot id, findings and fault kind, a diagnostic's
detail, the reasons and faults the ladder keeps) are made plain as they are read
(navarch.textsafe): a state document or report cache written by an older navarch, or
edited by hand, gives the planner and every renderer only visible one-line text.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import Enum
from typing import Any, TypeVar

from navarch.fleet.spec import Scheduler
from navarch.planner.model import (
    ActionReason,
    Cordon,
    Diag,
    DiagState,
    DiagWhy,
    Exhausted,
    Fault,
    Memory,
    NodeMemory,
    Pause,
    Phase,
    PoolMemory,
    PoolSettings,
    ReportSummary,
    Vacancy,
)
from navarch.planner.node_table import NodeTable
from navarch.reconcile.acceptance_text import plain_result, plain_run
from navarch.report.acceptance import AcceptanceResult, AcceptanceRun
from navarch.report.health import FaultKey, Remedy, Status
from navarch.report.health_report import NoticeKind, RejectReason
from navarch.report.timefmt import parse_ts, required_ts, ts
from navarch.textsafe import node_text, plain

__all__ = [
    "NodeDocCache",
    "diag_from_json",
    "diag_to_json",
    "fault_from_json",
    "fault_to_json",
    "memory_from_json",
    "memory_to_json",
    "node_to_json",
    "settings_from_json",
    "settings_to_json",
    "summary_from_json",
    "summary_to_json",
]


def summary_to_json(s: ReportSummary | None) -> dict[str, Any] | None:
    """A ReportSummary as JSON-ready data (times RFC 3339 UTC), or None."""
    if s is None:
        return None
    return {
        "sequence": s.sequence,
        "boot_id": s.boot_id,
        "generated_at": ts(s.generated_at),
        "status": s.status,
        "action": s.action,
        "health_score": s.health_score,
        "fatal": s.fatal,
        "findings": list(s.findings),
        "notice_kind": s.notice_kind,
        "notice_deadline": ts(s.notice_deadline),
        "process_count": s.process_count,
        "utilization_pct": s.utilization_pct,
        "gpu_count": s.gpu_count,
        "stored_at": ts(s.stored_at),
        **({"fault_key": s.fault_key.format()} if s.fault_key is not None else {}),
        **({"consecutive": s.consecutive} if s.consecutive else {}),
        **({"acceptance": s.acceptance.to_json()} if s.acceptance is not None else {}),
        **({"first_seen": ts(s.first_seen)} if s.first_seen is not None else {}),
    }


#: Enum members by value: a dict lookup is a tenth of an Enum call, made for every node and
#: cached report a run decodes (bench/scale.py); a value not in them goes through the Enum
#: call, which raises ValueError as before (an unhashable one raises TypeError).
_STATUSES = {m.value: m for m in Status}
_REMEDIES = {m.value: m for m in Remedy}
_PHASES = {m.value: m for m in Phase}

_E = TypeVar("_E", bound=Enum)


def _member(members: Mapping[Any, _E], enum: type[_E], value: Any) -> _E:
    """enum(value) through its members-by-value table (see above)."""
    return members[value] if value in members else enum(value)


_NOTICE_KINDS: Mapping[Any, NoticeKind] = {k.value: k for k in NoticeKind}


def summary_from_json(d: Mapping[str, Any] | None) -> ReportSummary | None:
    """Inverse of summary_to_json. Raises KeyError/ValueError on malformed data."""
    if d is None:
        return None
    return ReportSummary(
        sequence=d["sequence"],
        boot_id=node_text(d["boot_id"]),
        generated_at=required_ts(d["generated_at"]),
        status=_member(_STATUSES, Status, d["status"]),
        action=_member(_REMEDIES, Remedy, d["action"]),
        health_score=d["health_score"],
        fatal=d["fatal"],
        findings=tuple(node_text(f) for f in d.get("findings", ())),
        # The report schema allows only NoticeKind values; any other word (a hand-edited
        # state) announces nothing the planner acts on, so it reads as no notice.
        notice_kind=_NOTICE_KINDS.get(d.get("notice_kind")),
        notice_deadline=parse_ts(d.get("notice_deadline")),
        process_count=d.get("process_count"),
        utilization_pct=d.get("utilization_pct"),
        gpu_count=d.get("gpu_count", 0),
        stored_at=parse_ts(d.get("stored_at")),
        fault_key=FaultKey.parse(node_text(d["fault_key"])) if d.get("fault_key") else None,
        consecutive=d.get("consecutive", 0),
        acceptance=plain_run(AcceptanceRun.from_json(d["acceptance"]))
        if d.get("acceptance")
        else None,
        first_seen=parse_ts(d.get("first_seen")),
    )


#: The version of a pool's settings record in the state document; a reader that meets
#: another version treats the pool's settings as unknown (PoolSettings' defaults).
SETTINGS_VERSION = 1


def settings_to_json(s: PoolSettings) -> dict[str, Any]:
    """A pool's PoolSettings as its state document record (versioned: SETTINGS_VERSION)."""
    return {
        "version": SETTINGS_VERSION,
        "scheduler": s.scheduler,
        "playbooks": dict(s.playbooks),
        "ssh": dict(s.ssh),
        "drain_timeout_s": s.drain_timeout_s,
        "stale_after_s": s.stale_after_s,
        "max_unavailable": s.max_unavailable,
    }


def settings_from_json(d: Mapping[str, Any] | None) -> PoolSettings | None:
    """Inverse of settings_to_json. None (the pool's settings are unknown) for a state
    written before navarch kept them, or a record of another version. Raises
    KeyError/ValueError/TypeError on a malformed record of this version."""
    if not d or d.get("version") != SETTINGS_VERSION:
        return None
    return PoolSettings(
        scheduler=Scheduler(d["scheduler"]),
        playbooks=tuple(sorted((str(k), str(v)) for k, v in d["playbooks"].items())),
        ssh=tuple(sorted((str(k), v) for k, v in d["ssh"].items())),
        drain_timeout_s=int(d["drain_timeout_s"]),
        stale_after_s=int(d["stale_after_s"]),
        max_unavailable=int(d["max_unavailable"]),
    )


def _ladder_to_json(n: NodeMemory) -> dict[str, Any]:
    """The remediation ladder's fields of a node, only those set (keeps the state small)."""
    out: dict[str, Any] = {}
    if n.fault is not None:
        out["fault"] = fault_to_json(n.fault)
    if n.faults:
        out["faults"] = [[k, ts(t)] for k, t in n.faults]
    if n.rung is not None:
        out.update(rung=n.rung.value, rung_fault=n.rung_fault, rung_at=ts(n.rung_at))
    if n.return_streak:
        out["return_streak"] = n.return_streak
    if n.diag is not None:
        out["diag"] = diag_to_json(n.diag)
    if n.impaired_since is not None:
        out["impaired_since"] = ts(n.impaired_since)
    if n.accepted:
        out["accepted"] = n.accepted
    if n.peer_test is not None:
        out.update(peer_test=n.peer_test.to_json(), peer_run=n.peer_run)
    return out


def fault_to_json(f: Fault) -> dict[str, Any]:
    """A Fault as the state document and the JSON plan write it (key: FaultKey.format)."""
    return {
        "key": f.key.format(),
        "action": f.action.value,
        "boot_id": f.boot_id,
        "sequence": f.sequence,
    }


def fault_from_json(f: Mapping[str, Any] | None) -> Fault | None:
    """Inverse of fault_to_json; None passes through. A key written by an older navarch
    ("XID 79") loads as a kind of its own. Raises KeyError/ValueError."""
    if not f:
        return None
    key, boot_id = FaultKey.parse(node_text(f["key"])), node_text(f["boot_id"])
    return Fault(key, Remedy(f["action"]), boot_id, f["sequence"])


def diag_to_json(d: Diag) -> dict[str, Any]:
    """A Diag as JSON-ready data (times RFC 3339 UTC)."""
    return {
        "level": d.level,
        "why": d.why.value,
        "state": d.state.value,
        "at": ts(d.at),
        "started_at": ts(d.started_at),
        "detail": d.detail,
    }


def diag_from_json(d: Mapping[str, Any] | None) -> Diag | None:
    """Inverse of diag_to_json; None passes through. Raises KeyError/ValueError."""
    if d is None:
        return None
    return Diag(
        int(d["level"]),
        DiagWhy(d["why"]),
        DiagState(d["state"]),
        required_ts(d["at"]),
        parse_ts(d.get("started_at")),
        node_text(d.get("detail", "")),
    )


def _ladder_from_json(n: Mapping[str, Any]) -> dict[str, Any]:
    """Inverse of _ladder_to_json: NodeMemory keyword arguments."""
    f = n.get("fault")
    return {
        "fault": fault_from_json(f),
        "faults": tuple((node_text(k), required_ts(t)) for k, t in n.get("faults", ())),
        "rung": Remedy(n["rung"]) if n.get("rung") else None,
        "rung_fault": node_text(n.get("rung_fault", "")),
        "rung_at": parse_ts(n.get("rung_at")),
        "return_streak": n.get("return_streak", 0),
        "diag": diag_from_json(n.get("diag")),
        "impaired_since": parse_ts(n.get("impaired_since")),
        "accepted": node_text(n.get("accepted", "")),
        "peer_test": (
            plain_result(AcceptanceResult.from_json(n["peer_test"])) if n.get("peer_test") else None
        ),
        "peer_run": node_text(n.get("peer_run", "")),
    }


def cordon_to_json(c: Cordon) -> dict[str, Any]:
    """A Cordon as the state document writes it (NodeMemory.cordon; at RFC 3339 UTC)."""
    return {
        "cause": c.cause.value,
        "at": ts(c.at),
        "by": c.by,
        "fault": c.fault,
        "idle": c.idle,
        "repair": c.repair,
        "note": c.note,
    }


#: A state document written before NodeMemory.cordon: its flags, and the cordon cause
#: each stood for, the first set deciding (a navarch cordon took over an operator's or an
#: acceptance cordon, and the flags of the cordon it replaced were never cleared); the
#: acceptance cordon's flag kept the feature's old name, burn_in_cordon.
_LEGACY_CAUSES = (
    ("diag_cordon", ActionReason.DIAGNOSTICS),
    ("impaired_cordon", ActionReason.IMPAIRED_FIRST_SEEN),
    ("silent_cordon", ActionReason.OFFLINE),
    ("scale_down_cordon", ActionReason.SCALE_DOWN),
)
_LEGACY_KEYS = frozenset(
    {k for k, _ in _LEGACY_CAUSES} | {"repair", "operator_cordon", "idle_cordon", "burn_in_cordon"}
)
#: The phases in which an old document's flags speak of navarch's cordon, not an operator's.
_NAVARCH_PHASES = frozenset({"cordoned", "draining", "remediating", "terminating"})


def cordon_from_json(n: Mapping[str, Any]) -> Cordon | None:
    """The Cordon of a node entry: its "cordon" record (inverse of cordon_to_json), or, for
    an entry written before it, the one its flags stood for (a migration: the same plans
    follow). An old entry's cause is the first phase flag set (scheduled diagnostics,
    the first impaired listing, silence, scale-down), else REMEDY for a repair under way,
    else OPERATOR (note: its operator_cordon), else ACCEPTANCE, else none; its time is the
    phase's, its fault key the node's fault. Raises KeyError/ValueError on a malformed
    record."""
    c = n.get("cordon")
    if c is not None:
        return Cordon(
            ActionReason(c["cause"]),
            parse_ts(c.get("at")),
            by=plain(c.get("by", "")),
            fault=node_text(c.get("fault", "")),
            idle=bool(c.get("idle", False)),
            repair=bool(c.get("repair", False)),
            note=plain(c.get("note", "")),
        )
    if _LEGACY_KEYS.isdisjoint(n):
        return None
    return _legacy_cordon(n)


def _legacy_cordon(n: Mapping[str, Any]) -> Cordon | None:
    """The Cordon an entry written before NodeMemory.cordon stood for (cordon_from_json)."""
    note = plain(n.get("operator_cordon", ""))
    repair, acceptance = bool(n.get("repair")), bool(n.get("burn_in_cordon"))
    navarch = n.get("phase", "") in _NAVARCH_PHASES
    cause = next((reason for key, reason in _LEGACY_CAUSES if n.get(key)), None)
    if cause is None and repair and (navarch or not note):
        cause = ActionReason.REMEDY
    if cause is None and note:
        cause = ActionReason.OPERATOR
    if cause is None and acceptance:
        cause = ActionReason.ACCEPTANCE
    if cause is None:
        return None
    fault = n.get("fault")
    return Cordon(
        cause,
        parse_ts(n.get("phase_at")) if navarch else None,
        by="operator" if cause is ActionReason.OPERATOR else "",
        fault=node_text(fault["key"]) if fault else "",
        # An operator's cordon of a node in acceptance holds no work either (Cordon.idle).
        idle=bool(n.get("idle_cordon")) or (cause is ActionReason.OPERATOR and acceptance),
        repair=repair,
        note=note if cause is ActionReason.OPERATOR else "",
    )


def node_to_json(n: NodeMemory) -> dict[str, Any]:
    """One node of the state document (the entry under its name)."""
    return {
        "pool": n.pool,
        "instance_id": n.instance_id,
        "first_seen_at": ts(n.first_seen_at),
        "phase": n.phase.value,
        "phase_at": ts(n.phase_at),
        "phase_reason": n.phase_reason,
        **({"cordon": cordon_to_json(n.cordon)} if n.cordon is not None else {}),
        "report_version": n.report_version,
        "report": summary_to_json(n.report),
        "streak": n.streak,
        "streak_sequence": n.streak_sequence,
        **({"launch": dict(n.launch)} if n.launch else {}),
        **({"report_rejected": n.report_rejected} if n.report_rejected else {}),
        **_ladder_to_json(n),
    }


class NodeDocCache:
    """node_to_json results of the nodes of the last document made, by NodeMemory identity.

    NodeMemory is immutable and a run replaces only the nodes it changed, so most nodes of
    the next Memory are the very objects of the last one: their entries are reused and a
    run that changes a few nodes of a large fleet serialises only those. The entries of
    the last two documents are kept (a journal alternates between the Memory it loaded and
    the one it writes); older ones are dropped. Justified by bench/scale.py (apply and
    plan at 10,000 and 100,000 nodes write the state) and `navarch simulate` (the state is
    written every reconcile period: 8,640 writes of 1,000 nodes in the 30-day run). The
    entries are shared: read a document made with a cache, never change it.
    """

    def __init__(self) -> None:
        # id(node) -> (the node, kept so its id is not reused while remembered; its entry)
        self._last: dict[int, tuple[NodeMemory, dict[str, Any]]] = {}
        self._before: dict[int, tuple[NodeMemory, dict[str, Any]]] = {}

    def _remembered(self, n: NodeMemory) -> dict[str, Any] | None:
        hit = self._last.get(id(n)) or self._before.get(id(n))
        return hit[1] if hit is not None and hit[0] is n else None

    def nodes_to_json(self, nodes: Iterable[NodeMemory]) -> dict[str, dict[str, Any]]:
        """{node name: node_to_json(node)} in the order given, reusing remembered entries."""
        made: dict[int, tuple[NodeMemory, dict[str, Any]]] = {}
        out: dict[str, dict[str, Any]] = {}
        for n in nodes:
            doc = self._remembered(n)
            if doc is None:
                doc = node_to_json(n)
            made[id(n)] = (n, doc)
            out[n.node] = doc
        self._before, self._last = self._last, made
        return out


def memory_to_json(m: Memory, cache: NodeDocCache | None = None) -> dict[str, Any]:
    """Memory as the state/<fleet>.json document (version 1). cache: reuse the node entries
    of earlier documents (NodeDocCache); the document then shares them: read it, never
    change it."""
    lazy = m.nodes.lazy_entries()
    if lazy is not None:  # a state read lazily: the entries of nodes not set are as read
        entries, changed = lazy
        nodes = {**entries, **{name: node_to_json(n) for name, n in changed.items()}}
    elif cache is not None:
        nodes = cache.nodes_to_json(m.nodes)
    else:
        nodes = {n.node: node_to_json(n) for n in m.nodes}
    return {
        "version": 1,
        "fleet": m.fleet,
        "serial": m.serial,
        "lineage": m.lineage,
        "nodes": nodes,
        "pools": {
            p.pool: {
                "next_index": p.next_index,
                "repairs": [ts(r) for r in p.repairs],
                "exhausted": [
                    {
                        "zone": e.zone,
                        "instance_type": e.instance_type,
                        "spot": e.spot,
                        "until": ts(e.until),
                        "failures": e.failures,
                        "provider": e.provider,
                    }
                    for e in p.exhausted
                ],
                "desired": p.desired,
                "desired_from_target": p.desired_from_target,
                "scaled_at": ts(p.scaled_at),
                **({"lemons": list(p.lemons)} if p.lemons else {}),
                **(
                    {"host_faults": [[h, k, ts(w)] for h, k, w in p.host_faults]}
                    if p.host_faults
                    else {}
                ),
                **({"lemon_hosts": list(p.lemon_hosts)} if p.lemon_hosts else {}),
                **({"settings": settings_to_json(p.settings)} if p.settings else {}),
                **({"retiring_since": ts(p.retiring_since)} if p.retiring_since else {}),
                **({"spares": list(p.spares)} if p.spares else {}),
                **({"acceptance_since": ts(p.acceptance_since)} if p.acceptance_since else {}),
                **(
                    {"vacancies": [_vacancy_to_json(v) for v in p.vacancies]} if p.vacancies else {}
                ),
                **(
                    {"baseline_misses": [list(m) for m in p.baseline_misses]}
                    if p.baseline_misses
                    else {}
                ),
            }
            for p in m.pools
        },
        # By the reason's value: orjson takes only exact str keys, not a RejectReason.
        "rejections": {str(reason): n for reason, n in m.rejections},
        **({"pause": _pause_to_json(m.pause)} if m.pause else {}),
    }


def _vacancy_to_json(v: Vacancy) -> dict[str, Any]:
    return {
        "node": v.node,
        "provider": v.provider,
        "zone": v.zone,
        "block": v.block,
        "at": ts(v.at),
    }


def _vacancy_from_json(d: Mapping[str, Any]) -> Vacancy:
    return Vacancy(d["node"], d["provider"], d["zone"], d.get("block", ""), required_ts(d["at"]))


def _pause_to_json(p: Pause) -> dict[str, Any]:
    return {"by": p.by, "at": ts(p.at), "reason": p.reason}


def _pause_from_json(d: Mapping[str, Any] | None) -> Pause | None:
    if not d:
        return None
    return Pause(by=str(d["by"]), at=required_ts(d["at"]), reason=str(d["reason"]))


#: The keys _ladder_to_json may write: a node entry without any of them (most nodes, most of
#: the time) takes NodeMemory's defaults without building the ladder's arguments.
_LADDER_KEYS = frozenset(
    {
        "fault",
        "faults",
        "rung",
        "rung_fault",
        "rung_at",
        "return_streak",
        "diag",
        "impaired_since",
        "accepted",
        "peer_test",
    }
)


def _node_from_json(name: str, n: Mapping[str, Any]) -> NodeMemory:
    """Inverse of node_to_json for the entry under `name`."""
    ladder = {} if _LADDER_KEYS.isdisjoint(n) else _ladder_from_json(n)
    return NodeMemory(
        node=name,
        pool=n["pool"],
        instance_id=n.get("instance_id"),
        first_seen_at=parse_ts(n.get("first_seen_at")),
        phase=_member(_PHASES, Phase, n.get("phase", "")),
        phase_at=parse_ts(n.get("phase_at")),
        phase_reason=plain(n.get("phase_reason", "")),
        cordon=cordon_from_json(n),
        report_version=n.get("report_version"),
        report=summary_from_json(n.get("report")),
        streak=n.get("streak", 0),
        streak_sequence=n.get("streak_sequence", 0),
        launch=tuple(sorted((n.get("launch") or {}).items())),
        report_rejected=RejectReason.of(r) if (r := n.get("report_rejected")) else None,
        **ladder,
    )


def memory_from_json(d: Mapping[str, Any], *, lazy: bool = False) -> Memory:
    """Inverse of memory_to_json. Raises KeyError/ValueError on a malformed document.

    lazy: decode each node when it is first looked up (NodeTable.lazy), for a run that
    reads a few nodes of a large state; a malformed node entry then raises at that lookup,
    and memory_to_json writes the entries of the nodes not set back as they were read.
    """
    entries = d.get("nodes", {})
    nodes: NodeTable[NodeMemory] = (
        NodeTable.lazy(entries, _node_from_json)
        if lazy
        else NodeTable(_node_from_json(name, n) for name, n in sorted(entries.items()))
    )
    pools = tuple(
        PoolMemory(
            pool=name,
            next_index=p.get("next_index", 1),
            repairs=tuple(required_ts(r) for r in p.get("repairs", ())),
            exhausted=tuple(
                Exhausted(
                    e["zone"],
                    e["instance_type"],
                    e["spot"],
                    required_ts(e["until"]),
                    e.get("failures", 1),
                    provider=e["provider"],
                )
                for e in p.get("exhausted", ())
            ),
            desired=p.get("desired"),
            desired_from_target=p.get("desired_from_target"),
            scaled_at=parse_ts(p.get("scaled_at")),
            lemons=tuple(p.get("lemons", ())),
            host_faults=tuple((h, k, required_ts(w)) for h, k, w in p.get("host_faults", ())),
            lemon_hosts=tuple(p.get("lemon_hosts", ())),
            settings=settings_from_json(p.get("settings")),
            retiring_since=parse_ts(p.get("retiring_since")),
            spares=tuple(sorted(p.get("spares", ()))),
            vacancies=tuple(_vacancy_from_json(v) for v in p.get("vacancies", ())),
            acceptance_since=parse_ts(p.get("acceptance_since")),
            baseline_misses=tuple((str(n), str(b)) for n, b in p.get("baseline_misses", ())),
        )
        for name, p in sorted(d.get("pools", {}).items())
    )
    return Memory(
        fleet=d["fleet"],
        serial=d.get("serial", 0),
        lineage=d.get("lineage", ""),
        nodes=nodes,
        pools=pools,
        rejections=tuple(sorted(d.get("rejections", {}).items())),
        pause=_pause_from_json(d.get("pause")),
    )

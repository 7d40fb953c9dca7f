"""Fleet status: one function that answers "what is the state of the fleet?" as a typed
value with one JSON form (schemas/status.schema.json). `navarch status` prints it (as a
table, or as JSON with --json); anything else that reports status (an API) calls it too.

fleet_status is pure: it reads one reconcile run's Snapshot (navarch.reconcile.run.gather)
and the spec, and does no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from navarch.fleet.modes import Mode
from navarch.fleet.spec import FleetSpec, PoolSpec
from navarch.inventory import Reservation
from navarch.planner.hosts import lemon_hosts
from navarch.planner.model import Cordon, Diag, Lifecycle, NodeView, Pause
from navarch.planner.modes import Would
from navarch.reconcile.reports import fleet_rejection
from navarch.reconcile.run import Snapshot
from navarch.report.health_report import RejectReason
from navarch.report.timefmt import ts

__all__ = ["FleetStatus", "LadderStatus", "NodeStatus", "PoolStatus", "fleet_status"]

#: Lifecycles in which a node's last accepted report no longer speaks for it.
_NOT_FRESH = frozenset({Lifecycle.STALE, Lifecycle.OFFLINE})


def _value(x: object) -> str:
    """An enum's value, or the string itself."""
    return str(getattr(x, "value", x))


@dataclass(frozen=True)
class LadderStatus:
    """A node's remediation-ladder state: the last rung tried and for which fault, the
    faults within the pool's lemon_window, whether it is a lemon (lemon_after faults in
    the window, or its instance id was replaced as one), the last diagnostics."""

    rung: str | None
    rung_fault: str | None
    rung_at: datetime | None
    faults_in_window: int
    lemon_after: int
    lemon: bool
    return_streak: int
    host_id: str | None
    diag: Diag | None

    def to_json(self) -> dict[str, Any]:
        """The `ladder` object of schemas/status.schema.json (times RFC 3339 UTC)."""
        d = self.diag
        return {
            "rung": self.rung,
            "rung_fault": self.rung_fault,
            "rung_at": ts(self.rung_at),
            "faults_in_window": self.faults_in_window,
            "lemon_after": self.lemon_after,
            "lemon": self.lemon,
            "return_streak": self.return_streak,
            "host_id": self.host_id,
            "diag": None
            if d is None
            else {
                "level": d.level,
                "why": d.why.value,
                "state": d.state.value,
                "at": ts(d.at),
                "started_at": ts(d.started_at),
                "detail": d.detail,
            },
        }


@dataclass(frozen=True)
class NodeStatus:
    """One node: its instance, lifecycle, last accepted report and ladder state.

    health: the report's overall status (None without an accepted report); report_fresh:
    the report still speaks for the node (accepted, and the node is neither stale nor
    offline); report_age_s and clock_skew_s in seconds, rounded to 0.1.
    """

    node: str
    instance_id: str | None
    provider: str | None
    zone: str | None
    instance_type: str | None
    lifecycle: Lifecycle
    health: str | None
    report_fresh: bool
    health_score: int | None
    report_age_s: float | None
    clock_skew_s: float | None
    reason: str
    rejected: RejectReason | None
    ladder: LadderStatus
    #: Where it sits (Instance.topology, coarse to fine; () when the cloud says nothing),
    #: and whether its physical host is one of the pool's lemon hosts (landed there
    #: because its provider could not avoid it).
    topology: tuple[str, ...] = ()
    lemon_host: bool = False
    #: Why it is out of its scheduler, when it is (NodeMemory.cordon).
    cordon: Cordon | None = None
    #: what the pool's mode held back for it this run ("would cordon demo-train-0002"),
    #: each with the mode that held it ("observe"), in plan order
    would: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        """A `nodes` item of schemas/status.schema.json."""
        return {
            "node": self.node,
            "instance_id": self.instance_id,
            "provider": self.provider,
            "zone": self.zone,
            "instance_type": self.instance_type,
            "lifecycle": self.lifecycle.value,
            "health": self.health,
            "report_fresh": self.report_fresh,
            "health_score": self.health_score,
            "report_age_s": self.report_age_s,
            "clock_skew_s": self.clock_skew_s,
            "reason": self.reason,
            "rejected": self.rejected.value if self.rejected else None,
            "ladder": self.ladder.to_json(),
            "topology": list(self.topology),
            "lemon_host": self.lemon_host,
            "cordon": _cordon_json(self.cordon),
            "would": [{"action": h, "mode": m} for h, m in self.would],
        }


def _cordon_json(c: Cordon | None) -> dict[str, Any] | None:
    """A node's `cordon` of schemas/status.schema.json: cause, when, by whom, the fault."""
    if c is None:
        return None
    return {"cause": c.cause.value, "at": ts(c.at), "by": c.by, "fault": c.fault, "note": c.note}


@dataclass(frozen=True)
class PoolStatus:
    """One pool: its size bounds, providers, nodes, and the lemons it remembers."""

    pool: str
    provider: str
    min: int
    target: int
    max: int
    providers: tuple[str, ...]
    nodes: tuple[NodeStatus, ...]
    lemons: tuple[str, ...]
    lemon_hosts: tuple[str, ...]
    spares: int = 0  # nodes.spares: warm spares the pool keeps beyond target
    mode: Mode = Mode.FULL  # how far navarch may act on it (navarch.fleet.modes)

    def to_json(self) -> dict[str, Any]:
        """A `pools` item of schemas/status.schema.json."""
        return {
            "pool": self.pool,
            "provider": self.provider,
            "min": self.min,
            "target": self.target,
            "max": self.max,
            "providers": list(self.providers),
            "nodes": [n.to_json() for n in self.nodes],
            "lemons": list(self.lemons),
            "lemon_hosts": list(self.lemon_hosts),
            "spares": self.spares,
            "mode": self.mode.value,
        }


@dataclass(frozen=True)
class FleetStatus:
    """The fleet as one run saw it. error: one line when every report is rejected for one
    reason (navarch.reconcile.reports.fleet_rejection), else None. rejections: reason ->
    count of rejected reports, all time. foreign: (provider, instance id) of instances
    without this fleet's tags; orphans: (node, pool, provider, instance id, reason);
    duplicates: (node, instance ids) of one name on several instances."""

    fleet: str
    store: str
    state_serial: int
    error: str | None
    pools: tuple[PoolStatus, ...]
    rejections: tuple[tuple[str, int], ...]
    foreign: tuple[tuple[str, str], ...]
    orphans: tuple[tuple[str, str, str, str, str], ...]
    duplicates: tuple[tuple[str, tuple[str, ...]], ...]
    paused: Pause | None = None  # `navarch pause`: who, when, why
    #: each reservation the pools name: reserved, running, and idle but billed
    reservations: tuple[Reservation, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The document `navarch status --json` prints (schemas/status.schema.json)."""
        p = self.paused
        return {
            "fleet": self.fleet,
            "store": self.store,
            "state_serial": self.state_serial,
            "paused": {"by": p.by, "at": ts(p.at), "reason": p.reason} if p else None,
            "error": self.error,
            "pools": [p.to_json() for p in self.pools],
            "rejections": dict(self.rejections),
            "foreign": [{"provider": p, "instance_id": i} for p, i in self.foreign],
            "orphans": [
                {"node": n, "pool": p, "provider": pr, "instance_id": i, "reason": r}
                for n, p, pr, i, r in self.orphans
            ],
            "duplicates": [{"node": n, "instance_ids": list(ids)} for n, ids in self.duplicates],
            "reservations": [
                {
                    "provider": r.provider,
                    "reservation_id": r.reservation_id,
                    "zone": r.zone,
                    "instance_type": r.instance_type,
                    "reserved": r.total,
                    "running": r.running,
                    "idle": r.total - r.running,
                    "capacity_block": r.capacity_block,
                    "start": ts(r.start),
                    "end": ts(r.end),
                    "state": r.state,
                }
                for r in self.reservations
            ],
        }


def _ladder(pool: PoolSpec, v: NodeView, lemons: Sequence[str], now: datetime) -> LadderStatus:
    h = pool.health
    count = sum((now - t).total_seconds() <= h.lemon_window_s for _, t in v.faults)
    iid = v.instance.instance_id if v.instance else None
    return LadderStatus(
        rung=_value(v.rung) if v.rung else None,
        rung_fault=v.rung_fault or None,
        rung_at=v.rung_at,
        faults_in_window=count,
        lemon_after=h.lemon_after,
        lemon=count >= h.lemon_after or (iid is not None and iid in lemons),
        return_streak=v.return_streak,
        host_id=v.instance.host_id if v.instance else None,
        diag=v.diag,
    )


def _node(
    pool: PoolSpec,
    v: NodeView,
    lemons: Sequence[str],
    now: datetime,
    bad_hosts: Sequence[str] = (),
    would: Sequence[Would] = (),
) -> NodeStatus:
    inst, summary = v.instance, v.summary
    return NodeStatus(
        node=v.node,
        instance_id=inst.instance_id if inst else None,
        provider=inst.provider if inst else None,
        zone=inst.zone if inst else None,
        instance_type=inst.instance_type if inst else None,
        lifecycle=v.lifecycle,
        health=_value(summary.status) if summary else None,
        report_fresh=bool(summary) and not v.rejected and v.lifecycle not in _NOT_FRESH,
        health_score=summary.health_score if summary else None,
        report_age_s=round(v.report_age_s, 1) if v.report_age_s is not None else None,
        clock_skew_s=(
            round(summary.clock_skew_s, 1)
            if summary is not None and summary.clock_skew_s is not None
            else None
        ),
        reason=v.reason,
        rejected=v.rejected,
        ladder=_ladder(pool, v, lemons, now),
        topology=inst.topology if inst else (),
        lemon_host=inst is not None and inst.host_id is not None and inst.host_id in bad_hosts,
        cordon=v.cordon,
        would=tuple((w.headline, w.mode.value) for w in would),
    )


def fleet_status(spec: FleetSpec, snap: Snapshot) -> FleetStatus:
    """The fleet's status from one run's snapshot: pools in fleet.yaml order, each pool's
    nodes in the order observe() returned them. Pure; O(nodes + pools)."""
    views = snap.observed.views
    by_pool: dict[str, list[NodeView]] = {}  # grouped once: a scan of every node per pool is
    for v in views:  # pools x nodes (100 x 100,000 in bench/scale.py)
        by_pool.setdefault(v.pool, []).append(v)
    held: dict[str, list[Would]] = {}
    for w in snap.plan.would:
        held.setdefault(w.action.replaces or w.action.node or "", []).append(w)
    pools = []
    for p in spec.pools:
        pm = snap.memory.pool(p.name)
        bad = lemon_hosts(pm)
        pools.append(
            PoolStatus(
                pool=p.name,
                provider=p.provider,
                min=p.min_nodes,
                target=p.target_nodes,
                max=p.max_nodes,
                providers=tuple(pl.provider for pl in p.placed()),
                nodes=tuple(
                    _node(p, v, pm.lemons, snap.now, bad, held.get(v.node, ()))
                    for v in by_pool.get(p.name, ())
                ),
                lemons=tuple(pm.lemons),
                lemon_hosts=bad,
                spares=p.spare_nodes,
                mode=p.mode,
            )
        )
    return FleetStatus(
        fleet=spec.name,
        store=spec.store_url,
        state_serial=snap.loaded.serial,
        error=fleet_rejection(views),
        pools=tuple(pools),
        rejections=tuple(snap.memory.rejections),
        foreign=tuple((i.provider, i.instance_id) for i in snap.observed.foreign),
        orphans=tuple(
            (v.node, v.pool, v.instance.provider, v.instance.instance_id, v.reason)
            for v in views
            if v.orphan and v.instance
        ),
        duplicates=tuple(
            (d.node, tuple(i.instance_id for i in d.instances)) for d in snap.observed.duplicates
        ),
        paused=snap.loaded.pause,
        reservations=snap.reservations,
    )

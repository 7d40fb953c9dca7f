"""Run a scenario: the real reconcile run (navarch.reconcile.run.run_apply, and so the real
observe, plan and Executor) every reconcile period on a virtual clock, against the
simulated provider and the in-memory store, with every node's shipped agent checking on
its own cadence between runs (navarch.simulate.world), and measure the outcome.

Event-driven and exact: the world's events (faults at continuous times, boots, jobs, the
cloud's status, agent checks of active nodes) run in time order between the ticks. A
tick (or an event-started run) is skipped when the world is clean (the last executed run
planned nothing and found every node serving, held as one of its pool's declared warm
spares, or booting; see _Tally._clean), nothing a run reads changed since (a report that
repeats its verdict is no change: HeartbeatLedger.news), and no deadline the planner
counts to is reached (a booting node's boot_timeout: _Tally.wake_s): that run would plan
nothing again. Before a run is executed, every quiescent node's latest heartbeat is
caught up (World.catch_up_all), accounted rather than built, signed and verified
(navarch.simulate.heartbeats). ``simulate(lazy=False)`` runs every check and every tick
and builds every report; tests/simulate prove both give the same document.

The virtual clock is handed to run_apply as its clock (navarch.reconcile.run.Clock); the
simulated store stamps objects with the same clock, so report ages are judged by the
store's modification times exactly as in production.
"""

from __future__ import annotations

import heapq
import logging
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from navarch.errors import NavarchError
from navarch.fleet.spec import FleetSpec
from navarch.outcome import Outcome, RunResult
from navarch.planner.model import READY, ActionKind, ActionReason, Lifecycle, Phase
from navarch.reconcile.run import Fleet, run_apply
from navarch.report.compat import StrEnum
from navarch.report.health import Status
from navarch.simulate.acceptance import AcceptanceTally
from navarch.simulate.detection import detection_keys
from navarch.simulate.events import EventRuns
from navarch.simulate.heartbeats import HeartbeatLedger
from navarch.simulate.policies import fleet_with_overrides
from navarch.simulate.provider import SimProvider
from navarch.simulate.refill import SlotRefills
from navarch.simulate.report import action_keys, cost_keys, percentile
from navarch.simulate.scenario import Scenario
from navarch.simulate.training import effective_training_time_ratio
from navarch.simulate.world import SimNode, World

log = logging.getLogger(__name__)
START = datetime(2026, 1, 1, tzinfo=UTC)
SECRET = b"navarch-simulate-fleet-secret-0001"
SAMPLE_EVERY_S = 3600


class _SimFleet(Fleet):
    def secret(self) -> bytes | None:
        return SECRET


class ServedBy(StrEnum):
    """What serves again after a fault (fault_list's ``served_by``, serialised by value)."""

    REPLACEMENT = "replacement"  # a node provisioned to replace the faulty one
    ITSELF = "itself"  # the faulty node, cured in place by a GPU reset or a reboot
    SPARE = "spare"  # another node that started serving while the pool was short


@dataclass
class _FaultRecord:
    """One real fault: when it struck (seconds since the start) and what answered it."""

    node: str
    pool: str
    cause: str
    at_s: float
    lemon: bool
    cordon_s: float | None = None
    uncordon_s: float | None = None
    serving_s: float | None = None
    replacement: str | None = None
    promoted: str | None = None  # the warm spare promoted to serve in its place
    served_by: ServedBy | None = None


@dataclass
class _Sample:
    """What one tick measured: nodes serving, instances by type."""

    serving: int
    instances: Counter[str]
    serving_nodes: frozenset[str]
    t_s: float = 0.0  # when it was taken


@dataclass
class _Tally:
    """What one simulation counts while the real reconcile run acts on the world."""

    world: World
    spec: FleetSpec
    target: int
    period_s: int
    records: dict[str, _FaultRecord] = field(default_factory=dict)  # open fault by node
    closed: list[_FaultRecord] = field(default_factory=list)
    unlinked: dict[str, list[_FaultRecord]] = field(default_factory=dict)  # pool -> FIFO
    wrongful: list[dict[str, Any]] = field(default_factory=list)
    scale_downs: list[dict[str, Any]] = field(default_factory=list)
    halts: Counter[str] = field(default_factory=Counter)
    actions: Counter[str] = field(default_factory=Counter)
    lost_to_capacity: int = 0  # faulty nodes terminated while their pool could not launch
    short_pools: set[str] = field(default_factory=set)  # last launch failed on capacity
    capacity_latencies: list[float] = field(default_factory=list)
    short_since: float | None = None
    breaker_runs: int = 0
    series: list[dict[str, Any]] = field(default_factory=list)
    timeline: list[dict[str, Any]] = field(default_factory=list)
    run_errors: Counter[str] = field(default_factory=Counter)
    serving_s: float = 0.0
    instance_s: Counter[str] = field(default_factory=Counter)
    phases: dict[str, Phase] = field(default_factory=dict)
    cordoned_for: dict[str, ActionReason | None] = field(default_factory=dict)  # last cordon's
    warm: bool = False
    peak_disrupted: int = 0  # most nodes of one pool out of service by navarch at once
    measured_s: int = 0
    runs_executed: int = 0
    clean: bool = False  # the last executed run found the world clean (see _clean)
    wake_s: float = math.inf  # a deadline the planner counts to: a booting node's boot_timeout
    last: _Sample | None = None
    ran_since_sample: bool = False  # a run (an event-started one) came after the last sample
    uncordoned_at: dict[str, float] = field(default_factory=dict)  # node -> last uncordon
    spares: frozenset[str] = frozenset()  # nodes the last plan saw as warm spares
    spare_s: float = 0.0  # spare instance-seconds
    spares_short_since: float | None = None  # fewer spares than declared since then
    spare_refills: list[float] = field(default_factory=list)  # seconds to refill each time
    slots: SlotRefills = field(default_factory=SlotRefills)  # each empty place's refill
    full_since: float | None = None  # the pool serves its full size since then
    full_spans: list[tuple[float, float]] = field(default_factory=list)
    interrupts: list[float] = field(default_factory=list)  # faults on serving nodes
    warm_s: float | None = None  # when the fleet first reached its target
    terminated_unreplaced: list[dict[str, Any]] = field(default_factory=list)
    accepted: AcceptanceTally = field(default_factory=lambda: AcceptanceTally(frozenset()))
    ledger: HeartbeatLedger | None = None  # heartbeats accounted, not built (lazy only)

    def on_fault(self, n: SimNode) -> None:
        """The world's hook: a node got a real fault."""
        w = self.world
        if self.last is not None and n.node in self.last.serving_nodes:
            self.interrupts.append(w.t)  # the synchronous job ran on it
        if n.node not in self.records:
            self.records[n.node] = _FaultRecord(n.node, n.pool, n.fault or "", w.t, n.lemon)
            self.timeline.append(
                {"t": round(w.t, 3), "kind": "fault", "node": n.node, "cause": n.fault}
            )

    def on_outcome(self, o: Outcome) -> None:
        """The executor's hook: one action's outcome."""
        a = o.action
        w = self.world
        self.actions[f"{a.kind.value}{'' if o.ok else '_failed'}"] += 1
        if a.kind is ActionKind.PROVISION and not o.ok and o.error == "CapacityError":
            self.short_pools.add(a.pool)
        elif a.kind is ActionKind.PROVISION and o.ok:
            self.short_pools.discard(a.pool)
        elif a.kind is ActionKind.TERMINATE and o.ok and a.pool in self.short_pools:
            # A faulty node navarch terminated while its replacement could not launch: the
            # pool is a node short until capacity returns.
            if a.node in self.records or self._had_fault(a.node):
                self.lost_to_capacity += 1
        if o.ok:
            self.accepted.on_action(a.kind, a.node, a.replaces, a.action_reason)
        if not o.ok or a.node is None:
            return
        self.timeline.append({"t": round(w.t, 3), "kind": a.kind.value, "node": a.node})
        n = w.by_name.get(a.node)
        rec = self.records.get(a.node)
        if a.kind is ActionKind.CORDON:
            self.cordoned_for[a.node] = a.action_reason
            if n is not None:
                w.cordoned(n, True)
            rec = rec or self._closed_uncordoned(a.node)
            if rec is not None and rec.cordon_s is None:
                rec.cordon_s = w.t
        elif a.kind is ActionKind.UNCORDON:
            self.uncordoned_at[a.node] = w.t
            if a.action_reason is ActionReason.SPARE_PROMOTED and a.replaces in self.records:
                self.records[a.replaces].promoted = a.node
            if n is not None:
                w.cordoned(n, False)
            if rec is not None:
                rec.uncordon_s = w.t
        elif a.kind is ActionKind.PROVISION:
            linked = self.records.get(a.replaces or "") or self._replaced_by(a.replaces)
            waiting = self.unlinked.setdefault(a.pool, [])
            if linked is not None:
                linked.replacement = a.node
                if linked in waiting:
                    waiting.remove(linked)
            elif a.replaces is None and waiting:
                # A provision after a terminate names nothing: it replaces the pool's
                # oldest terminated faulty node still without a replacement (FIFO).
                waiting.pop(0).replacement = a.node
        elif a.kind is ActionKind.TERMINATE:
            self._terminated(a.node, a.action_reason, a.reason)

    def _closed_uncordoned(self, node: str) -> _FaultRecord | None:
        """The node's latest fault when it closed before any cordon: a warm spare's or a
        surplus node's (its pool served its size without it). The node's next cordon
        still answers it, so the fault counts as acted on, with that latency."""
        for r in reversed(self.closed):
            if r.node == node:
                return r if r.cordon_s is None and r.served_by is ServedBy.SPARE else None
        return None

    def _had_fault(self, node: str | None) -> bool:
        """Whether the world's node (alive or terminated) ever had a real fault."""
        sim = self.world.terminated.get(node or "") or self.world.by_name.get(node or "")
        return sim is not None and sim.had_fault

    def _replaced_by(self, node: str | None) -> _FaultRecord | None:
        """The open fault whose replacement `node` is (a replacement that never booted is
        itself replaced: the new node carries the fault's recovery on)."""
        for rec in self.records.values():
            if node is not None and rec.replacement == node:
                return rec
        return None

    def _terminated(self, node: str, code: ActionReason | None, reason: str) -> None:
        w = self.world
        sim = w.terminated.get(node) or w.by_name.get(node)
        rec = self.records.get(node)
        if rec is not None and rec.replacement is None:
            self.unlinked.setdefault(rec.pool, []).append(rec)
            self.terminated_unreplaced.append({"node": node, "t_s": round(w.t, 3)})
        orphaned = self._replaced_by(node)
        if orphaned is not None and orphaned not in self.unlinked.get(orphaned.pool, []):
            # Its next replacement names the terminated node, or (after-terminate) nothing.
            self.unlinked.setdefault(orphaned.pool, []).append(orphaned)
        faulty = rec is not None or (
            sim is not None and (sim.had_fault or sim.never_boots or sim.latent is not None)
        )
        preempting = sim is not None and sim.notice_s is not None
        if ActionReason.SCALE_DOWN in (code, self.cordoned_for.get(node)):
            # A surplus node (e.g. the surge replacement once the faulty node came back
            # cured from a reboot, or a node back from a silence once its replacement
            # serves) is removed by the plan: counted, but not wrongful. It was cordoned
            # for the scale-down, and leaves when its drain finishes or times out.
            self.scale_downs.append({"node": node, "t_s": round(w.t, 3), "reason": reason})
        elif sim is not None and not faulty and not preempting:
            self.wrongful.append({"node": node, "t_s": round(w.t, 3), "reason": reason})

    def after_run(self, result: RunResult | None) -> None:
        """Halts, breaker runs and the phases Memory holds after one apply; whether the
        world is clean (a later tick with no event in between may be skipped)."""
        self.runs_executed += 1
        self.ran_since_sample = True
        if result is None:
            self.clean = False
            return
        if self.ledger is not None:
            self.ledger.after_run(result.memory)
        for h in result.plan.halts:
            self.halts[h.rule.value] += 1
        if result.plan.breaker_open:
            self.breaker_runs += 1
            if self.breaker_runs == 1 or self.breaker_runs % 12 == 0:
                log.warning(
                    "t=%s: circuit breaker holds: %s",
                    self.world.now.isoformat(),
                    "; ".join(h.message for h in result.plan.halts),
                )
        self.phases = {nm.node: nm.phase for nm in result.memory.nodes}
        # The views are what the run saw before it acted: a spare it promoted serves now.
        promoted = {
            o.action.node
            for o in result.outcomes
            if o.ok and o.action.kind is ActionKind.UNCORDON and o.action.node
        }
        self.spares = frozenset(
            v.node
            for v in result.plan.views
            if v.lifecycle is Lifecycle.SPARE and v.node not in promoted
        )
        self._spare_refill(len(self.spares))
        self.accepted.after_run(self.world, result.plan.views, promoted)
        for v in result.plan.views:
            node = self.world.by_name.get(v.node)
            if (
                v.lifecycle in READY
                and node is not None
                and node.instance.instance_id in self.world.nodes
            ):
                self.world.release(node)
        per_pool = Counter(nm.pool for nm in result.memory.nodes if nm.phase is not Phase.NONE)
        self.peak_disrupted = max([self.peak_disrupted, *per_pool.values()])
        self.clean = self._clean(result)

    def resting(self) -> bool:
        """Whether a run now would plan nothing: the last one found the world clean, nothing
        it reads changed since, and no deadline it counts to is near (a second's margin)."""
        return self.clean and not self.world.dirty and self.world.t < self.wake_s - 1.0

    def skipped_run(self) -> None:
        """A run that would have planned nothing and seen what the last one saw: what it
        would have counted all the same (a spare spell starts at the first run after the
        fleet first served its target)."""
        self._spare_refill(len(self.spares))

    def _clean(self, result: RunResult) -> bool:
        """Whether the next runs would plan nothing while no event happens: this run
        planned no action and no halt, Memory holds every node serving on a healthy report
        or booting (its boot_timeout sets wake_s), every pool holds its target and its
        declared spares (a booting node stands for either), with every node booted,
        reported and live (no fault, notice, impairment, outage, and no cordon but a warm
        spare's), and no pool has scheduled diagnostics."""
        w = self.world
        plan = result.plan
        self.wake_s = math.inf
        if plan.actions or plan.halts or plan.breaker_open:
            return False
        if any(v.lifecycle is Lifecycle.ACCEPTANCE for v in plan.views):
            return False  # its verdict (a pass, or the deadline) comes without an event
        if any(p.diagnostics.every_s is not None for p in self.spec.pools):
            return False
        if w.writes_fail() or any(
            z.at_s <= w.t < z.at_s + z.for_s for z in w.scenario.zone_outages
        ):
            return False
        booting = {v.node for v in plan.views if v.lifecycle is Lifecycle.BOOTING}
        if not self._pools_whole(booting) or len(result.memory.nodes) != len(w.nodes):
            return False
        for nm in result.memory.nodes:
            if nm.phase is not Phase.NONE or nm.streak or (nm.cordon and nm.cordon.is_operator):
                return False
            if nm.node in booting:
                self._wake_at(nm.pool, nm.node, nm.first_seen_at)
            elif nm.report is None or nm.report.status != Status.HEALTHY.value:
                return False
        return all(
            (n.node in booting or (n.up(w.t) and n.first_report_s is not None))
            and n.fault is None
            and n.notice_s is None
            and (not n.cordoned or n.node in self.spares)
            and not n.instance.cloud_status.impaired
            and n.silent_since is None
            and not w.cut_off(n)
            for n in w.nodes.values()
        )

    def _pools_whole(self, booting: set[str]) -> bool:
        """Every pool holds its target and its declared spares, a booting node standing for
        a serving one or a spare (a spare is an extra, cordoned node)."""
        w = self.world
        spares = Counter(w.by_name[s].pool for s in self.spares if s in w.by_name)
        per_pool = Counter(n.pool for n in w.nodes.values() if n.node not in self.spares)
        boot = Counter(n.pool for n in w.nodes.values() if n.node in booting)
        for p in self.spec.pools:
            declared = min(p.spare_nodes, p.max_nodes - p.target_nodes)
            held, live = spares.get(p.name, 0), per_pool.get(p.name, 0)
            if held + live != p.target_nodes + declared or held > declared:
                return False
            if live - boot.get(p.name, 0) > p.target_nodes:
                return False
        return True

    def _wake_at(self, pool: str, node: str, first_seen: datetime | None) -> None:
        """A booting node turns unhealthy boot_timeout_s after its launch (or its first
        sighting, whichever came first: navarch.planner.observe): a run must see that."""
        n = self.world.by_name.get(node)
        spec = next((p for p in self.spec.pools if p.name == pool), None)
        if n is None or spec is None:
            self.wake_s = -math.inf
            return
        since_s = n.launched_s
        if first_seen is not None:
            since_s = min(since_s, (first_seen - START).total_seconds())
        self.wake_s = min(self.wake_s, since_s + spec.health.boot_timeout_s)

    def measure(self, skipped: bool, last_tick: bool) -> None:
        """Serving capacity, capacity recovery and fault closure at this tick. A node
        serves when booted, fault-free, reported in this boot and not out of service in
        Memory, nor cordoned nor a warm spare; on a skipped tick nothing changed since
        the last one."""
        world = self.world
        previous = self.last
        skipped = skipped and not self.ran_since_sample
        self.ran_since_sample = False
        if skipped and self.last is not None:
            sample = self.last
        else:
            instances: Counter[str] = Counter()
            serving_nodes = set()
            for n in world.nodes.values():
                instances[n.instance.instance_type] += 1
                if (
                    n.up(world.t)
                    and n.first_report_s is not None
                    and n.fault is None
                    and n.notice_s is None
                    and not n.cordoned
                    and self.phases.get(n.node, Phase.NONE) is Phase.NONE
                    and n.node not in self.spares  # a warm spare is cordoned: no work
                    and self.accepted.serves(n.pool, n.node)
                ):
                    serving_nodes.add(n.node)
                    if n.latent is not None:
                        self.accepted.served_faulty.add(n.node)
            sample = _Sample(
                min(len(serving_nodes), self.target),
                instances,
                frozenset(serving_nodes),
                world.t,
            )
            self.last = sample
        for itype, count in sample.instances.items():
            self.instance_s[itype] += count * self.period_s
        live_spares = [
            x for x in self.spares if world.by_name[x].instance.instance_id in world.nodes
        ]
        self.spare_s += len(live_spares) * self.period_s
        serving = sample.serving
        self._training_spans(serving)
        # Availability is measured from the first time the fleet reached its target: the
        # first boot of the whole fleet is not an outage.
        self.warm = self.warm or serving >= self.target
        if self.warm and not last_tick:
            self.serving_s += serving * self.period_s
            self.measured_s += self.period_s
        if self.warm and serving < self.target and self.short_since is None:
            self.short_since = world.t
        elif serving >= self.target and self.short_since is not None:
            self.capacity_latencies.append(world.t - self.short_since)
            self.short_since = None
        if not skipped:
            self._close(sample.serving_nodes)
            if previous is not None:
                self._close_by_spares(
                    sample.serving_nodes,
                    sample.serving_nodes - previous.serving_nodes,
                    previous.t_s,
                )
        if int(world.t) % SAMPLE_EVERY_S == 0:
            self.series.append(
                {
                    "t_s": int(world.t),
                    "serving": serving,
                    "target": self.target,
                    "instances": sum(sample.instances.values()),
                    "open_faults": len(self.records),
                }
            )

    def declared_spares(self) -> int:
        """The spares the pools declare (nodes.spares, less what max leaves above target)."""
        return sum(
            max(0, min(p.spare_nodes, p.max_nodes - p.target_nodes)) for p in self.spec.pools
        )

    def _spare_refill(self, count: int) -> None:
        """Each spell with fewer spares than the pools declare (nodes.spares), from the
        time the fleet first served its target: how long until the spare set is whole
        again (a promotion, then a launch, boot and acceptance)."""
        t = self.world.t
        declared = self.declared_spares()
        if self.warm:
            self.slots.observe(t, count, declared)
        if count < declared and self.warm and self.spares_short_since is None:
            self.spares_short_since = t
        elif count >= declared and self.spares_short_since is not None:
            self.spare_refills.append(round(t - self.spares_short_since, 3))
            self.spares_short_since = None

    def _training_spans(self, serving: int) -> None:
        """The spells in which the fleet serves its full size (the synchronous job runs)."""
        t = self.world.t
        if serving >= self.target and self.warm_s is None:
            self.warm_s = t
        if serving >= self.target and self.full_since is None:
            self.full_since = t
        elif serving < self.target and self.full_since is not None:
            self.full_spans.append((self.full_since, t))
            self.full_since = None

    def _close_by_spares(
        self, serving_now: frozenset[str], fresh: frozenset[str], since_s: float
    ) -> None:
        """Close open faults served by another node: one that was booted and reported
        but not serving at the last tick (since_s) and serves now (serving_now) while its
        pool, without it, is below target (counted now: the faulty node it stands in for
        may have left in the same run), and that is neither a faulty node nor a fault's replacement
        (a promoted warm spare, or any surplus node that came back into service; a node
        that just booted is a launch, not a spare). The oldest open fault of the pool is
        served first; from the node's uncordon when that came after the fault."""
        w = self.world
        taken = set(self.records) | {r.replacement for r in self.records.values()}
        candidates = sorted(
            m
            for m in fresh
            if m not in taken
            and (first := w.by_name[m].first_report_s) is not None
            and first <= since_s
        )
        if not candidates:
            return
        serving = Counter(w.by_name[m].pool for m in serving_now if m in w.by_name)
        for pool in self.spec.pools:
            mine = [m for m in candidates if w.by_name[m].pool == pool.name]
            base = serving.get(pool.name, 0) - len(mine)
            for m in mine:
                if base >= pool.target_nodes:
                    break
                base += 1
                waiting = sorted(
                    (r for r in self.records.values() if r.pool == pool.name),
                    key=lambda r: (r.at_s, r.node),
                )
                if not waiting:
                    break
                rec = waiting[0]
                since = self.uncordoned_at.get(m)
                rec.serving_s = since if since is not None and since > rec.at_s else w.t
                rec.served_by = ServedBy.SPARE
                self.closed.append(self.records.pop(rec.node))

    def _close(self, serving_nodes: frozenset[str]) -> None:
        """Close each open fault whose promoted spare serves (from its uncordon), whose
        replacement serves (from its first report after boot), whose node serves again
        (cured in place: from its uncordon), or whose pool serves its size without it."""
        w = self.world
        whole = Counter(w.by_name[m].pool for m in serving_nodes if m in w.by_name)
        targets = {p.name: p.target_nodes for p in self.spec.pools}
        for name, rec in list(self.records.items()):
            repl = w.by_name.get(rec.replacement or "")
            if rec.promoted is not None and rec.promoted in serving_nodes:
                # The warm spare the planner promoted in its place serves: from its uncordon.
                rec.serving_s = self.uncordoned_at.get(rec.promoted, w.t)
                rec.served_by = ServedBy.SPARE
            elif repl is not None and rec.replacement in serving_nodes:
                rec.serving_s = self.accepted.serving_since(
                    repl.pool, repl.node, repl.first_report_s
                )
                rec.served_by = ServedBy.REPLACEMENT
            elif name in serving_nodes and w.by_name[name].fault is None:
                rec.serving_s = rec.uncordon_s if rec.uncordon_s is not None else w.t
                rec.served_by = ServedBy.ITSELF
            elif whole.get(rec.pool, 0) >= targets.get(rec.pool, 0) > 0:
                # The pool serves its size without the node: another one stands in (a spare,
                # or a surplus node), even if its own replacement went to the spare set.
                rec.serving_s = w.t
                rec.served_by = ServedBy.SPARE
            else:
                continue
            self.closed.append(self.records.pop(name))


def _wire(
    scenario: Scenario, spec: FleetSpec, world: World, fleet: _SimFleet, tally: _Tally, lazy: bool
) -> EventRuns | None:
    """Connect the world's hooks to the tally, the heartbeat ledger (lazy) and the
    scenario's event-started runs (None without events:)."""
    world.acceptance = {p.name: p.acceptance for p in spec.pools if p.acceptance is not None}
    world.gated = frozenset(world.acceptance) | {p.name for p in spec.pools if p.spare_nodes > 0}
    tally.accepted = AcceptanceTally(frozenset(world.acceptance))
    world.on_fault = tally.on_fault
    if lazy:
        tally.ledger = HeartbeatLedger(world, spec, fleet.reports_memo, SECRET)
        world.on_heartbeat = tally.ledger.account
        world.on_write = tally.ledger.news
    events = EventRuns(world, scenario.events) if scenario.events is not None else None
    if events is not None:
        world.on_report = events.on_report
        world.on_cloud_event = events.on_cloud_event
    return events


def simulate(
    scenario: Scenario,
    seed: int | None = None,
    lazy: bool = True,
    on_tick: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Run scenario (seed overrides its own) -> the result document (see docs/simulate.md).
    on_tick: called after each of its Scenario.ticks reconcile ticks (a progress bar).

    lazy: skip the work that provably changes nothing (quiescent agents' checks, their
    unread heartbeats, reconcile ticks of a clean world); False runs every agent check of
    every node and every tick: the same document, apart from the "engine" counts.
    Raises ConfigError for a bad fleet file. Deterministic: no wall clock, seeded streams.
    """
    if seed is not None:
        scenario = replace(scenario, seed=seed)
    spec: FleetSpec = fleet_with_overrides(
        scenario.fleet_path, scenario.pool_overrides, str(scenario.source)
    )
    # Every provider becomes the simulated one (type local: no cloud-init is rendered).
    spec = replace(
        spec, providers={n: {"type": "local", "max_parallel": 1} for n in spec.providers}
    )
    world = World(scenario, spec.name, SECRET, START, lazy=lazy)
    gpus = {p.name: p.gpus_per_node for p in spec.pools}
    providers = {n: SimProvider(n, world, gpus) for n in sorted(spec.providers)}
    fleet = _SimFleet(spec, world.store, dict(providers))
    tally = _Tally(
        world, spec, sum(p.target_nodes for p in spec.pools), scenario.reconcile_period_s
    )
    events = _wire(scenario, spec, world, fleet, tally, lazy)
    period = scenario.reconcile_period_s
    steps = scenario.duration_s // period
    # Ticks go in first: at one time a tick runs before the checks due then.
    for step in range(steps + 1):
        world.schedule(float(step * period), "tick", step)
    world.start_processes()
    while world.queue:
        t, _, kind, args = heapq.heappop(world.queue)
        if t > steps * period:
            break
        world.set_time(t)
        if kind == "event_run":
            # The drain that took this message ends now unless a later one keeps it open.
            if events is not None and events.starts_run(*args):
                if lazy and tally.resting():
                    tally.skipped_run()
                else:
                    _run(fleet, world, tally, f"sim-event-{events.runs:06d}")
            continue
        if kind != "tick":
            world.handle(kind, args)
            continue
        step = args[0]
        skipped = lazy and tally.resting()
        if skipped:
            tally.skipped_run()
        else:
            _run(fleet, world, tally, f"sim-{step:06d}")
        tally.measure(skipped, step == steps)
        if on_tick is not None:
            on_tick()
    doc = _document(scenario, tally)
    if events is not None:
        doc["events"] = {
            "delivered": events.delivered,
            "lost": events.lost,
            "runs_started": events.runs,
        }
    return doc


def _run(fleet: Fleet, world: World, tally: _Tally, run_id: str) -> None:
    """One real apply now (a tick's, or an event-started one), its outcomes tallied."""
    world.catch_up_all(strict=True)
    if tally.ledger is not None:
        tally.ledger.before_run()
    world.dirty = False
    result: RunResult | None
    try:
        result = run_apply(
            fleet,
            command="simulate",
            clock=world.clock,
            on_outcome=tally.on_outcome,
            run_id=run_id,
        )
    except NavarchError as exc:
        tally.run_errors[type(exc).__name__] += 1
        result = None
    tally.after_run(result)


def _fault_entry(r: _FaultRecord) -> dict[str, Any]:
    """One fault for the result's fault_list: node, cause, strike time, and (once known) the
    seconds to its cordon and to serving again, and whether a replacement or the node
    itself (cured in place) serves."""
    since = {
        "to_cordon_s": r.cordon_s,
        "to_serving_s": r.serving_s,
    }
    entry: dict[str, Any] = {"node": r.node, "cause": r.cause, "t_s": round(r.at_s, 3)}
    entry.update({k: round(v - r.at_s, 3) for k, v in since.items() if v is not None})
    if r.served_by is not None:
        entry["served_by"] = r.served_by.value
    return entry


def _document(scenario: Scenario, t: _Tally) -> dict[str, Any]:
    """The result document: availability, latencies, terminations, costs, series."""
    all_faults = t.closed + list(t.records.values())
    acted = [r for r in all_faults if r.cordon_s is not None]
    to_cordon = [round(r.cordon_s - r.at_s, 3) for r in acted if r.cordon_s is not None]
    to_serving = [round(r.serving_s - r.at_s, 3) for r in t.closed if r.serving_s is not None]
    w = t.world
    return {
        **_run_keys(scenario, t),
        **_fault_keys(scenario, t, all_faults, to_cordon, to_serving),
        **_training_keys(scenario, t),
        **action_keys(t),
        **cost_keys(scenario, t),
        **t.accepted.keys([*w.nodes.values(), *w.terminated.values()]),
        **detection_keys(
            [
                (
                    r.cause,
                    None if r.cordon_s is None else round(r.cordon_s - r.at_s, 3),
                    None if r.serving_s is None else round(r.serving_s - r.at_s, 3),
                )
                for r in all_faults
            ],
            percentile,
        ),
        "fault_to_cordon_s": sorted(to_cordon),
        "fault_to_serving_s": sorted(to_serving),
        "series": t.series,
        "timeline": t.timeline[:5000],
        # What the simulation itself cost; differs between lazy and exhaustive runs.
        "engine": {
            "runs_executed": t.runs_executed,
            "agent_checks": w.agent_checks,
            "reports_written": w.reports_written,
            "heartbeats_accounted": t.ledger.accounted if t.ledger is not None else 0,
            "lists": w.api_calls.get("list", 0),
        },
    }


def _run_keys(scenario: Scenario, t: _Tally) -> dict[str, Any]:
    """The scenario's settings and the availability it reached."""
    return {
        "scenario": scenario.name,
        "seed": scenario.seed,
        "duration_s": scenario.duration_s,
        "reconcile_period_s": scenario.reconcile_period_s,
        "agent_period_s": scenario.agent_period_s,
        "heartbeat_s": scenario.heartbeat_s,
        "target_nodes": t.target,
        "availability": round(t.serving_s / (t.target * t.measured_s), 6)
        if t.target and t.measured_s
        else 0.0,
    }


def _fault_keys(
    scenario: Scenario,
    t: _Tally,
    all_faults: list[_FaultRecord],
    to_cordon: list[float],
    to_serving: list[float],
) -> dict[str, Any]:
    """The faults: their list and causes, and the latencies to cordon and to serving."""
    # A fault that struck in the run's last minutes may not be acted on yet.
    late_s = scenario.duration_s - 15 * 60
    never = [r for r in all_faults if r.cordon_s is None and r.at_s < late_s]
    causes = Counter(r.cause for r in all_faults)
    served_by = Counter(r.served_by.value for r in t.closed if r.served_by is not None)
    return {
        "faults": len(all_faults),
        "fault_list": [_fault_entry(r) for r in sorted(all_faults, key=lambda r: (r.at_s, r.node))][
            :5000
        ],
        "faults_by_cause": dict(sorted(causes.items())),
        "faults_on_lemons": sum(1 for r in all_faults if r.lemon),
        "faults_never_acted_on": len(never),
        "faults_open_at_end": len(t.records),
        "p50_fault_to_cordon_s": percentile(to_cordon, 0.5),
        "p95_fault_to_cordon_s": percentile(to_cordon, 0.95),
        "max_fault_to_cordon_s": max(to_cordon) if to_cordon else None,
        "p50_fault_to_serving_s": percentile(to_serving, 0.5),
        "p95_fault_to_serving_s": percentile(to_serving, 0.95),
        "max_fault_to_serving_s": max(to_serving) if to_serving else None,
        "served_by": dict(sorted(served_by.items())),
    }


def _training_keys(scenario: Scenario, t: _Tally) -> dict[str, Any]:
    """The effective training time ratio of the run and the training model behind it."""
    spans = list(t.full_spans)
    if t.full_since is not None:
        spans.append((t.full_since, float(scenario.duration_s)))
    return {
        "effective_training_time_ratio": effective_training_time_ratio(
            spans,
            t.interrupts,
            (t.warm_s if t.warm_s is not None else float(scenario.duration_s), scenario.duration_s),
            scenario.training_checkpoint_interval_s,
            scenario.training_restart_s,
        ),
        "training": {
            "checkpoint_interval_s": scenario.training_checkpoint_interval_s,
            "restart_s": scenario.training_restart_s,
        },
    }

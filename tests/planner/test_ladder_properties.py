"""Hypothesis properties of the remediation ladder over many runs.

A small fake world: one pool on scheduler none whose nodes' agents report every run. A
drawn schedule says, per run and node, whether the node faults (an XID whose catalogue
action is reboot, reset_gpu or replace), runs GPU work or goes idle, and whether a reboot
brings it back. Each run observe() and plan() run as `navarch apply` does; the plan is
applied to Memory the way navarch.reconcile.executor does (its own _with_fault records a
fault), a reboot giving the node a new boot id and clearing its fault, a GPU reset
clearing its fault on the same boot.

Properties, checked on every plan of every run:
- a node is only rebooted or GPU-reset after navarch cordoned it (no uncordon since), while Memory has
  it draining (drain finished) or remediating, and never while its latest report (this
  run's) shows GPU processes;
- an automatic uncordon only follows return_after distinct healthy reports from a boot
  other than the fault's, the latest of them this run;
- no node is ever terminated while it is remediating with fewer than boot_timeout since
  its reboot and no new-boot report, unless the plan says why (replace rung, offline).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import cache

import builders
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from navarch.fleet.spec import FleetSpec
from navarch.inventory import Instance, InstanceState
from navarch.planner.model import (
    ActionKind,
    Cordon,
    Diag,
    DiagState,
    Lifecycle,
    Memory,
    NodeMemory,
    Phase,
    Plan,
)
from navarch.planner.observe import observe
from navarch.planner.payloads import CordonPayload, DiagnosePayload, ProvisionPayload, RemedyPayload
from navarch.planner.plan import plan
from navarch.reconcile.handlers import _with_fault

FLEET = "lp"
XIDS = {79: "reboot", 48: "reset_gpu", 95: "replace", 31: "reboot"}
EVENTS = ("ok", "ok", "ok", "busy", "idle", "idle", "fault")
PROPERTY = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# Built once, here: a strategy built where it is drawn is built again on every draw.
LADDERS = st.sampled_from(
    (
        ["reboot", "replace"],
        ["reset_gpu", "reboot", "replace"],
        ["reboot"],
        ["reset_gpu", "replace"],
        ["replace"],
    )
)
DRAIN_TIMEOUTS = st.sampled_from(("10m", "30m"))
REPLACEMENTS = st.sampled_from(("surge", "after-terminate"))
LADDER_WINDOWS = st.sampled_from(("30m", "24h"))
RETURN_REQUIRES_DIAG = st.sampled_from((False, 2))


@st.composite
def specs(draw: st.DrawFn) -> FleetSpec:
    health = {
        "unhealthy_after": draw(st.integers(1, 2)),
        "boot_timeout": "15m",
        "drain_timeout": draw(DRAIN_TIMEOUTS),
        "max_unavailable": draw(st.integers(1, 2)),
        "replacement": draw(REPLACEMENTS),
        "remediation": draw(LADDERS),
        "return_after": draw(st.integers(1, 3)),
        "ladder_window": draw(LADDER_WINDOWS),
        "lemon_after": draw(st.integers(2, 4)),
        "return_requires_diag": draw(RETURN_REQUIRES_DIAG),
    }
    doc = builders.fleet_doc(
        FLEET,
        {"a": builders.pool_doc(target=3, max_nodes=4, health=health)},
        safety={"repairs_per_pool_per_hour": draw(st.integers(1, 6))},
    )
    return builders.fleet_from_dict(doc)


@dataclass
class Node:
    instance: Instance
    boot: int = 1
    sequence: int = 100
    fault: int | None = None  # XID code the node suffers from until a reboot
    procs: int = 0
    dead: bool = False  # a reboot that never comes back (no reports)


@dataclass
class World:
    spec: FleetSpec
    now: datetime
    nodes: dict[str, Node]
    memory: Memory
    ids: int = 0
    cordoned: set[str] = field(default_factory=set)  # navarch's cordon, no uncordon since
    healthy_since_reboot: dict[str, list[int]] = field(default_factory=dict)
    reset_at_sequence: dict[str, int] = field(default_factory=dict)  # last sequence before a reset
    last: Plan | None = None

    def after_remedy(self, name: str, nm: NodeMemory, s) -> bool:  # noqa: ANN001
        """A report from after the node's last remedy: a new boot, or after its GPU reset."""
        assert nm.fault is not None
        if s.boot_id != nm.fault.boot_id:
            return True
        return nm.rung == "reset_gpu" and s.sequence > self.reset_at_sequence.get(name, 1 << 60)

    def report(self, name: str) -> builders.ReportObservation | None:
        n = self.nodes[name]
        if n.dead or n.instance.state is not InstanceState.RUNNING:
            return None
        n.sequence += 1
        code = n.fault
        s = builders.summary(
            sequence=n.sequence,
            generated_at=self.now - timedelta(seconds=10),
            status="unhealthy" if code else "healthy",
            fatal=bool(code),
            action=XIDS[code] if code else "none",
            boot_id=f"{name}-boot-{n.boot}",
            findings=(f"XID {code}: simulated on 0000:3B:00.0",) if code else (),
            process_count=n.procs,
            utilization_pct=10.0,
        )
        return builders.observation(name, "a", s)

    def step(self, events: dict[str, str]) -> None:
        self.now += timedelta(minutes=5)
        for name, n in self.nodes.items():
            if n.instance.state is InstanceState.PENDING:
                n.instance = replace(n.instance, state=InstanceState.RUNNING)
                continue
            ev = events.get(name, "ok")
            if ev == "busy" and name not in self.cordoned:
                n.procs = 2
            elif ev == "idle":
                n.procs = 0
            elif ev.startswith("fault") and n.fault is None:
                n.fault = int(ev.split(":")[1])
        reports = {k: r for k in self.nodes if (r := self.report(k)) is not None}
        inventory = tuple(n.instance for n in self.nodes.values())
        observed = observe(self.spec, inventory, reports, self.memory, self.now)
        p = plan(self.spec, observed.views, observed.memory, self.now)
        self.check(observed.memory, {v.node: v for v in observed.views}, reports, p)
        self.last = p
        self.memory = observed.memory
        for a in p.actions:
            self.apply(a)

    def check(self, mem: Memory, views: dict, reports: dict, p: Plan) -> None:
        h = self.spec.pools[0].health
        # Healthy reports from a new boot since the reboot, this run's included.
        for name, obs in reports.items():
            nm = mem.node(name)
            if nm is None or nm.phase is not Phase.REMEDIATING or nm.fault is None:
                continue
            s = obs.summary
            if s.status == "healthy" and self.after_remedy(name, nm, s):
                self.healthy_since_reboot.setdefault(name, []).append(s.sequence)
            else:
                self.healthy_since_reboot[name] = []
        for a in p.actions:
            nm = mem.node(a.node) if a.node else None
            if a.kind in (ActionKind.REBOOT, ActionKind.RESET_GPU):
                assert a.node in self.cordoned, f"{a.node} rebooted without navarch's cordon"
                assert nm is not None and nm.phase in (Phase.DRAINING, Phase.REMEDIATING), nm
                if nm.phase is Phase.DRAINING:
                    assert views[a.node].drained, f"{a.node} rebooted before its drain finished"
                obs = reports.get(a.node)
                assert obs is not None and obs.summary.process_count == 0, (
                    f"{a.node} rebooted with GPU processes: {obs}"
                )
            if a.kind is ActionKind.UNCORDON:
                assert nm is not None and nm.phase is Phase.REMEDIATING and nm.fault is not None
                obs = reports.get(a.node)
                assert obs is not None, f"{a.node} uncordoned without a report this run"
                s = obs.summary
                assert s.status == "healthy" and self.after_remedy(a.node, nm, s), (a, s, nm.fault)
                seen = self.healthy_since_reboot.get(a.node, [])
                assert len(set(seen)) >= h.return_after, (a.reason, seen)
                if h.return_requires_diag is not None:  # a diag after the remedy passed
                    d = nm.diag
                    assert d is not None and d.state is DiagState.PASS, (a.reason, d)
                    assert d.started_at is not None and nm.rung_at is not None
                    assert d.started_at >= nm.rung_at and d.level >= h.return_requires_diag
            if a.kind is ActionKind.DIAGNOSE:
                assert a.node in self.cordoned and nm is not None
                assert nm.phase in (Phase.DRAINING, Phase.REMEDIATING), nm

    def apply(self, a) -> None:  # noqa: ANN001 - an Action
        mem, now = self.memory, self.now
        nm = mem.node(a.node) if a.node else None
        if a.kind is ActionKind.PROVISION:
            self.ids += 1
            inst = builders.instance(
                FLEET,
                a.pool,
                a.node,
                launched_at=now,
                state=InstanceState.PENDING,
                instance_id=f"i-{self.ids}",
                zone=a.carries(ProvisionPayload).places[0].zone,
                instance_type=a.carries(ProvisionPayload).places[0].instance_type,
            )
            self.nodes[a.node] = Node(inst)
            pm = mem.pool(a.pool)
            index = int(a.node.rsplit("-", 1)[1])
            self.memory = mem.with_pool(
                replace(pm, next_index=max(pm.next_index, index + 1))
            ).with_node(NodeMemory(a.node, a.pool, inst.instance_id, first_seen_at=now))
        elif a.kind is ActionKind.CORDON:
            self.cordoned.add(a.node)
            nm = nm or NodeMemory(a.node, a.pool, first_seen_at=now)
            nm = replace(
                nm,
                phase=Phase.CORDONED,
                phase_at=now,
                phase_reason=a.reason,
                cordon=Cordon(
                    a.action_reason, now, repair=a.repair, idle=a.carries(CordonPayload).idle
                ),
            )
            # As the executor does: a cordon for another reason (scale-down, drift) forgets
            # an old fault, so the ladder never remedies a node that is not sick.
            nm = (
                _with_fault(nm, a.fault, now, 7 * 86400)
                if a.fault is not None
                else replace(nm, fault=None)
            )
            mem = mem.with_node(nm)
            if a.repair:
                pm = mem.pool(a.pool)
                mem = mem.with_pool(replace(pm, repairs=pm.repairs + (now,)))
            self.memory = mem
        elif a.kind is ActionKind.DRAIN:
            if nm is not None and nm.phase is Phase.CORDONED:
                self.memory = mem.with_node(replace(nm, phase=Phase.DRAINING, phase_at=now))
        elif a.kind in (ActionKind.REBOOT, ActionKind.RESET_GPU):
            n = self.nodes[a.node]
            if a.kind is ActionKind.REBOOT:
                n.boot += 1
            else:  # a GPU reset cures the simulated fault and keeps the boot
                self.reset_at_sequence[a.node] = n.sequence
            n.fault = None
            n.procs = 0
            self.healthy_since_reboot[a.node] = []
            assert nm is not None
            nm = _with_fault(nm, a.fault, now, 7 * 86400)
            self.memory = mem.with_node(
                replace(
                    nm,
                    phase=Phase.REMEDIATING,
                    phase_at=now,
                    phase_reason=a.reason,
                    rung=a.carries(RemedyPayload).rung,
                    rung_fault=a.fault.key if a.fault else nm.rung_fault,
                    rung_at=now,
                    return_streak=0,
                )
            )
        elif a.kind is ActionKind.DIAGNOSE:
            # Started detached: running on the first DIAGNOSE, the verdict on the next
            # (fail while the simulated node still has its fault).
            assert nm is not None
            prev = nm.diag
            if prev is None or prev.state is not DiagState.RUNNING:
                d = a.carries(DiagnosePayload)
                diag = Diag(d.level, d.why, DiagState.RUNNING, now, now)
            else:
                fault = self.nodes[a.node].fault
                diag = replace(prev, state=DiagState.FAIL if fault else DiagState.PASS, at=now)
            self.memory = mem.with_node(replace(nm, diag=diag))
        elif a.kind is ActionKind.UNCORDON:
            self.cordoned.discard(a.node)
            assert nm is not None
            self.memory = mem.with_node(
                replace(
                    nm,
                    phase=Phase.NONE,
                    phase_at=now,
                    phase_reason="",
                    streak=0,
                    return_streak=0,
                    cordon=None,
                )
            )
        elif a.kind is ActionKind.TERMINATE:
            self.nodes.pop(a.node, None)
            self.cordoned.discard(a.node)
            nm = nm or NodeMemory(a.node, a.pool)
            self.memory = mem.with_node(replace(nm, phase=Phase.TERMINATING, phase_at=now))


NODES = st.sampled_from(tuple(f"{FLEET}-a-{i:04d}" for i in range(1, 8)))


@cache
def run_events(calm: int) -> st.SearchStrategy[dict[str, str]]:
    """One run's events by node; calm: how many times the other events outweigh faults."""
    events = EVENTS[:-1] * calm + tuple(f"fault:{c}" for c in XIDS)
    return st.dictionaries(NODES, st.sampled_from(events), max_size=4)


@st.composite
def schedules(
    draw: st.DrawFn, calm: int = 1
) -> tuple[FleetSpec, list[dict[str, str]], frozenset[str]]:
    """A fleet and per-run events; calm: how many times the other events outweigh faults."""
    spec = draw(specs())
    runs = draw(st.integers(8, 30))
    schedule = [draw(run_events(calm)) for _ in range(runs)]
    dead = draw(st.frozensets(NODES, max_size=1))
    return spec, schedule, dead


def _world(spec: FleetSpec) -> World:
    now = builders.BASE_NOW
    nodes = {}
    for i in range(1, 4):
        name = f"{FLEET}-a-{i:04d}"
        nodes[name] = Node(
            builders.instance(
                FLEET, "a", name, launched_at=now - timedelta(hours=2), instance_id=f"i-{name}"
            )
        )
    mem = builders.memory(
        FLEET,
        [NodeMemory(n, "a", f"i-{n}", first_seen_at=now) for n in nodes],
        [builders.pool_memory("a", next_index=4)],
    )
    return World(spec, now, nodes, mem)


@PROPERTY
@given(schedules())
def test_reboots_and_returns_follow_the_ladder_rules(case) -> None:  # noqa: ANN001
    spec, schedule, dead = case
    world = _world(spec)
    for events in schedule:
        world.step(events)
        for name in dead:  # a node that does not come back from its reboot
            n = world.nodes.get(name)
            nm = world.memory.node(name)
            if n is not None and nm is not None and nm.phase is Phase.REMEDIATING:
                n.dead = True


@PROPERTY
@given(schedules(calm=3))
def test_every_fault_ends_rebooted_returned_or_replaced(case) -> None:  # noqa: ANN001
    """Liveness: once faults stop, every remediating node returns or is replaced and none is
    left out of service, unless the circuit breaker stopped the pool for a human (half of
    it sick at once: by design nothing more is repaired, reboots included)."""
    spec, schedule, dead = case
    world = _world(spec)
    for events in schedule:
        world.step(events)
    for _ in range(40):
        world.step({name: "idle" for name in world.nodes})
    assert world.last is not None
    if world.last.breaker_open:
        return
    views = observe(
        spec, tuple(n.instance for n in world.nodes.values()), {}, world.memory, world.now
    ).views
    lifecycles = [v.lifecycle for v in views]
    assert Lifecycle.REMEDIATING not in lifecycles, lifecycles
    assert Lifecycle.DRAINING not in lifecycles and Lifecycle.CORDONED not in lifecycles

"""No node lost to a stockout, over many runs of observe() and plan().

A small world applies each plan as the executor would: a provision fails on capacity in
every place while the stockout lasts (each place is backed off, as
navarch.reconcile.provisioning records it) and launches a node that reports healthy from
the next run after; cordon, drain and terminate move a node's phase as the handlers do.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

import builders

from navarch.fleet.spec import FleetSpec
from navarch.planner.context import PlanOptions
from navarch.planner.model import (
    READY,
    Action,
    ActionKind,
    Cordon,
    Memory,
    NodeMemory,
    Phase,
    Plan,
)
from navarch.planner.observe import observe
from navarch.planner.payloads import CordonPayload, ProvisionPayload
from navarch.planner.plan import plan

FLEET = "so"
START = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
STEP = timedelta(minutes=10)
STOCKOUT = timedelta(days=2)


@dataclass
class World:
    spec: FleetSpec
    now: datetime
    memory: Memory
    nodes: dict[str, datetime] = field(default_factory=dict)  # node -> launched_at
    zones: dict[str, str] = field(default_factory=dict)  # node -> the zone it launched in
    faulty: set[str] = field(default_factory=set)
    sequence: int = 10
    terminated_short: list[str] = field(default_factory=list)  # lost: no replacement ready
    terminated: list[str] = field(default_factory=list)

    def run(self) -> Plan:
        self.sequence += 1
        inventory = tuple(
            builders.instance(FLEET, "train", n, launched_at=t, zone=self.zones.get(n, "z1"))
            for n, t in self.nodes.items()
        )
        reports = {}
        for n, t in self.nodes.items():
            if self.now - t < STEP:
                continue  # booting: its first report comes next run
            sick = n in self.faulty
            reports[n] = builders.observation(
                n,
                "train",
                builders.summary(
                    sequence=self.sequence,
                    generated_at=self.now - timedelta(seconds=10),
                    status="unhealthy" if sick else "healthy",
                    fatal=sick,
                    action="reboot" if sick else None,
                    fault_key="xid:79@gpu0" if sick else None,
                    findings=("XID 79: GPU has fallen off the bus",) if sick else (),
                ),
            )
        drained = {n: self.memory.node(n) is not None for n in self.nodes}
        observed = observe(self.spec, inventory, reports, self.memory, self.now, drained)
        self.memory = observed.memory
        p = plan(self.spec, observed.views, self.memory, self.now, PlanOptions())
        ready = {v.node for v in observed.views if v.lifecycle in READY}
        for a in p.actions:
            self.apply(a, ready)
        return p

    def apply(self, a: Action, ready: set[str]) -> None:
        m, now = self.memory, self.now
        if a.kind is ActionKind.PROVISION:
            pm = m.pool("train")
            if now < START + STOCKOUT:
                pm = replace(
                    pm,
                    exhausted=tuple(
                        builders.exhausted(
                            pl.zone, pl.instance_type, until=now + STEP, provider="sim"
                        )
                        for pl in a.carries(ProvisionPayload).places
                    ),
                )
                self.memory = m.with_pool(pm)
                return
            assert a.node is not None
            index = int(a.node.rsplit("-", 1)[1])
            self.nodes[a.node] = now
            self.zones[a.node] = a.carries(ProvisionPayload).places[0].zone
            pm = replace(pm, next_index=max(pm.next_index, index + 1), exhausted=())
            self.memory = m.with_pool(pm).with_node(
                NodeMemory(a.node, "train", f"i-{a.node}", first_seen_at=now)
            )
        elif a.kind is ActionKind.CORDON:
            nm = m.node(a.node) or NodeMemory(a.node, "train")
            fault = a.fault
            faults = nm.faults + ((fault.key.format(), now),) if fault else nm.faults
            self.memory = m.with_node(
                replace(
                    nm,
                    phase=Phase.CORDONED,
                    phase_at=now,
                    cordon=Cordon(
                        a.action_reason, now, repair=a.repair, idle=a.carries(CordonPayload).idle
                    ),
                    fault=fault,
                    faults=faults,
                )
            )
        elif a.kind is ActionKind.DRAIN:
            nm = m.node(a.node)
            assert nm is not None
            self.memory = m.with_node(replace(nm, phase=Phase.DRAINING, phase_at=now))
        elif a.kind is ActionKind.TERMINATE:
            self.terminated.append(a.node)
            if (
                a.node in self.faulty
                and len(ready - {a.node}) < self.spec.pool("train").target_nodes
            ):
                self.terminated_short.append(a.node)
            del self.nodes[a.node]
            self.faulty.discard(a.node)
            nm = m.node(a.node)
            assert nm is not None
            self.memory = m.with_node(replace(nm, phase=Phase.TERMINATING, phase_at=now))
        else:
            raise AssertionError(f"a replace-only pool got {a.kind.value} {a.node}")


def _world(health: dict[str, object]) -> World:
    pool = builders.pool_doc(
        target=3, max_nodes=3, zones=("z1", "z2"), instance_types=("t1", "t2"), health=health
    )
    spec = builders.fleet_from_dict(builders.fleet_doc(FLEET, {"train": pool}))
    names = [f"{FLEET}-train-{i:04d}" for i in (1, 2, 3)]
    memory = builders.memory(
        FLEET,
        [NodeMemory(n, "train", f"i-{n}", first_seen_at=START - timedelta(days=1)) for n in names],
        [builders.pool_memory("train", next_index=4)],
    )
    w = World(spec, START, memory, {n: START - timedelta(days=1) for n in names})
    w.zones.update(zip(names, ("z1", "z2", "z1"), strict=True))  # spread, as the pool wants
    return w


def _through_the_stockout(w: World) -> None:
    w.faulty.add(f"{FLEET}-train-0001")
    end = START + STOCKOUT + timedelta(hours=3)
    while w.now < end:
        w.run()
        w.now += STEP


def test_a_replace_only_pool_terminates_no_node_before_its_replacement_exists() -> None:
    w = _world({"remediation": ["replace"]})
    _through_the_stockout(w)
    assert w.terminated_short == []
    # Once capacity came back the replacement served and the faulty node left.
    assert w.terminated == [f"{FLEET}-train-0001"]
    assert f"{FLEET}-train-0001" not in w.nodes and len(w.nodes) == 3


def test_after_terminate_pool_in_a_known_stockout_waits_for_its_replacement() -> None:
    """Under after-terminate a pool learns of a stockout only from a launch that failed
    (here an earlier one, still remembered): from then on a faulty node is held and its
    replacement launches beside it, in its slot."""
    w = _world({"remediation": ["replace"], "replacement": "after-terminate"})
    known = builders.exhausted("z1", "t1", until=START - timedelta(minutes=5), provider="sim")
    w.memory = w.memory.with_pool(replace(w.memory.pool("train"), exhausted=(known,)))
    _through_the_stockout(w)
    assert w.terminated_short == []
    assert w.terminated == [f"{FLEET}-train-0001"]
    assert len(w.nodes) == 3


def test_the_held_node_counts_against_max_unavailable() -> None:
    """While held through the stockout the faulty node is out of service: a second faulty
    node waits for the budget (max_unavailable 1) instead of being cordoned beside it."""
    w = _world({"remediation": ["replace"], "max_unavailable": 1})
    w.faulty.add(f"{FLEET}-train-0001")
    for _ in range(3):
        w.run()
        w.now += STEP
    w.faulty.add(f"{FLEET}-train-0002")
    p = w.run()
    assert [a.kind for a in p.actions if a.node == f"{FLEET}-train-0002"] == []
    assert any(h.rule.value == "disruption_budget" for h in p.halts), p.halts
    assert any("held cordoned" in line for line in p.pending), p.pending

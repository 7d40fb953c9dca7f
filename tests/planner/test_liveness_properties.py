"""Hypothesis property: no node is stuck out of service (the ladder's world of
test_ladder_properties, with every way a node can fail to come back).

Beyond faults, GPU work and reboots that never come back, a drawn schedule gives nodes
reports that stay degraded or unknown, GPU processes that outlive every drain (hung),
diagnostics that hang or answer "unavailable", an operator's cordon and the operator's
`apply --replace NODE`, and the cloud listing an instance impaired (for one run, a flap, or for several). Each run observe() and plan() run as `navarch apply` does and the
plan is applied to Memory as the executor would.

Property, on every plan of every run: a node out of service (Memory phase cordoned,
draining or remediating) longer than its phase's deadlines (drain_timeout and the
diagnostics time limit for a drain; boot_timeout, return_timeout and the diagnostics time
limit after a remedy), plus one run, has an action in the plan or a halt naming it (a
safety rule holding it for a human). So the disruption budget is never held by a node
with no next step. A node an operator cordoned waits for the operator, by design, until
the operator names it in --replace.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import timedelta

import builders
from hypothesis import given
from hypothesis import strategies as st
from test_ladder_properties import (
    DRAIN_TIMEOUTS,
    FLEET,
    LADDER_WINDOWS,
    NODES,
    PROPERTY,
    REPLACEMENTS,
    XIDS,
    Node,
    World,
    _world,
)

from navarch.fleet.spec import FleetSpec
from navarch.inventory import CloudStatus, InstanceHealth, InstanceState
from navarch.planner.context import PlanOptions
from navarch.planner.model import (
    ActionKind,
    ActionReason,
    Cordon,
    Diag,
    DiagState,
    Phase,
    Plan,
)
from navarch.planner.observe import observe
from navarch.planner.payloads import DiagnosePayload
from navarch.planner.plan import plan
from navarch.report.health import Status

STEP = timedelta(minutes=5)
EVENTS = (
    "ok",
    "ok",
    "busy",
    "idle",
    "idle",
    "degraded",
    "unknown",
    "hung",
    "opcordon",
    "replace",
    "impaired",
) + tuple(f"fault:{c}" for c in XIDS)


@dataclass
class Stuckable(Node):
    status: str = ""  # "degraded" / "unknown": what its reports say while it has no fault
    hung: bool = False  # GPU processes that no drain ends (a reboot does)


@dataclass
class LivenessWorld(World):
    diag_outcome: str = "pass"  # pass, hang (RUNNING for ever), unavailable
    requested: set[str] = field(default_factory=set)

    def report(self, name: str) -> builders.ReportObservation | None:
        n = self.nodes[name]
        obs = super().report(name)
        if obs is None or not isinstance(n, Stuckable):
            return obs
        s = obs.summary
        if n.fault is None and n.status:
            s = replace(s, status=Status(n.status))
        if n.hung:
            s = replace(s, process_count=max(s.process_count or 0, 1))
        return builders.observation(name, "a", s)

    def step(self, events: dict[str, str]) -> None:  # type: ignore[override]
        self.now += STEP
        self.requested = set()
        for name, n in self.nodes.items():
            if n.instance.state is InstanceState.PENDING:
                self.nodes[name] = Stuckable(
                    replace(n.instance, state=InstanceState.RUNNING), n.boot, n.sequence
                )
                continue
            ev = events.get(name, "ok")
            assert isinstance(n, Stuckable)
            # the cloud lists the instance impaired for as long as the event repeats
            health = InstanceHealth.IMPAIRED if ev == "impaired" else InstanceHealth.OK
            n.instance = replace(n.instance, cloud_status=CloudStatus(health))
            if ev == "busy" and name not in self.cordoned:
                n.procs = 2
            elif ev == "idle":
                n.procs = 0
            elif ev in ("degraded", "unknown"):
                n.status = ev
            elif ev == "hung":
                n.hung = True
            elif ev == "opcordon":
                nm = self.memory.node(name)
                if nm is not None and nm.phase is Phase.NONE:
                    self.memory = self.memory.with_node(
                        replace(nm, cordon=Cordon(ActionReason.OPERATOR, note="operator: x"))
                    )
            elif ev == "replace":
                self.requested.add(name)

            elif ev.startswith("fault") and n.fault is None:
                n.fault = int(ev.split(":")[1])
        reports = {k: r for k in self.nodes if (r := self.report(k)) is not None}
        inventory = tuple(n.instance for n in self.nodes.values())
        observed = observe(self.spec, inventory, reports, self.memory, self.now)
        p = plan(
            self.spec,
            observed.views,
            observed.memory,
            self.now,
            PlanOptions(replace=frozenset(self.requested)),
        )
        self.check_liveness(observed.memory, p)
        self.last = p
        self.memory = observed.memory
        for a in p.actions:
            self.apply(a)

    def apply(self, a) -> None:  # noqa: ANN001 - an Action
        if a.kind is ActionKind.PROVISION:
            super().apply(a)
            n = self.nodes[a.node]
            self.nodes[a.node] = Stuckable(n.instance)
            return
        if a.kind is ActionKind.REBOOT:
            n = self.nodes[a.node]
            assert isinstance(n, Stuckable)
            n.hung = False
        if a.kind is ActionKind.CORDON:
            nm = self.memory.node(a.node)
            if nm is not None and nm.cordon is not None and nm.cordon.is_operator:
                self.memory = self.memory.with_node(replace(nm, cordon=None))
        if a.kind is ActionKind.UNCORDON:
            nm = self.memory.node(a.node)
            if nm is not None and nm.cordon is not None and nm.cordon.diagnostics:
                self.memory = self.memory.with_node(replace(nm, cordon=None))
        if a.kind is ActionKind.DIAGNOSE and self.diag_outcome != "pass":
            nm = self.memory.node(a.node)
            assert nm is not None
            prev = nm.diag
            d = a.carries(DiagnosePayload)
            if prev is None or prev.state is not DiagState.RUNNING or prev.why is not d.why:
                diag = Diag(d.level, d.why, DiagState.RUNNING, self.now, self.now)
            elif self.diag_outcome == "unavailable":
                diag = replace(
                    prev,
                    state=DiagState.UNAVAILABLE,
                    at=self.now,
                    detail="dcgmi is not installed on the node",
                )
            else:
                diag = prev  # hung: it never answers
            self.memory = self.memory.with_node(replace(nm, diag=diag))
            return
        super().apply(a)

    def check_liveness(self, mem, p: Plan) -> None:  # noqa: ANN001 - Memory
        pool = self.spec.pools[0]
        h, diag_s = pool.health, pool.diagnostics.time_limit_s(3)
        deadline_s = {
            Phase.CORDONED: 0,
            Phase.DRAINING: h.drain_timeout_s + diag_s,
            Phase.REMEDIATING: max(h.boot_timeout_s, h.return_timeout_s) + diag_s,
        }
        acted = {a.node for a in p.actions} | {
            nm.node for nm in mem.nodes if any(nm.node in x.message for x in p.halts)
        }
        for nm in mem.nodes:
            if nm.phase not in deadline_s or nm.phase_at is None or nm.node not in self.nodes:
                continue
            out_s = (self.now - nm.phase_at).total_seconds()
            if out_s > deadline_s[nm.phase] + STEP.total_seconds():
                assert nm.node in acted, (
                    f"{nm.node} {nm.phase.value} for {out_s:.0f}s with no next step; "
                    f"pending: {[x for x in p.pending if nm.node in x]}"
                )


# Built once, here: a strategy built where it is drawn is built again on every draw.
LADDERS = st.sampled_from(
    (
        ["reboot", "replace"],
        ["reset_gpu", "reboot", "replace"],
        ["reboot"],
        ["reset_gpu", "replace"],
    )
)
SURGE_ON = st.sampled_from(("replace", "any"))
RETURN_TIMEOUTS = st.sampled_from(("30m", "1h"))
RETURN_REQUIRES_DIAG = st.sampled_from((False, 2, 3))
RUN_EVENTS = st.dictionaries(NODES, st.sampled_from(EVENTS), max_size=3)
DIAG_OUTCOMES = st.sampled_from(("pass", "hang", "unavailable"))


@st.composite
def specs(draw: st.DrawFn) -> FleetSpec:
    health = {
        "unhealthy_after": draw(st.integers(1, 2)),
        "boot_timeout": "15m",
        "drain_timeout": draw(DRAIN_TIMEOUTS),
        "max_unavailable": draw(st.integers(1, 2)),
        "replacement": draw(REPLACEMENTS),
        "surge_on": draw(SURGE_ON),
        "remediation": draw(LADDERS),
        "return_after": draw(st.integers(1, 3)),
        "return_timeout": draw(RETURN_TIMEOUTS),
        "ladder_window": draw(LADDER_WINDOWS),
        "lemon_after": draw(st.integers(2, 4)),
        "return_requires_diag": draw(RETURN_REQUIRES_DIAG),
    }
    pool = builders.pool_doc(target=3, max_nodes=4, health=health)
    if draw(st.booleans()):
        pool["diagnostics"] = {"every": "1h", "level": draw(st.integers(1, 3))}
    doc = builders.fleet_doc(
        FLEET,
        {"a": pool},
        safety={
            "repairs_per_pool_per_hour": draw(st.integers(1, 6)),
            "circuit_breaker_pct": 100,
            "fleet_circuit_breaker_pct": 100,
        },
    )
    return builders.fleet_from_dict(doc)


@PROPERTY
@given(data=st.data())
def test_no_node_is_out_of_service_past_its_deadlines_without_a_next_step(data) -> None:  # noqa: ANN001
    spec = data.draw(specs())
    runs = data.draw(st.integers(10, 40))
    schedule = [data.draw(RUN_EVENTS) for _ in range(runs)]
    base = _world(spec)
    world = LivenessWorld(
        spec,
        base.now,
        {k: Stuckable(n.instance) for k, n in base.nodes.items()},
        base.memory,
        diag_outcome=data.draw(DIAG_OUTCOMES),
    )
    for events in schedule:
        world.step(events)
    for _ in range(30):  # then quiet: everything out of service must come back or go
        world.step({})
    assert world.last is not None

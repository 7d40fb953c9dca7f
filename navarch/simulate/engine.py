"""Run a scenario: the real reconcile run (navarch.reconcile.run.run_apply, and so the real
observe, plan and Executor) every reconcile period on a virtual clock, against the
simulated provider and the in-memory store, and measure the outcome.

The virtual clock is handed to run_apply as its clock (navarch.reconcile.run.Clock); the
simulated store stamps objects with the same clock, so report ages are judged by the
store's modification times exactly as in production.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from navarch.errors import NavarchError
from navarch.fleet_file import load_fleet
from navarch.planner.model import ActionKind, Phase
from navarch.reconcile.executor import Outcome
from navarch.reconcile.run import Fleet, run_apply
from navarch.simulate.scenario import Scenario
from navarch.simulate.world import SimNode, SimProvider, World
from navarch.spec import FleetSpec

log = logging.getLogger(__name__)
START = datetime(2026, 1, 1, tzinfo=UTC)
SECRET = b"navarch-simulate-fleet-secret-0001"
SAMPLE_EVERY_S = 3600


class _SimFleet(Fleet):
    def secret(self) -> bytes | None:
        return SECRET


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


@dataclass
class _FaultRecord:
    node: str
    cause: str
    at: datetime
    lemon: bool
    cordon_at: datetime | None = None
    serving_at: datetime | None = None
    replacement: str | None = None


@dataclass
class _Tally:
    """What one simulation counts while the real reconcile run acts on the world."""

    world: World
    target: int
    period_s: int
    records: dict[str, _FaultRecord] = field(default_factory=dict)  # open fault by node
    closed: list[_FaultRecord] = field(default_factory=list)
    wrongful: list[dict[str, Any]] = field(default_factory=list)
    scale_downs: list[dict[str, Any]] = field(default_factory=list)
    halts: Counter[str] = field(default_factory=Counter)
    actions: Counter[str] = field(default_factory=Counter)
    lost_to_capacity: int = 0
    capacity_latencies: list[float] = field(default_factory=list)
    short_since: datetime | None = None
    breaker_runs: int = 0
    series: list[dict[str, Any]] = field(default_factory=list)
    timeline: list[dict[str, Any]] = field(default_factory=list)
    run_errors: Counter[str] = field(default_factory=Counter)
    serving_s: float = 0.0
    instance_s: Counter[str] = field(default_factory=Counter)
    phases: dict[str, Phase] = field(default_factory=dict)
    warm: bool = False
    peak_disrupted: int = 0  # most nodes of one pool out of service by navarch at once
    measured_s: int = 0

    def on_fault(self, n: SimNode) -> None:
        """The world's hook: a node got a real fault."""
        if n.node not in self.records:
            self.records[n.node] = _FaultRecord(n.node, n.fault or "", self.world.now, n.lemon)
            self.timeline.append(
                {"t": _off(self.world.now), "kind": "fault", "node": n.node, "cause": n.fault}
            )

    def on_outcome(self, o: Outcome) -> None:
        """The executor's hook: one action's outcome."""
        a = o.action
        self.actions[f"{a.kind.value}{'' if o.ok else '_failed'}"] += 1
        if a.kind is ActionKind.PROVISION and not o.ok and o.error == "CapacityError":
            self.lost_to_capacity += 1
        if not o.ok or a.node is None:
            return
        self.timeline.append({"t": _off(self.world.now), "kind": a.kind.value, "node": a.node})
        if a.kind is ActionKind.CORDON and a.node in self.records:
            self.records[a.node].cordon_at = self.records[a.node].cordon_at or self.world.now
        if a.kind is ActionKind.PROVISION and a.replaces and a.replaces in self.records:
            self.records[a.replaces].replacement = a.node
        if a.kind is ActionKind.TERMINATE:
            self._terminated(a.node, a.reason)

    def _terminated(self, node: str, reason: str) -> None:
        sim = self.world.terminated.get(node) or next(
            (n for n in self.world.nodes.values() if n.node == node), None
        )
        faulty = node in self.records or (sim is not None and sim.had_fault)
        preempting = sim is not None and sim.notice_at is not None
        if "scale down" in reason:
            # A surplus node (e.g. the surge replacement once the faulty node came back
            # cured from a reboot) is removed by the plan: counted, but not wrongful.
            self.scale_downs.append({"node": node, "t_s": _off(self.world.now), "reason": reason})
        elif sim is not None and not faulty and not preempting:
            self.wrongful.append({"node": node, "t_s": _off(self.world.now), "reason": reason})

    def after_run(self, result: Any) -> None:
        """Halts, breaker runs and the phases Memory holds after one apply."""
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
        per_pool = Counter(nm.pool for nm in result.memory.nodes if nm.phase is not Phase.NONE)
        self.peak_disrupted = max([self.peak_disrupted, *per_pool.values()])

    def measure(self, step: int, steps: int) -> None:
        """Serving capacity, capacity recovery and fault closure at this step. A node serves
        when booted, fault-free, reporting and not cordoned."""
        world = self.world
        serving_nodes = set()
        for n in world.nodes.values():
            self.instance_s[n.instance.instance_type] += self.period_s
            if (
                world.now >= n.ready_at
                and n.fault is None
                and n.notice_at is None
                and self.phases.get(n.node, Phase.NONE) is Phase.NONE
                and n.last_report_at is not None
            ):
                serving_nodes.add(n.node)
        serving = min(len(serving_nodes), self.target)
        # Availability is measured from the first time the fleet reached its target: the
        # first boot of the whole fleet is not an outage.
        self.warm = self.warm or serving >= self.target
        if self.warm and step < steps:
            self.serving_s += serving * self.period_s
            self.measured_s += self.period_s
        if self.warm and serving < self.target and self.short_since is None:
            self.short_since = world.now
        elif serving >= self.target and self.short_since is not None:
            self.capacity_latencies.append((world.now - self.short_since).total_seconds())
            self.short_since = None
        for name, rec in list(self.records.items()):
            done = (rec.replacement in serving_nodes) or (
                name in serving_nodes
                and not any(n.node == name and n.fault for n in world.nodes.values())
            )
            if done:
                rec.serving_at = world.now
                self.closed.append(self.records.pop(name))
        if step % max(1, SAMPLE_EVERY_S // self.period_s) == 0:
            self.series.append(
                {
                    "t_s": _off(world.now),
                    "serving": serving,
                    "target": self.target,
                    "instances": len(world.nodes),
                    "open_faults": len(self.records),
                }
            )


def _off(t: datetime) -> int:
    return int((t - START).total_seconds())


def simulate(scenario: Scenario, seed: int | None = None) -> dict[str, Any]:
    """Run scenario (seed overrides its own) -> the result document (see docs/simulate.md).

    Raises ConfigError for a bad fleet file. Deterministic: no wall clock, one seeded RNG.
    """
    if seed is not None:
        scenario = replace(scenario, seed=seed)
    spec: FleetSpec = load_fleet(scenario.fleet_path)
    # Every provider becomes the simulated one (type local: no cloud-init is rendered).
    spec = replace(
        spec, providers={n: {"type": "local", "max_parallel": 1} for n in spec.providers}
    )
    world = World(scenario, spec.name, SECRET, START)
    gpus = {p.name: p.gpus_per_node for p in spec.pools}
    providers = {n: SimProvider(n, world, gpus) for n in sorted(spec.providers)}
    fleet = _SimFleet(spec, world.store, dict(providers))
    tally = _Tally(world, sum(p.target_nodes for p in spec.pools), scenario.reconcile_period_s)
    world.on_fault = tally.on_fault
    period = timedelta(seconds=scenario.reconcile_period_s)
    steps = scenario.duration_s // scenario.reconcile_period_s
    for step in range(steps + 1):
        world.now = START + step * period
        world.step()
        world.agents()
        try:
            result = run_apply(
                fleet,
                command="simulate",
                clock=world.clock,
                on_outcome=tally.on_outcome,
                run_id=f"sim-{step:06d}",
            )
        except NavarchError as exc:
            tally.run_errors[type(exc).__name__] += 1
            result = None
        if result is not None:
            tally.after_run(result)
        tally.measure(step, steps)
    return _document(scenario, tally)


def _document(scenario: Scenario, t: _Tally) -> dict[str, Any]:
    """The result document: availability, latencies, terminations, costs, series."""
    all_faults = t.closed + list(t.records.values())
    acted = [r for r in all_faults if r.cordon_at is not None]
    to_cordon = [(r.cordon_at - r.at).total_seconds() for r in acted if r.cordon_at]
    to_serving = [(r.serving_at - r.at).total_seconds() for r in t.closed if r.serving_at]
    days = scenario.duration_s / 86400
    prices = scenario.prices_usd_per_hour
    inst_h = {k: round(v / 3600, 3) for k, v in sorted(t.instance_s.items())}
    causes = Counter(r.cause for r in all_faults)
    return {
        "scenario": scenario.name,
        "seed": scenario.seed,
        "duration_s": scenario.duration_s,
        "reconcile_period_s": scenario.reconcile_period_s,
        "agent_period_s": scenario.agent_period_s,
        "target_nodes": t.target,
        "availability": round(t.serving_s / (t.target * t.measured_s), 6)
        if t.target and t.measured_s
        else 0.0,
        "faults": len(all_faults),
        "faults_by_cause": dict(sorted(causes.items())),
        "faults_on_lemons": sum(1 for r in all_faults if r.lemon),
        "faults_never_acted_on": len(all_faults) - len(acted),
        "p50_fault_to_cordon_s": _pct(to_cordon, 0.5),
        "p95_fault_to_cordon_s": _pct(to_cordon, 0.95),
        "max_fault_to_cordon_s": max(to_cordon) if to_cordon else None,
        "p50_fault_to_serving_s": _pct(to_serving, 0.5),
        "p95_fault_to_serving_s": _pct(to_serving, 0.95),
        "max_fault_to_serving_s": max(to_serving) if to_serving else None,
        "wrongful_terminations": len(t.wrongful),
        "wrongful_termination_causes": t.wrongful[:50],
        "terminations": t.actions.get("terminate", 0),
        "scale_down_terminations": len(t.scale_downs),
        "actions": dict(sorted(t.actions.items())),
        "nodes_lost_to_capacity": t.lost_to_capacity,
        "capacity_recovery_s": t.capacity_latencies,
        "max_capacity_recovery_s": max(t.capacity_latencies) if t.capacity_latencies else None,
        "repairs_held_by_rule": dict(sorted(t.halts.items())),
        "breaker_runs": t.breaker_runs,
        "peak_disrupted": t.peak_disrupted,
        "preemptions": t.world.preempted,
        "run_errors": dict(sorted(t.run_errors.items())),
        "api_calls_per_day": {k: round(v / days, 2) for k, v in sorted(t.world.api_calls.items())},
        "instance_hours": inst_h,
        "cost_usd": round(sum(h * prices.get(k, 0.0) for k, h in inst_h.items()), 2),
        "fault_to_cordon_s": sorted(to_cordon),
        "fault_to_serving_s": sorted(to_serving),
        "series": t.series,
        "timeline": t.timeline[:5000],
    }


_ASSERT = re.compile(r"^\s*([a-z0-9_]+)\s*(<=|>=|==|!=|<|>)\s*([0-9.e+-]+)([smhd]?)\s*$")
_ALIASES = {
    "p95_fault_to_serving": "p95_fault_to_serving_s",
    "p50_fault_to_serving": "p50_fault_to_serving_s",
    "p95_fault_to_cordon": "p95_fault_to_cordon_s",
}
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def check_asserts(doc: dict[str, Any], asserts: tuple[str, ...]) -> list[dict[str, Any]]:
    """Evaluate `assert:` lines ("availability >= 0.999", "p95_fault_to_serving <= 20m")
    against a result document -> [{"assert", "ok", "value"}]. A metric that is None (e.g.
    no faults, so no latency) passes. Raises ValueError on a line it cannot parse."""
    out = []
    for line in asserts:
        m = _ASSERT.match(line)
        if not m:
            raise ValueError(f"cannot parse assert {line!r}: use METRIC OP NUMBER[s|m|h|d]")
        key, op, num, unit = m.groups()
        key = _ALIASES.get(key, key)
        if key not in doc:
            raise ValueError(f"assert {line!r}: no metric {key!r}")
        value = doc[key]
        bound = float(num) * _UNITS[unit]
        ok = (
            True
            if value is None
            else {
                "<=": value <= bound,
                ">=": value >= bound,
                "==": value == bound,
                "!=": value != bound,
                "<": value < bound,
                ">": value > bound,
            }[op]
        )
        out.append({"assert": line, "ok": bool(ok), "value": value})
    return out

"""Prometheus metrics of one apply, for a batch job.

A batch job has no /metrics endpoint to scrape: `navarch apply --metrics-textfile PATH`
writes the metrics for node_exporter's textfile collector (atomically: write then
rename, prometheus_client.write_to_textfile), and fleet.yaml `metrics: {pushgateway: URL,
job: NAME}` pushes them to a Pushgateway, grouped by job and fleet (Prometheus docs,
"When to use the Pushgateway": only for service-level batch jobs).

Names follow the Prometheus naming conventions (base units in the name, `_total` only for
counters, `_timestamp_seconds` for Unix times). Per-run counts are gauges named
`navarch_last_apply_*` (they describe the last run, not a running total); cumulative
counts are counters. The list:

    navarch_nodes{fleet,pool,lifecycle,health}                 gauge: nodes by lifecycle/health
    navarch_pool_desired_nodes{fleet,pool}                     gauge: target (or autoscaled)
    navarch_pool_present_nodes{fleet,pool}                     gauge: nodes with an instance
    navarch_last_apply_actions{fleet,pool,kind,outcome}        gauge: ok | failed
    navarch_last_apply_success{fleet}                          gauge: 1 the apply finished and
                                                               no action failed, else 0
    navarch_last_apply_timestamp_seconds{fleet}                gauge
    navarch_last_success_timestamp_seconds{fleet}              gauge: batch-job freshness;
                                                               carried over a failed run
    navarch_apply_duration_seconds{fleet}                      gauge
    navarch_circuit_breaker_open{fleet,pool}                   gauge 0/1 ("*": fleet breaker)
    navarch_capacity_backoff_places{fleet,pool}                gauge: places in backoff
    navarch_reports_rejected_total{fleet,reason}               counter (cumulative, Memory)
    navarch_report_age_seconds{fleet,pool}                     histogram of report ages
    navarch_last_apply_notifications{fleet,sink,outcome}       gauge: sent | failed
    navarch_last_apply_dead_on_arrival{fleet,pool}             gauge: nodes the last apply took
                                                               out for failing acceptance
    navarch_pool_mode{fleet,pool,mode}                         gauge: 1 for the pool's mode
                                                               (observe | cordon | full), 0
                                                               for the others
    navarch_last_apply_would_actions{fleet,pool,kind,mode}     gauge: actions the pool's mode
                                                               held back (planned, not done)
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from prometheus_client import (
    CollectorRegistry,
    Gauge,
    Histogram,
    disable_created_metrics,
    write_to_textfile,
)
from prometheus_client import Counter as PromCounter
from prometheus_client.exposition import push_to_gateway, pushadd_to_gateway
from prometheus_client.parser import text_string_to_metric_families

from navarch.fleet.modes import Mode
from navarch.fleet.spec import FleetSpec
from navarch.notify.dispatch import Delivery
from navarch.outcome import RunResult, dead_on_arrival
from navarch.planner.model import HaltRule, Plan

log = logging.getLogger("navarch.notify.metrics")

#: Report age buckets (seconds): agents report every 60 s; stale_after/offline_after are
#: minutes (fleet.example.yaml: 3m and 10m), so the buckets straddle those.
REPORT_AGE_BUCKETS_S = (30.0, 60.0, 120.0, 180.0, 300.0, 600.0, 1800.0, 3600.0)
LAST_SUCCESS = "navarch_last_success_timestamp_seconds"


@dataclass(frozen=True)
class RunFacts:
    """One apply as the metrics see it.

    result: what the apply did, or None (the apply raised). now: when it ended (aware
    UTC). duration_s: its wall time. deliveries: one per notification sink that had
    events. last_success_s: the previous success's Unix time, carried over when this run
    did not succeed (None: unknown).
    """

    result: RunResult | None
    now: datetime
    duration_s: float
    deliveries: Sequence[Delivery] = ()
    last_success_s: float | None = None

    @property
    def success(self) -> bool:
        """The apply finished and no action failed (a breaker or guard halt still counts
        as a finished run: it alerts through its own metric and notifications)."""
        r = self.result
        return r is not None and not r.audit_error and all(o.ok for o in r.outcomes)


def build_registry(spec: FleetSpec, facts: RunFacts) -> CollectorRegistry:
    """The metrics of one apply in a fresh registry. `_created` series are switched off
    (process-wide): a batch job's counters begin with each run, their creation time says
    nothing."""
    disable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus_client is untyped here
    reg = CollectorRegistry()
    fleet = spec.name
    now_s = facts.now.timestamp()
    g = Gauge(
        "navarch_last_apply_success",
        "1 when the last apply finished with no failed action, else 0",
        ["fleet"],
        registry=reg,
    )
    g.labels(fleet).set(1 if facts.success else 0)
    Gauge(
        "navarch_last_apply_timestamp_seconds",
        "When the last apply ended (Unix time)",
        ["fleet"],
        registry=reg,
    ).labels(fleet).set(now_s)
    Gauge(
        "navarch_apply_duration_seconds", "Wall time of the last apply", ["fleet"], registry=reg
    ).labels(fleet).set(facts.duration_s)
    last = now_s if facts.success else facts.last_success_s
    if last is not None:
        Gauge(
            LAST_SUCCESS,
            "When an apply last succeeded (Unix time): alert on its age",
            ["fleet"],
            registry=reg,
        ).labels(fleet).set(last)
    notes = Gauge(
        "navarch_last_apply_notifications",
        "Notifications the last apply sent (sent) or could not send (failed), per sink",
        ["fleet", "sink", "outcome"],
        registry=reg,
    )
    for d in facts.deliveries:
        notes.labels(fleet, d.sink, "sent" if d.ok else "failed").inc(d.events)
    if facts.result is not None:
        _result_metrics(reg, spec, facts.result, facts.now)
    return reg


def _result_metrics(
    reg: CollectorRegistry, spec: FleetSpec, result: RunResult, now: datetime
) -> None:
    """The last apply's metrics, registered in this order: nodes, pools, actions."""
    _node_metrics(reg, spec.name, result.plan)
    _pool_metrics(reg, spec, result, now)
    _action_metrics(reg, spec, result)


def _node_metrics(reg: CollectorRegistry, fleet: str, plan: Plan) -> None:
    """navarch_nodes: nodes by pool, lifecycle and last accepted health."""
    nodes = Gauge(
        "navarch_nodes",
        "Nodes by pool, lifecycle and last accepted health",
        ["fleet", "pool", "lifecycle", "health"],
        registry=reg,
    )
    counts = Counter(
        (v.pool, v.lifecycle.value, v.summary.status if v.summary else "none") for v in plan.views
    )
    for (pool, lifecycle, health), n in sorted(counts.items()):
        nodes.labels(fleet, pool, lifecycle, health).set(n)


def _pool_metrics(
    reg: CollectorRegistry, spec: FleetSpec, result: RunResult, now: datetime
) -> None:
    """Per pool: desired and present nodes, circuit breaker, capacity backoff, report ages."""
    fleet = spec.name
    plan, memory = result.plan, result.memory
    desired = Gauge(
        "navarch_pool_desired_nodes", "Nodes the pool should have", ["fleet", "pool"], registry=reg
    )
    present = Gauge(
        "navarch_pool_present_nodes",
        "Nodes of the pool that have an instance",
        ["fleet", "pool"],
        registry=reg,
    )
    breaker = Gauge(
        "navarch_circuit_breaker_open",
        "1 while the pool's circuit breaker is open (pool \"*\": the fleet's)",
        ["fleet", "pool"],
        registry=reg,
    )
    backoff = Gauge(
        "navarch_capacity_backoff_places",
        "Places (zone, type, spot) of the pool in capacity backoff",
        ["fleet", "pool"],
        registry=reg,
    )
    ages = Histogram(
        "navarch_report_age_seconds",
        "Age of each node's latest accepted health report",
        ["fleet", "pool"],
        buckets=REPORT_AGE_BUCKETS_S,
        registry=reg,
    )
    open_pools = {h.pool for h in plan.halts if h.rule is HaltRule.CIRCUIT_BREAKER}
    breaker.labels(fleet, "*").set(1 if "*" in open_pools else 0)
    for p in spec.pools:
        pm = memory.pool(p.name)
        desired.labels(fleet, p.name).set(pm.desired if pm.desired is not None else p.target_nodes)
        present.labels(fleet, p.name).set(
            sum(1 for v in plan.views if v.pool == p.name and v.instance is not None)
        )
        breaker.labels(fleet, p.name).set(1 if p.name in open_pools else 0)
        backoff.labels(fleet, p.name).set(sum(1 for e in pm.exhausted if e.until > now))
        h = ages.labels(fleet, p.name)
        for v in plan.views:
            if v.pool == p.name and v.report_age_s is not None:
                h.observe(v.report_age_s)


def _action_metrics(reg: CollectorRegistry, spec: FleetSpec, result: RunResult) -> None:
    """What the last apply did: actions by kind and outcome, dead on arrival, and the
    health reports rejected since the fleet's state began."""
    fleet = spec.name
    actions = Gauge(
        "navarch_last_apply_actions",
        "Actions the last apply ran, by kind and outcome (ok | failed)",
        ["fleet", "pool", "kind", "outcome"],
        registry=reg,
    )
    for o in result.outcomes:
        a = o.action
        actions.labels(fleet, a.pool, a.kind.value, "ok" if o.ok else "failed").inc()
    _mode_metrics(reg, spec, result.plan)
    doa = Gauge(
        "navarch_last_apply_dead_on_arrival",
        "Nodes the last apply took out of service for failing acceptance (dead on arrival)",
        ["fleet", "pool"],
        registry=reg,
    )
    for p in spec.pools:
        doa.labels(fleet, p.name).set(
            sum(1 for pool, _ in dead_on_arrival(result.outcomes) if pool == p.name)
        )
    rejected = PromCounter(
        "navarch_reports_rejected",
        "Health reports rejected, by reason, since the fleet's state began",
        ["fleet", "reason"],
        registry=reg,
    )
    for reason, n in result.memory.rejections:
        rejected.labels(fleet, reason).inc(n)


def _mode_metrics(reg: CollectorRegistry, spec: FleetSpec, plan: Plan) -> None:
    """Each pool's mode (navarch.fleet.modes) and what its mode held back this run."""
    fleet = spec.name
    modes = Gauge(
        "navarch_pool_mode",
        "1 for the pool's mode (observe, cordon or full), 0 for the others",
        ["fleet", "pool", "mode"],
        registry=reg,
    )
    for p in spec.pools:
        for m in Mode:
            modes.labels(fleet, p.name, m.value).set(1 if p.mode is m else 0)
    would = Gauge(
        "navarch_last_apply_would_actions",
        "Actions the last apply planned that the pool's mode held back (never done)",
        ["fleet", "pool", "kind", "mode"],
        registry=reg,
    )
    for w in plan.would:
        would.labels(fleet, w.action.pool, w.action.kind.value, w.mode.value).inc()


def previous_last_success(path: str | Path, fleet: str) -> float | None:
    """navarch_last_success_timestamp_seconds{fleet} from an earlier textfile, or None
    (missing or unparsable file: a failed first run has no earlier success)."""
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == LAST_SUCCESS and sample.labels.get("fleet") == fleet:
                    return float(sample.value)
    except ValueError:
        return None
    return None


def write_textfile(path: str | Path, registry: CollectorRegistry) -> None:
    """Write the registry for node_exporter's textfile collector (atomic rename).
    Raises OSError when the directory is not writable."""
    write_to_textfile(str(path), registry)


def push(spec: FleetSpec, registry: CollectorRegistry, success: bool) -> str | None:
    """Push to fleet.yaml's metrics.pushgateway, grouped by job and fleet -> the error text
    when it failed (logged, never raised), else None; nothing configured -> None.

    A successful run replaces the group (PUT); a failed one adds to it (POST), so the
    group keeps the last success's navarch_last_success_timestamp_seconds.
    """
    url = spec.metrics.pushgateway
    if not url:
        return None
    send = push_to_gateway if success else pushadd_to_gateway
    try:
        send(
            url,
            job=spec.metrics.job,
            registry=registry,
            grouping_key={"fleet": spec.name},
            timeout=spec.metrics.timeout_s,
        )
    except Exception as exc:  # noqa: BLE001 - urllib/socket errors of every kind
        problem = f"metrics push to the pushgateway failed: {type(exc).__name__}: {exc}"
        log.warning("%s", problem)
        return problem
    return None

"""plan(): the actions that bring each pool to its desired state, within the safety rules.

Pure: no I/O, no clock reads, no randomness; same inputs give the same plan, byte for byte.

A fleet's plan is made in two layers of named stages, each a pure function:
- fleet stages: the circuit breaker over the whole fleet, orphans (nodes whose pool left
  fleet.yaml: cordoned, drained and terminated with the pool's remembered settings and
  budget, behind the guard against mass termination), duplicate node names;
- pool stages, per pool in name order (POOL_STAGES, the spine of this module; each stage
  lives with its family: navarch.planner.capacity (scale, count), navarch.planner.repair
  (terminate, redrain, stuck, repair, impaired, watch), navarch.planner.drift (drift),
  navarch.planner.retire (orphans, duplicates, destroy)): scale (desired count), ladder
  (navarch.planner.ladder: reset, reboot, return to service or replace drained and
  remedied nodes; operator cordons), silence (navarch.planner.silence: nodes cordoned
  because their reports fell silent return when they report again and are terminated only
  on independent evidence), terminate (nodes whose drain finished or timed out),
  redrain (cordoned, never drained), stuck (pending past provision_timeout), repair
  (cordon + drain what must be replaced), impaired (cordon only on the cloud's first
  impaired listing; uncordon when it clears), watch (what is part-way to a decision),
  diagnostics (navarch.planner.diagnostics: cordon + drain nodes due for scheduled dcgmi
  diag, within the budget; the ladder stage diagnoses and returns them), drift (in-place
  tag updates and rolling replacement), spares (navarch.planner.spares: promote a warm
  spare into a short pool, hold surplus healthy idle nodes as spares), acceptance
  (navarch.planner.acceptance_stage: cordon nodes in acceptance in their scheduler, uncordon
  passed ones, start multi-node NCCL tests), count (provision
  up to desired and the spares, or scale down, spares first).
  block (navarch.planner.blocks: a Capacity Block pool has nodes only inside its block and
  is drained before it ends) runs right after scale. `navarch destroy` swaps in its own.
A stage (navarch.planner.context) reads a PoolContext (never changed) and the Progress earlier stages made (budget
left, nodes leaving, replacements wanted) and returns a StageResult: its actions, the
halts and notes it adds, the differences it leaves for later (pending), the new Progress.

Safety rules enforced here (docs/design.md, Safety rules):
 1. only owned nodes (observe() already split off foreign instances) are ever acted on;
 2. doubt never terminates: UNKNOWN/STALE nodes are left alone until OFFLINE, and are
    never picked for scale-down; an OFFLINE node is cordoned and replaced, but never
    terminated on its silence alone (navarch.planner.silence);
 3. disruption budget: cordoned + draining + terminating <= max_unavailable per pool
    (spot preemptions excepted: those nodes go anyway), counting only nodes that served
    (a spare or a node in acceptance takes no place) and less the spares promoted in place
    of the serving nodes that leave (navarch.planner.spares.ready_to_stand_in);
 4. circuit breaker (navarch.planner.breaker, one BreakerState per pool and one for the
    fleet, computed once): a pool (or the fleet) whose unhealthy+offline share reaches the
    threshold, with at least 2 such nodes (a node unhealthy only by a fault its remedies
    row only alerts on is not counted: navarch.planner.remedy_gate.alert_only), gets no new cordon, no scale-down, no rolling
    replacement and no termination on drain_timeout; a node already cordoned whose drain
    finished (its work is gone, its replacement already surged) is still terminated;
 5. repair rate limit: at most repairs_per_pool_per_hour repairs (replacements of sick,
    drifted or requested nodes) started per pool per hour;
 6. provisioning tries places in the pool's fallback order, skipping exhausted ones.
 7. launches per run: a plan with more provisions than safety.max_launches_per_run (or
    this run's --allow-launches) launches none of its growth, with a safety halt
    (navarch.planner.launches).
A node is only terminated after it was cordoned and drained (or drain_timeout passed),
except duplicates, stuck instances and `destroy --force`. A node is only rebooted or
GPU-reset after it was cordoned and its drain finished (never on drain_timeout), and never
while its latest report shows GPU processes; it is only returned to service automatically
after return_after healthy reports made after the remedy (a boot other than its fault's,
or for a GPU reset reports made after it) and, with return_requires_diag, a dcgmi diag
started after the remedy that passed. A node an operator
cordoned is never drained, terminated or uncordoned by a plan unless the operator names it
in `--replace`. Every lifecycle out of service has a deadline and a next step (drain_timeout,
boot_timeout, return_timeout, the diagnostics time limits: docs/health-policy.md "No node
stuck out of service"), so no node holds the disruption budget for good. Under surge_on:
replace a node the ladder remedies in place gets no surge replacement; under surge_on:
any (the default) it gets one, and once cured it is terminated as the surplus rather than
returned to service (navarch.planner.spares.returning).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from operator import attrgetter

from navarch.fleet.spec import FleetSpec, PoolSpec
from navarch.planner.acceptance_stage import acceptance_stage
from navarch.planner.blocks import block_stage
from navarch.planner.breaker import BreakerState, breaker_state
from navarch.planner.capacity import count_stage, index_of, scale_stage
from navarch.planner.capacity import node_name as node_name  # `navarch local` names nodes
from navarch.planner.context import (
    PlanOptions,
    PoolContext,
    Progress,
    Stage,
    StageResult,
    run_stages,
)
from navarch.planner.diagnostics import diagnostics_stage
from navarch.planner.drift import drift_stage
from navarch.planner.hosts import with_hosts
from navarch.planner.ladder import ladder_stage
from navarch.planner.launches import cap_launches
from navarch.planner.model import (
    LEAVING,
    Halt,
    HaltRule,
    Memory,
    NodeView,
    Plan,
    PoolMemory,
)
from navarch.planner.modes import Would, hold_by_mode, row_held
from navarch.planner.observe import Duplicate
from navarch.planner.pause import hold_all
from navarch.planner.remedy_gate import alert_only_nodes
from navarch.planner.repair import (
    impaired_stage,
    redrain_stage,
    repair_stage,
    stuck_stage,
    terminate_stage,
    watch_stage,
)
from navarch.planner.retire import (
    destroy_stage,
    duplicate_stage,
    force_destroy_stage,
    orphan_stage,
)
from navarch.planner.silence import silence_stage
from navarch.planner.spares import spares_stage
from navarch.planner.stockout import link_launch_first

HOUR_S = 3600


def plan(
    spec: FleetSpec,
    views: Sequence[NodeView],
    memory: Memory,
    now: datetime,
    options: PlanOptions | None = None,
    duplicates: Sequence[Duplicate] = (),
) -> Plan:
    """Compute the Plan for one run.

    views: observe()'s NodeViews; memory: observe()'s folded Memory; now: aware UTC;
    options: the run's flags and what each provider declared it can do (PlanOptions);
    duplicates: observe()'s duplicate node names.
    Returns a Plan whose actions are in execution order, whose halts say which safety rule
    held what back and whose pending lines name every difference from fleet.yaml this run
    leaves (so a plan is "No changes" only when the world matches). A paused fleet
    (memory.pause, `navarch pause`) gets the same plan with every action held
    (navarch.planner.pause.hold_all); an action a pool's mode forbids is moved to
    Plan.would (navarch.planner.modes.hold_by_mode). Never raises for any combination of
    valid inputs. Cost: O(N log N) in the number of nodes (twice when a remediation row's
    mode holds a cordon its pool would allow: navarch.planner.modes.row_held).
    """
    options = options or PlanOptions()
    out = _plan_once(spec, views, memory, now, options, duplicates)
    held = row_held(spec, out.would) - options.mode_held
    if held:
        # A cordon a row holds back takes no place of the budget or the repair rate: plan
        # again with those nodes left alone, and keep the would rows the first pass made.
        first = out
        again = replace(options, mode_held=options.mode_held | held)
        out = _plan_once(spec, views, memory, now, again, duplicates)
        kept = tuple(w for w in first.would if w.about() & held and w not in out.would)
        out = replace(out, would=out.would + kept)
    out = hold_all(out, memory.pause)  # a paused fleet: planned, reported, acted on by no one
    fingerprint = observation_fingerprint(views, out.halts, out.would)
    return replace(out, observation_fingerprint=fingerprint)


def _plan_once(
    spec: FleetSpec,
    views: Sequence[NodeView],
    memory: Memory,
    now: datetime,
    options: PlanOptions,
    duplicates: Sequence[Duplicate],
) -> Plan:
    """One pass of the stages over every pool, with the modes applied: plan()'s Plan
    before the pause and the fingerprint."""
    alerts = alert_only_nodes(spec, views)
    fleet_breaker = breaker_state(views, spec.safety.fleet_circuit_breaker_pct, alerts)
    fleet = _fleet_stages(spec, views, memory, now, options, duplicates, fleet_breaker)
    by_pool: dict[str, list[NodeView]] = {}
    for v in views:
        by_pool.setdefault(v.pool, []).append(v)
    last_index: dict[str, int] = {}
    for nm in memory.nodes:
        last_index[nm.pool] = max(last_index.get(nm.pool, 0), index_of(spec.name, nm.pool, nm.node))
    results: list[StageResult] = [fleet]
    for pool in sorted(spec.pools, key=lambda p: p.name):
        if not options.includes(pool.name):
            continue
        pviews = tuple(sorted(by_pool.get(pool.name, ()), key=lambda v: v.node))
        pm = memory.pool(pool.name)
        top = max(
            [pm.next_index - 1, last_index.get(pool.name, 0)]
            + [index_of(spec.name, pool.name, v.node) for v in pviews]
        )
        results.append(
            _plan_pool(
                spec,
                pool,
                pviews,
                pm,
                now,
                options,
                top,
                fleet_breaker,
                alerts,
            )
        )
    blocked = {d.node for d in duplicates}
    actions = tuple(
        a for r in results for a in r.actions if a.node not in blocked or a in fleet.actions
    )
    # A mode's would rows launch nothing, so they count toward no launch cap.
    actions, would = hold_by_mode(spec, actions, views)
    actions, capped = cap_launches(
        actions, spec.safety.max_launches_per_run, options.allow_launches
    )
    halts = tuple(h for r in results for h in r.halts) + capped
    return Plan(
        fleet=spec.name,
        created_at=now,
        actions=actions,
        halts=halts,
        notes=tuple(n for r in results for n in r.notes),
        pending=tuple(p for r in results for p in r.pending),
        state_serial=memory.serial,
        views=tuple(views),
        would=would,
    )


def observation_fingerprint(
    views: Sequence[NodeView], halts: Sequence[Halt], would: Sequence[Would] = ()
) -> str:
    """A digest of what the plan was made from beyond inventory and state: each node's
    lifecycle, accepted report sequence, rejection and drift, the halts and what the
    pools' modes held back. `apply PLAN` refuses a saved plan whose fingerprint no longer
    matches (a node recovered, a breaker opened, a pool's mode changed). 16 hex characters."""
    lines = [
        f"{v.node}|{v.lifecycle.value}|{v.summary.sequence if v.summary else None}|"
        f"{v.rejected}|{v.drift}|{v.tags_drift}\n"
        for v in sorted(views, key=attrgetter("node"))
    ]
    lines.extend(f"halt|{x.pool}|{x.rule}\n" for x in halts)
    lines.extend(f"would|{w.action.node}|{w.action.kind}|{w.mode}\n" for w in would)
    return hashlib.sha256("".join(lines).encode()).hexdigest()[:16]


def _plan_pool(
    spec: FleetSpec,
    pool: PoolSpec,
    views: tuple[NodeView, ...],
    pm: PoolMemory,
    now: datetime,
    options: PlanOptions,
    last_index: int,
    fleet_breaker: BreakerState,
    alerts: frozenset[str] = frozenset(),
) -> StageResult:
    """Run the pool's stages in order, folding their results into one StageResult. The
    pool is frozen (no new cordon or termination) when its breaker or the fleet's is open,
    except under destroy. alerts: the fleet's alert-only nodes (the breaker skips them)."""
    h = pool.health
    halts: list[Halt] = []
    breaker = breaker_state(views, spec.safety.circuit_breaker_pct, alerts)
    if breaker.open and not options.destroy:
        halts.append(
            Halt(
                pool.name,
                HaltRule.CIRCUIT_BREAKER,
                f"{breaker.summary()}: no new cordon or termination in this pool;"
                " a mass failure is more often a broken agent, network or store",
            )
        )
    frozen = (breaker.open or fleet_breaker.open) and not options.destroy
    ctx = PoolContext(spec, pool, views, pm, now, frozen, options, last_index)
    # A node out of service that served nothing (a spare, a node in acceptance) takes no place
    # of the budget: max_unavailable bounds the work the pool loses at once.
    unavailable = sum(v.lifecycle in LEAVING and v.counts_against_budget for v in views)
    recent = [r for r in pm.repairs if (now - r).total_seconds() < HOUR_S]
    progress = Progress(
        desired=pool.target_nodes,
        budget=h.max_unavailable_nodes(pool.target_nodes) - unavailable,
        rate_left=spec.safety.repairs_per_pool_per_hour - len(recent),
    )
    stages = DESTROY_STAGES if options.destroy else POOL_STAGES
    if options.destroy and options.force:
        stages = (force_destroy_stage,)
    result = run_stages(ctx, stages, StageResult(progress, halts=tuple(halts)))
    return result if options.destroy else with_hosts(ctx, link_launch_first(result))


# --- fleet stages -------------------------------------------------------------------------


def _fleet_stages(
    spec: FleetSpec,
    views: Sequence[NodeView],
    memory: Memory,
    now: datetime,
    options: PlanOptions,
    duplicates: Sequence[Duplicate],
    breaker: BreakerState,
) -> StageResult:
    """Fleet circuit breaker (its halt), orphans, duplicate node names."""
    halts: list[Halt] = []
    frozen = breaker.open and not options.destroy
    if frozen:
        halts.append(
            Halt(
                "*",
                HaltRule.CIRCUIT_BREAKER,
                f"{breaker.summary(' in the fleet')}: no new cordon or termination anywhere;"
                " check the agents, the store and the network first",
            )
        )
    orphans = orphan_stage(spec, views, memory, now, options, frozen=frozen)
    dups = duplicate_stage(duplicates)
    none = Progress(0, 0, 0)
    return StageResult(none, halts=tuple(halts)).then(orphans, none).then(dups, none)


#: The pool pipeline: each pool's stages in the order they run (module docstring).
POOL_STAGES: tuple[Stage, ...] = (
    scale_stage,
    block_stage,
    ladder_stage,
    silence_stage,
    terminate_stage,
    redrain_stage,
    stuck_stage,
    repair_stage,
    impaired_stage,
    watch_stage,
    diagnostics_stage,
    drift_stage,
    spares_stage,
    acceptance_stage,
    count_stage,
)
#: `navarch destroy`'s pipeline (`destroy --force`: force_destroy_stage alone).
DESTROY_STAGES: tuple[Stage, ...] = (terminate_stage, redrain_stage, destroy_stage)

"""observe(): derive each node's lifecycle from inventory, reports, memory and a clock.

Pure: no I/O, no clock reads, no randomness. Same inputs give the same output.
Rules (docs/design.md, Node lifecycle; docs/design.md, Safety rules, rules 1-2):
- Instances tagged for this fleet with a node name are nodes; the rest are foreign. A node
  whose pool is no longer declared is an orphan (never foreign): ORPHAN until navarch
  takes it out of service, then its phase's lifecycle judged with the settings recorded
  for its pool (PoolMemory.settings, recorded here every run a pool is declared). A second
  instance with a node's name is a duplicate: set aside, never a node.
- Drift: a node launched from settings its pool no longer declares (provider, instance
  type, zone, capacity, launch settings) carries a drift reason; changed labels are listed
  for an in-place update.
- Unhealthy counts per distinct report sequence, never per run; a new boot restarts the count.
- A fatal XID latched in a report, or a spot/maintenance notice, acts at once.
- Missing, rejected or unreadable reports make a node UNKNOWN (then STALE), never
  unhealthy, until offline_after has passed since the last accepted report.
- A node with no report at all is BOOTING until boot_timeout, then UNHEALTHY (counted
  from its launch, or from its adoption for a machine `navarch adopt` took over); an
  instance still pending past provision_timeout is STUCK.
- A spot preemption notice is PREEMPTING (act at once); a maintenance notice is
  MAINTENANCE (replace before its deadline, within the disruption budget). A disruption
  the cloud scheduled for the instance (CloudStatus.event: retirement, maintenance) is the
  same notice, read from the provider instead of the report.
- The cloud's own status of the instance (Instance.cloud_status) impaired on consecutive
  runs at least IMPAIRED_AFTER_S apart (the first run's time kept in Memory) is evidence,
  not doubt: the node is UNHEALTHY (impaired=True) whatever its last report said, long
  before offline_after. Seen once, it is a note in the reason (the plan cordons the node,
  no more); a node so cordoned (Cordon.impaired) is CORDONED until the listing
  is confirmed (then UNHEALTHY) or clears (the plan uncordons it).
- Remediation ladder: a node the ladder rebooted or GPU-reset is REMEDIATING;
  healthy reports made after the remedy (after_remedy: a boot other than the fault's for a
  reboot, a report made after the reset for reset_gpu) are counted per distinct sequence
  (return_streak), any other such report restarts the count. A node an operator cordoned (`navarch
  cordon`) is OPERATOR_CORDONED whatever its reports say, until `navarch uncordon`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from operator import attrgetter
from typing import Any

from navarch.fleet.durations import format_duration_s
from navarch.fleet.spec import FleetSpec, PoolSpec, Scheduler
from navarch.inventory import TAG_SPEC, Instance, InstanceState, adopted_at
from navarch.planner.acceptance import (
    absolute_verdict,
    acceptance_view,
    judge_acceptance_runs,
    launched_before_acceptance,
)
from navarch.planner.model import (
    CLOCK_SKEW_S,
    IMPAIRED_AFTER_S,
    READY,
    SERVING,
    Fault,
    Lifecycle,
    Memory,
    NodeMemory,
    NodeView,
    Phase,
    PoolMemory,
    PoolSettings,
    ReportObservation,
    ReportSummary,
)
from navarch.planner.retired import retired_pool, settings_of
from navarch.report.health import FaultKey, Remedy, Status
from navarch.report.health_report import NoticeKind


@dataclass(frozen=True)
class Duplicate:
    """A second instance carrying a node's name. extra: the instance Memory does not know
    (None when Memory knows neither, so navarch cannot tell which one is the node)."""

    node: str
    pool: str
    instances: tuple[Instance, ...]
    extra: Instance | None


@dataclass(frozen=True)
class Observed:
    """observe()'s result: views of owned nodes (orphans included, lifecycle ORPHAN),
    foreign instances, duplicate node names, and Memory folded with this run's
    observations (streaks, report summaries, adopted and forgotten nodes)."""

    views: tuple[NodeView, ...]
    foreign: tuple[Instance, ...]
    memory: Memory
    duplicates: tuple[Duplicate, ...] = ()


def is_owned(inst: Instance, spec: FleetSpec) -> bool:
    """Safety rule 1: the instance carries this fleet's tags and a node name.

    Its pool may be gone from fleet.yaml (an orphan) or on another provider (drift): both
    are still this fleet's, never foreign.
    """
    return inst.fleet == spec.name and bool(inst.node) and bool(inst.pool)


def drift_reason(pool: PoolSpec, inst: Instance, nm: NodeMemory | None) -> str | None:
    """Why a node no longer matches its pool as declared now, or None when it does.

    A node on a type or zone still listed (not the first) is not drift: fallback placements
    are legal. With several placements the node is compared with the placement it was
    launched in (PoolSpec.placement_of); a provider in none of them is drift. A node
    launched before navarch tagged launch settings (no navarch-spec tag and nothing in
    Memory) is given the benefit of the doubt.
    """
    reasons: list[str] = []
    found = pool.placement_of(inst.provider, inst.zone, inst.instance_type)
    if found is None:
        names = ", ".join(pl.provider for pl in pool.placed())
        where = (
            f"in none of the pool's placements ({names})"
            if len(pool.placed()) > 1
            else f"no longer the pool's ({pool.provider})"
        )
        return f"provider {inst.provider} is {where}"
    index, pl = found
    if inst.instance_type not in pl.instance_types:
        reasons.append(f"instance type {inst.instance_type} is no longer in instance_types")
    if inst.zone not in pl.zones:
        reasons.append(f"zone {inst.zone} is no longer in zones")
    if inst.spot and pl.capacity == "on-demand":
        reasons.append("capacity spot, pool now on-demand")
    elif not inst.spot and pl.capacity == "spot":
        reasons.append("capacity on-demand, pool now spot")
    changed = _launch_changes(pool, index, inst, nm)
    if changed is not None:
        reasons.append(
            f"launch settings changed ({changed})" if changed else "launch settings changed"
        )
    return "; ".join(reasons) or None


def _launch_changes(
    pool: PoolSpec, placement: int, inst: Instance, nm: NodeMemory | None
) -> str | None:
    """None when the launch settings match the placement's; else which keys changed
    ("" when unknown)."""
    settings = pool.launch_settings(placement)
    if nm is not None and nm.launch == settings:
        return None
    now = dict(settings)
    if nm is not None and nm.launch:
        then = dict(nm.launch)
        if then == now:
            return None
        keys = sorted(k for k in set(then) | set(now) if then.get(k) != now.get(k))
        return ", ".join(f"{k} {_short(then.get(k))} -> {_short(now.get(k))}" for k in keys[:3])
    tagged = inst.tag(TAG_SPEC)
    if tagged is None or tagged == pool.launch_hash(placement):
        return None
    return ""


def _short(value: str | None) -> str:
    if value is None:
        return "(unset)"
    text = value.strip('"')
    return text if len(text) <= 24 else text[:21] + "..."


def labels_drift(pool: PoolSpec, inst: Instance) -> tuple[tuple[str, str], ...]:
    """The pool's labels that the instance lacks or carries with another value."""
    if not pool.labels:
        return ()
    return tuple([(k, v) for k, v in pool.labels if inst.tag(k) != v])


def observe(
    spec: FleetSpec,
    inventory: Sequence[Instance],
    reports: Mapping[str, ReportObservation],
    memory: Memory,
    now: datetime,
    drain_checks: Mapping[str, bool] | None = None,
) -> Observed:
    """Derive NodeViews (sorted by node name) and fold observations into Memory.

    inventory: every instance the fleet's providers listed. reports: node -> observation.
    drain_checks: node -> True when its scheduler's drain check passed this run (nodes of
    pools with scheduler none are judged from their report's GPU process count instead).
    """
    drain_checks = drain_checks or {}
    owned, foreign, duplicates = _split(spec, inventory, memory)

    # Nodes navarch remembers whose instance is gone: forget them (terminated, preempted,
    # or removed by hand). The pool's count drops and plan() provisions what is missing.
    gone = [nm.node for nm in memory.nodes if nm.node not in owned]
    declared = {p.name: p for p in spec.pools}
    rejections = dict(memory.rejections)
    # A pool seen with acceptance for the first time asks it from now (_fold_pools keeps it).
    since = {
        p.name: memory.pool(p.name).acceptance_since or now
        for p in spec.pools
        if p.acceptance is not None
    }
    views: list[NodeView] = []
    changed: list[NodeMemory] = []  # folded into Memory at once (one table update)
    for name in sorted(owned):
        inst = owned[name]
        known = memory.node(name)
        nm = known or NodeMemory(node=name, pool=inst.pool or "", first_seen_at=now)
        if nm.instance_id != inst.instance_id:
            nm = replace(nm, instance_id=inst.instance_id)
        obs = reports.get(name)
        if obs is not None and obs.rejected and obs.version != nm.report_version:
            rejections[obs.rejected] = rejections.get(obs.rejected, 0) + 1
        nm = _fold_impaired(_fold_report(nm, obs), inst, now)
        if nm is not known:
            changed.append(nm)
        pool = declared.get(inst.pool or "")
        if pool is None:
            settings = memory.pool(inst.pool or "").settings
            views.append(_orphan_view(inst, nm, obs, now, settings, drain_checks.get(name)))
            continue
        views.append(
            _view(
                pool,
                inst,
                nm,
                obs,
                now,
                drain_checks.get(name),
                drift_reason(pool, inst, nm),
                labels_drift(pool, inst),
                held_since=(
                    None
                    if launched_before_acceptance(since.get(pool.name), inst.launched_at)
                    else inst.launched_at
                ),
            )
        )
    views, passed, judged_pools = judge_acceptance_runs(spec, views, changed, memory, now)
    changed = [nm for nm in changed if nm.node not in passed] + list(passed.values())
    mem = memory.with_nodes(changed, without=gone) if changed or gone else memory
    for pm in judged_pools.values():
        mem = mem.with_pool(pm)

    mem = _fold_pools(spec, mem, views, owned, since)

    mem = replace(mem, rejections=tuple(sorted(rejections.items())))
    return Observed(
        views=tuple(_spare(v, mem) for v in views),
        foreign=tuple(foreign),
        memory=mem,
        duplicates=tuple(duplicates),
    )


def _fold_pools(
    spec: FleetSpec,
    mem: Memory,
    views: Sequence[NodeView],
    owned: Mapping[str, Instance],
    since: Mapping[str, datetime],
) -> Memory:
    """mem with each declared pool's memory brought up to date: next_index past every owned
    node's, the pool's settings (retirement ended), only the spares still alive, and when
    it first had acceptance (since: pool -> acceptance_since; absent: acceptance off)."""
    highest = _highest_indexes(spec.name, views)
    for pool in spec.pools:
        pm = mem.pool(pool.name)
        if pool.name in highest and highest[pool.name] + 1 > pm.next_index:
            pm = replace(pm, next_index=highest[pool.name] + 1)
        # Kept while the pool is declared, so that its nodes can still be drained with
        # them should the pool leave fleet.yaml (its retirement then starts afresh).
        settings = settings_of(pool)
        if pm.settings != settings or pm.retiring_since is not None:
            pm = replace(pm, settings=settings, retiring_since=None)
        pm = _live_spares(pm, owned)
        if pm.acceptance_since != since.get(pool.name):
            pm = replace(pm, acceptance_since=since.get(pool.name))
        if pm != mem.pool(pool.name):
            mem = mem.with_pool(pm)
    return mem


def _highest_indexes(fleet: str, views: Sequence[NodeView]) -> dict[str, int]:
    """pool -> the highest index among its nodes' names (FLEET-POOL-INDEX).

    Names are never reused, even after a lost state: every owned node's index raises its
    pool's next_index (a reused name would reuse a terminated node's launch id)."""
    highest: dict[str, int] = {}
    for v in views:
        prefix = f"{fleet}-{v.pool}-"
        tail = v.node[len(prefix) :]
        if v.node.startswith(prefix) and tail.isdigit():
            highest[v.pool] = max(highest.get(v.pool, 0), int(tail))
    return highest


def _live_spares(pm: PoolMemory, owned: Mapping[str, Instance]) -> PoolMemory:
    """pm without the spares whose instance is gone (the same object when none is)."""
    if all(n in owned for n in pm.spares):
        return pm
    return replace(pm, spares=tuple(n for n in pm.spares if n in owned))


def _spare(v: NodeView, memory: Memory) -> NodeView:
    """A healthy or degraded node the pool holds as a warm spare (PoolMemory.spares) is
    SPARE: cordoned from the scheduler, serving nothing until promoted. Any other verdict
    (unhealthy, offline, doubt) stands: a sick spare is repaired like any node."""
    if v.lifecycle not in (Lifecycle.HEALTHY, Lifecycle.DEGRADED) or v.orphan:
        return v
    if v.node not in memory.pool(v.pool).spares:
        return v
    return replace(
        v,
        lifecycle=Lifecycle.SPARE,
        reason=f"warm spare, cordoned from the scheduler ({v.lifecycle.value}: {v.reason})",
    )


def _split(
    spec: FleetSpec, inventory: Sequence[Instance], memory: Memory
) -> tuple[dict[str, Instance], list[Instance], list[Duplicate]]:
    """Owned nodes by name, foreign instances, and names carried by more than one instance.

    For a duplicated name the node is the instance Memory knows; the others are extras.
    When Memory knows none of them, none is a node this run (doubt never acts).
    """
    by_name: dict[str, list[Instance]] = {}
    foreign: list[Instance] = []
    for inst in sorted(inventory, key=attrgetter("provider", "instance_id")):
        if is_owned(inst, spec):
            by_name.setdefault(inst.node or "", []).append(inst)
        else:
            foreign.append(inst)
    owned: dict[str, Instance] = {}
    duplicates: list[Duplicate] = []
    for name, insts in by_name.items():
        if len(insts) == 1:
            owned[name] = insts[0]
            continue
        nm = memory.node(name)
        known = [i for i in insts if nm is not None and i.instance_id == nm.instance_id]
        if known:
            owned[name] = known[0]
            for extra in insts:
                if extra is not known[0]:
                    duplicates.append(Duplicate(name, extra.pool or "", tuple(insts), extra))
        else:
            duplicates.append(Duplicate(name, insts[0].pool or "", tuple(insts), None))
    return owned, foreign, duplicates


def _orphan_view(
    inst: Instance,
    nm: NodeMemory,
    obs: ReportObservation | None,
    now: datetime,
    settings: PoolSettings | None,
    drain_check: bool | None,
) -> NodeView:
    """A node whose pool left fleet.yaml: ORPHAN until navarch takes it out of service,
    then the lifecycle of its phase (cordoned, draining, terminating), judged with its
    pool's recorded settings (navarch.planner.retired; unknown: scheduler none)."""
    s = nm.report
    age = max((now - s.observed_at).total_seconds(), 0.0) if s else None
    orphan = f"pool {inst.pool} was removed from fleet.yaml"
    verdict: _Verdict = (Lifecycle.ORPHAN, orphan, {})
    if nm.phase is not Phase.NONE:
        phased = _by_phase(retired_pool(inst.pool or "", settings), nm, age, drain_check)
        if phased is not None:
            lc, reason, extra = phased
            # A node cordoned for another reason before its pool left says both.
            if "orphan:" not in reason:
                reason = f"orphan: {orphan}; {reason}" if reason else f"orphan: {orphan}"
            verdict = (lc, reason, extra)
    lc, reason, extra = verdict
    return NodeView(
        node=nm.node,
        pool=inst.pool or "",
        lifecycle=lc,
        reason=reason,
        instance=inst,
        summary=s,
        report_age_s=age,
        streak=nm.streak,
        phase_at=nm.phase_at,
        rejected=obs.rejected if obs else None,
        orphan=True,
        **extra,
    )


def fault_of(s: ReportSummary) -> Fault:
    """The Fault an unhealthy report shows: its structured key (ReportSummary.fault_key,
    read from the agent's checks or named by a user rule; kind "unhealthy" when the report
    names none), recommended remedy, boot id and sequence."""
    key = s.fault_key if s.fault_key is not None else FaultKey(s.status.value)
    return Fault(key, s.action, s.boot_id, s.sequence)


def after_remedy(
    rung: Remedy | None, fault: Fault | None, rung_at: datetime | None, s: ReportSummary | None
) -> bool:
    """Whether report s was made after the ladder's remedy of `fault`.

    reboot (and any rung but reset_gpu): s comes from another boot than the fault's report.
    reset_gpu keeps the boot: s was made (ReportSummary.observed_at, the store's clock when
    known) after rung_at, when the reset ran; the agent drops the XIDs it latched before
    the reset (playbooks/reset_gpu.yaml), so such a report speaks of the GPUs as reset.
    False without a fault or a report.
    """
    if fault is None or s is None:
        return False
    if s.boot_id != fault.boot_id:
        return True
    return rung is Remedy.RESET_GPU and rung_at is not None and s.observed_at > rung_at


def _fold_return(nm: NodeMemory, s: ReportSummary) -> int:
    """return_streak after a new report: +1 for a healthy report made after the ladder's
    remedy (after_remedy) while the ladder waits on the node, else 0."""
    if nm.phase is not Phase.REMEDIATING or nm.fault is None:
        return 0
    if after_remedy(nm.rung, nm.fault, nm.rung_at, s) and s.status is Status.HEALTHY:
        return nm.return_streak + 1
    return 0


def _fold_report(nm: NodeMemory, obs: ReportObservation | None) -> NodeMemory:
    """Keep the newest accepted summary; count an unhealthy streak per distinct sequence, or
    the agent's consecutive checks of the fault when more (ReportSummary.consecutive), and
    the ladder's healthy return_streak (see _fold_return)."""
    if obs is None:
        return nm
    if obs.rejected:
        # Remember the version so the same bad object is counted once (and still shown as
        # rejected while it stays), keep the old summary.
        if nm.report_version == obs.version and nm.report_rejected == obs.rejected:
            return nm
        return replace(nm, report_version=obs.version, report_rejected=obs.rejected)
    s = obs.summary
    if s is None:
        return nm
    if s.sequence <= nm.streak_sequence:
        report = nm.report or s
        if nm.report_rejected is None and nm.report_version == obs.version and nm.report is report:
            return nm  # the same report as last run: nothing to fold
        return replace(nm, report_rejected=None, report_version=obs.version, report=report)
    same_boot = nm.report is not None and nm.report.boot_id == s.boot_id
    streak = (nm.streak if same_boot else 0) + 1 if s.status is Status.UNHEALTHY else 0
    if s.status is Status.UNHEALTHY:
        # The agent checks more often than it writes: its own count of checks in a row
        # that saw the fault is the streak when it is ahead of the reports counted here.
        streak = max(streak, s.consecutive)
    return replace(
        nm,
        report_rejected=None,
        report_version=obs.version,
        report=s,
        streak=streak,
        streak_sequence=s.sequence,
        return_streak=_fold_return(nm, s),
    )


def _fold_impaired(nm: NodeMemory, inst: Instance, now: datetime) -> NodeMemory:
    """Remember the first run of an unbroken impaired listing; any other status forgets it."""
    since = (nm.impaired_since or now) if inst.cloud_status.impaired else None
    return nm if since == nm.impaired_since else replace(nm, impaired_since=since)


def _cloud_detail(inst: Instance) -> str:
    detail = inst.cloud_status.detail
    return f" ({detail})" if detail else ""


def _by_cloud(nm: NodeMemory, inst: Instance, now: datetime) -> _Verdict | None:
    """The cloud's own status: impaired since a run IMPAIRED_AFTER_S ago or more is UNHEALTHY."""
    since = nm.impaired_since
    if since is None or (now - since).total_seconds() < IMPAIRED_AFTER_S:
        return None
    return (
        Lifecycle.UNHEALTHY,
        f"the cloud reports the instance impaired{_cloud_detail(inst)} "
        f"for {format_duration_s((now - since).total_seconds())} (since an earlier run)",
        {"impaired": True},
    )


def _impaired_cordon(nm: NodeMemory, inst: Instance, now: datetime) -> _Verdict | None:
    """A node cordoned on the cloud's first impaired listing (Cordon.impaired):
    UNHEALTHY once a later run confirms the listing (``_by_cloud``: the repair stage drains
    and replaces it), CORDONED while it is not yet confirmed, and CORDONED with the
    listing gone once the cloud stops listing it impaired (the plan uncordons it)."""
    if nm.cordon is None or not nm.cordon.impaired or nm.phase is not Phase.CORDONED:
        return None
    confirmed = _by_cloud(nm, inst, now)
    if confirmed is not None:
        return confirmed
    if inst.cloud_status.impaired:
        return (
            Lifecycle.CORDONED,
            f"cordoned: the cloud lists the instance impaired{_cloud_detail(inst)}; replaced "
            f"if a run {format_duration_s(IMPAIRED_AFTER_S)} or more after the first still "
            "sees it, returned if the listing clears",
            {},
        )
    return (
        Lifecycle.CORDONED,
        "cordoned when the cloud listed the instance impaired; the listing has cleared",
        {},
    )


def _cloud_event(inst: Instance, verdict: _Verdict) -> _Verdict:
    """A disruption the cloud scheduled turns a serving node into MAINTENANCE (a report's
    own notice or a worse verdict stays); an impairment seen once is noted in the reason."""
    lc, reason, extra = verdict
    cs = inst.cloud_status
    if (
        cs.event is not None
        and lc in SERVING
        and lc not in (Lifecycle.MAINTENANCE, Lifecycle.PROVISIONING)
    ):
        by = f" (deadline {cs.event_deadline:%Y-%m-%d %H:%M} UTC)" if cs.event_deadline else ""
        return (
            Lifecycle.MAINTENANCE,
            f"the cloud scheduled {cs.event.value}{by}",
            {"deadline": cs.event_deadline},
        )
    if cs.impaired and lc in SERVING:
        return (
            lc,
            f"{reason}; the cloud reports the instance impaired{_cloud_detail(inst)} "
            f"(cordoned now; replaced if a run {format_duration_s(IMPAIRED_AFTER_S)} or "
            "more later sees it again)",
            extra,
        )
    return verdict


def clock_skew_note(s: ReportSummary | None) -> str:
    """ "; clock skew: ..." when the node's clock is more than CLOCK_SKEW_S off the store's
    (ReportSummary.clock_skew_s), else "". A condition to fix on the node (NTP), shown
    in the view's reason; it never changes a lifecycle."""
    skew_s = s.clock_skew_s if s is not None else None
    if skew_s is None or abs(skew_s) <= CLOCK_SKEW_S:
        return ""
    side = "ahead of" if skew_s > 0 else "behind"
    return f"; clock skew: node clock {format_duration_s(abs(skew_s))} {side} the store's"


def _first_finding(s: ReportSummary) -> str:
    return s.findings[0] if s.findings else f"agent reports {s.status}"


# A lifecycle, its reason, and extra NodeView fields (immediate, drained, deadline).
_Verdict = tuple[Lifecycle, str, dict[str, Any]]


def _view(
    pool: PoolSpec,
    inst: Instance,
    nm: NodeMemory,
    obs: ReportObservation | None,
    now: datetime,
    drain_check: bool | None,
    drift: str | None = None,
    tags_drift: tuple[tuple[str, str], ...] = (),
    held_since: datetime | None = None,
) -> NodeView:
    s = nm.report
    # Age by the store's clock when known: a node's wrong clock is shown
    # as skew in the reason, never a reason to replace it.
    age = max((now - s.observed_at).total_seconds(), 0.0) if s else None
    rejected = obs.rejected if obs else None
    # The cloud's verdict comes before the pending check: a GCE instance being repaired
    # after a host error is listed pending, and must not wait out provision_timeout.
    verdict = (
        _impaired_cordon(nm, inst, now)
        or _by_phase(pool, nm, age, drain_check)
        or _by_cloud(nm, inst, now)
        or _by_instance(pool, inst, now)
    )
    if verdict is None:
        if s is None or age is None:
            verdict = _unreported(pool, inst, nm, rejected, now)
        else:
            verdict = _reported(pool, nm, s, age, rejected)
        verdict = _cloud_event(inst, verdict)
    lc, reason, extra = verdict
    standing = None
    if lc in READY and s is not None:
        gate = absolute_verdict(pool.acceptance, s, nm.accepted, now, held_since, nm.node)
        if gate is not None:
            standing, lc, reason, extra = acceptance_view(gate, lc, reason, extra)
    return NodeView(
        node=nm.node,
        pool=pool.name,
        lifecycle=lc,
        reason=reason + clock_skew_note(s),
        instance=inst,
        summary=s,
        report_age_s=age,
        streak=nm.streak,
        phase_at=nm.phase_at,
        rejected=rejected,
        fault=nm.fault,
        faults=nm.faults,
        rung=nm.rung,
        rung_fault=nm.rung_fault,
        rung_at=nm.rung_at,
        return_streak=nm.return_streak,
        diag=nm.diag,
        cordon=nm.cordon,
        drift=drift,
        tags_drift=tags_drift,
        acceptance=standing,
        **extra,
    )


def _by_phase(
    pool: PoolSpec, nm: NodeMemory, age: float | None, drain_check: bool | None
) -> _Verdict | None:
    """What navarch has done to the node decides first (Memory's phase, an operator's cordon)."""
    s = nm.report
    if nm.phase is Phase.TERMINATING:
        return Lifecycle.TERMINATING, nm.phase_reason, {}
    if nm.phase is Phase.DRAINING:
        if pool.scheduler is Scheduler.NONE and "drain_check" not in pool.playbooks:
            fresh = s is not None and age is not None and age <= pool.health.stale_after_s
            drained = bool(
                s is not None
                and fresh
                and s.process_count == 0
                and (nm.phase_at is None or s.observed_at >= nm.phase_at)
            )
        else:
            drained = bool(drain_check)
        return Lifecycle.DRAINING, nm.phase_reason, {"drained": drained}
    if nm.phase is Phase.CORDONED:
        return Lifecycle.CORDONED, nm.phase_reason, {}
    if nm.phase is Phase.REMEDIATING:
        return Lifecycle.REMEDIATING, nm.phase_reason, {}
    if nm.cordon is not None and nm.cordon.is_operator:
        return (
            Lifecycle.OPERATOR_CORDONED,
            "cordoned by an operator: " + nm.cordon.note.removeprefix("operator: "),
            {},
        )
    return None


def _by_instance(pool: PoolSpec, inst: Instance, now: datetime) -> _Verdict | None:
    """A pending instance: provisioning, or stuck past provision_timeout."""
    if inst.state is not InstanceState.PENDING:
        return None
    h = pool.health
    pending_s = (now - inst.launched_at).total_seconds()
    if pending_s > h.provision_timeout_s:
        return (
            Lifecycle.STUCK,
            f"pending for {format_duration_s(pending_s)} "
            f"(provision_timeout {format_duration_s(h.provision_timeout_s)})",
            {},
        )
    return Lifecycle.PROVISIONING, "instance is pending", {}


def _unreported(
    pool: PoolSpec, inst: Instance, nm: NodeMemory, rejected: str | None, now: datetime
) -> _Verdict:
    """No accepted report yet: booting, then unhealthy past boot_timeout; doubt (rejected
    reports) is unknown until offline_after."""
    h = pool.health
    since = nm.first_seen_at or inst.launched_at
    # An adopted machine gets its agent after adoption: its boot window starts there.
    up_s = (now - (adopted_at(inst) or min(since, inst.launched_at))).total_seconds()
    if rejected:
        if up_s > h.offline_after_s:
            return (
                Lifecycle.OFFLINE,
                f"no accepted report for {format_duration_s(up_s)} (last one rejected: {rejected})",
                {},
            )
        return Lifecycle.UNKNOWN, f"report rejected: {rejected}", {}
    if up_s > h.boot_timeout_s:
        return (
            Lifecycle.UNHEALTHY,
            f"no report within boot_timeout ({format_duration_s(h.boot_timeout_s)})",
            {},
        )
    return (
        Lifecycle.BOOTING,
        f"waiting for the first report ({format_duration_s(up_s)} since launch)",
        {},
    )


def _reported(
    pool: PoolSpec, nm: NodeMemory, s: ReportSummary, age: float, rejected: str | None
) -> _Verdict:
    """The newest accepted report decides: freshness, notices, then its status."""
    h = pool.health
    if age > h.offline_after_s:
        return (
            Lifecycle.OFFLINE,
            f"no fresh report for {format_duration_s(age)} "
            f"(offline_after {format_duration_s(h.offline_after_s)})",
            {},
        )
    if s.notice_kind is NoticeKind.PREEMPTION:
        return Lifecycle.PREEMPTING, "preemption notice from the cloud", {"immediate": True}
    if s.notice_kind is NoticeKind.MAINTENANCE:
        by = f" (deadline {s.notice_deadline:%Y-%m-%d %H:%M} UTC)" if s.notice_deadline else ""
        return (
            Lifecycle.MAINTENANCE,
            f"maintenance notice from the cloud{by}",
            {"deadline": s.notice_deadline},
        )
    if age > h.stale_after_s:
        return Lifecycle.STALE, f"last report {format_duration_s(age)} old", {}
    if rejected:
        return Lifecycle.UNKNOWN, f"latest report rejected: {rejected}", {}
    if s.status is Status.UNHEALTHY:
        if s.fatal:
            return Lifecycle.UNHEALTHY, _first_finding(s), {"immediate": True}
        if nm.streak >= h.unhealthy_after:
            return Lifecycle.UNHEALTHY, f"{_first_finding(s)} ({nm.streak} reports in a row)", {}
        return (
            Lifecycle.DEGRADED,
            f"{_first_finding(s)} (unhealthy report {nm.streak} of {h.unhealthy_after})",
            {},
        )
    if s.status is Status.DEGRADED:
        return Lifecycle.DEGRADED, _first_finding(s), {}
    if s.status is Status.UNKNOWN:
        return Lifecycle.UNKNOWN, _first_finding(s), {}
    return Lifecycle.HEALTHY, "all checks pass", {}


#: The fold observe() gives each node's report, for a run that folds reports and plans
#: nothing else (navarch.planner.quiet): one place decides what a report adds to Memory.
fold_report = _fold_report

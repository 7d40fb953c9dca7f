"""One reconcile run's I/O around the pure planner: gather, plan, apply.

gather(): list every provider's instances (all of them, or the run stops: planning on a
partial inventory would provision duplicates), read Memory and the health reports, run
drain checks for draining nodes, then observe() and plan() (pure).
apply: take the lease (renewed in the background), gather again, check a saved plan is not
stale, execute (journaling Memory by compare-and-swap as actions finish), write Memory if
it changed, release the lease.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from navarch.actor import Actor, ActorKind
from navarch.errors import ConfigError, NavarchError, ProviderError, StalePlan
from navarch.fleet.secret import read_fleet_secret
from navarch.fleet.spec import FleetSpec, PoolSpec, Scheduler
from navarch.history import Trigger
from navarch.inventory import Instance, Reservation, fingerprint, reservations_of
from navarch.logs import new_run_id
from navarch.outcome import Outcome, RunResult
from navarch.planner.context import PlanOptions
from navarch.planner.model import Memory, Phase, Plan, ReportObservation
from navarch.planner.observe import Observed, observe
from navarch.planner.plan import observation_fingerprint
from navarch.planner.plan import plan as make_plan
from navarch.planner.retired import retired_pool
from navarch.providers import open_provider
from navarch.providers.base import Provider, capabilities_of
from navarch.reconcile.codec import memory_to_json
from navarch.reconcile.collector import gathering
from navarch.reconcile.executor import Executor, JournalPolicy, PlaybookRunner
from navarch.reconcile.quiet_run import Partial, quiet_run
from navarch.reconcile.report_cache import CacheMemo
from navarch.reconcile.reports import read_reports
from navarch.reconcile.state import (
    AuditLog,
    Lease,
    Lock,
    StateCache,
    acquire_lock,
    load_memory,
    save_memory,
)
from navarch.report.health import Remedy
from navarch.stores import ObjectStore, open_store

log = logging.getLogger(__name__)


#: The reconciler's clock: a call returns now, an aware UTC datetime. Every verb takes one
#: (the planner itself never reads a clock); the CLI builds it once per process, and the
#: simulator passes its virtual clock.
Clock = Callable[[], datetime]


def system_clock() -> datetime:
    """Now in UTC from the system clock: the production Clock."""
    return datetime.now(UTC)


def _on_node_playbooks(pool: PoolSpec) -> bool:
    """Whether the pool runs playbooks on its nodes whatever its scheduler: the
    ladder's GPU reset (playbooks/reset_gpu.yaml) or active diagnostics (dcgmi diag)."""
    h = pool.health
    return (
        Remedy.RESET_GPU in h.remediation
        or h.return_requires_diag is not None
        or pool.diagnostics.every_s is not None
    )


@dataclass
class Fleet:
    """An opened fleet: its spec, store and providers (by fleet.yaml provider name)."""

    spec: FleetSpec
    store: ObjectStore
    providers: dict[str, Provider]
    playbooks: PlaybookRunner | None = None
    #: destroy only: go on without the secret (reports count as rejected "no_secret"), so
    #: a fleet whose secret is lost can still be torn down; it launches nothing.
    secret_optional: bool = False
    #: the state document this process last wrote or read (see StateCache)
    state_cache: StateCache = field(default_factory=StateCache, repr=False, compare=False)
    #: the report cache document this process last wrote or read (see CacheMemo)
    reports_memo: CacheMemo = field(default_factory=CacheMemo, repr=False, compare=False)

    @classmethod
    def open(cls, spec: FleetSpec) -> Fleet:
        """Open the store and every declared provider (one no pool uses any more may still
        hold orphans of a removed pool). Raises ConfigError/ProviderError."""
        store = open_store(spec.store_url, base_dir=spec.base_dir)
        names = sorted(spec.providers)
        providers = {
            n: open_provider(n, spec.providers[n], base_dir=spec.base_dir, fleet=spec.name)
            for n in names
        }
        playbooks = None
        if any(
            p.scheduler is not Scheduler.NONE or p.playbooks or _on_node_playbooks(p)
            for p in spec.pools
        ):
            from navarch.extras import import_extra

            adapter = import_extra("navarch.remote.adapter", "ssh", "playbooks over SSH")
            playbooks = adapter.SSHPlaybooks(spec)
        return cls(spec, store, providers, playbooks)

    def secret(self) -> bytes | None:
        """The fleet secret. Raises ConfigError naming the missing environment variable or
        file: without it no report verifies and new nodes would boot
        without an agent key, so plan, apply and status stop instead of going on. With
        secret_optional (destroy) a missing secret is None instead."""
        try:
            return read_fleet_secret(self.spec)
        except ConfigError:
            if self.secret_optional:
                return None
            raise


@dataclass(frozen=True)
class Snapshot:
    """Everything one run saw, and the plan made from it."""

    inventory: tuple[Instance, ...]
    loaded: Memory  # Memory as read from the store, before this run's observations
    memory_version: str | None
    reports: Mapping[str, ReportObservation]
    observed: Observed
    plan: Plan
    now: datetime
    #: the reservations the pools name, as their clouds report them (navarch.inventory)
    reservations: tuple[Reservation, ...] = ()

    @property
    def memory(self) -> Memory:
        return self.observed.memory


def list_inventory(fleet: Fleet) -> tuple[Instance, ...]:
    """Every instance of every provider; raises ProviderError naming the provider."""
    out: list[Instance] = []
    for name, provider in sorted(fleet.providers.items()):
        try:
            out.extend(provider.list_instances(fleet.spec.name))
        except ProviderError as exc:
            raise type(exc)(
                f"cannot list instances from provider {name}: {exc}; nothing was planned",
                code=exc.code,
                scope=exc.scope,
            ) from exc
    return tuple(out)


def _retired_playbooks(fleet: Fleet, memory: Memory) -> None:
    """Open the SSH playbook runner when no declared pool needs one but a removed pool,
    whose orphans are still to be drained, had a scheduler or playbooks (its settings as
    recorded in Memory)."""
    if fleet.playbooks is not None:
        return
    declared = {p.name for p in fleet.spec.pools}
    if any(
        pm.pool not in declared
        and pm.settings is not None
        and (pm.settings.scheduler is not Scheduler.NONE or pm.settings.playbooks)
        for pm in memory.pools
    ) and any(nm.pool not in declared for nm in memory.nodes):
        from navarch.extras import import_extra

        adapter = import_extra("navarch.remote.adapter", "ssh", "playbooks over SSH")
        fleet.playbooks = adapter.SSHPlaybooks(fleet.spec)


def _drain_checks(fleet: Fleet, memory: Memory, inventory: tuple[Instance, ...]) -> dict[str, bool]:
    """Run drain_check for draining nodes of pools with a scheduler; SSH trouble = not drained."""
    if fleet.playbooks is None:
        return {}
    by_node = {i.node: i for i in inventory if i.node}
    out: dict[str, bool] = {}
    for nm in memory.nodes:
        if nm.phase is not Phase.DRAINING:
            continue
        try:
            pool: PoolSpec = fleet.spec.pool(nm.pool)
        except KeyError:  # an orphan: drained with its removed pool's recorded settings
            pool = retired_pool(nm.pool, memory.pool(nm.pool).settings)
        if (
            pool.scheduler is Scheduler.NONE and "drain_check" not in pool.playbooks
        ) or nm.node not in by_node:
            continue
        try:
            ok, _ = fleet.playbooks.run(
                pool, "drain_check", nm.node, by_node[nm.node].address, nm.phase_reason
            )
        except NavarchError:
            ok = False
        out[nm.node] = ok
    return out


def gather(
    fleet: Fleet,
    now: datetime,
    options: PlanOptions | None = None,
    named: Collection[str] | None = None,
) -> Snapshot:
    """Observe the world and plan (read-only: writes nothing but the verified-report cache,
    navarch.reconcile.report_cache, which only ever saves time).

    options: the run's flags (--pool, --replace, destroy, --allow-destroy); see PlanOptions.
    Raises ConfigError first thing when the fleet secret cannot be read, NavarchError when
    `--replace` names a node the fleet does not have (a typo must not pass silently).
    In a one-shot process the garbage collector is paused meanwhile
    (navarch.reconcile.collector). named: the report keys a run started by the store's
    notifications was started for (navarch.reconcile.named_reports); None lists every report.
    """
    with gathering():
        return _gather(fleet, now, options, named)


def _gather(
    fleet: Fleet, now: datetime, options: PlanOptions | None, named: Collection[str] | None
) -> Snapshot:
    secret = fleet.secret()
    inventory = list_inventory(fleet)
    memory, version = load_memory(fleet.store, fleet.spec.name, fleet.state_cache)
    reports = read_reports(
        fleet.store,
        fleet.spec.name,
        memory,
        secret,
        now,
        rule_sets={p.name: p.health.rule_sets() for p in fleet.spec.pools},
        cache=fleet.reports_memo,
        named=named,
        stale_after_s={p.name: p.health.stale_after_s for p in fleet.spec.pools},
    )
    _retired_playbooks(fleet, memory)
    checks = _drain_checks(fleet, memory, inventory)
    observed = observe(fleet.spec, inventory, reports, memory, now, checks)
    unknown = sorted(
        (options.replace if options else frozenset()) - {v.node for v in observed.views}
    )
    if unknown:
        raise NavarchError(
            f"--replace {', '.join(unknown)}: no node of that name in fleet "
            f"{fleet.spec.name}; `navarch status` lists its nodes"
        )
    # The planner asks each provider only for what it declared it can do.
    reserved, unknown_reservations = reservations_of(fleet.spec, fleet.providers)
    options = replace(
        options or PlanOptions(),
        capabilities=capabilities_of(fleet.providers),
        reservations=reserved,
        reservations_unknown=unknown_reservations,
    )
    plan = make_plan(fleet.spec, observed.views, observed.memory, now, options, observed.duplicates)
    plan = replace(
        plan,
        state_serial=memory.serial,
        inventory_fingerprint=fingerprint(inventory),
        foreign=observed.foreign,
    )
    return Snapshot(
        inventory, memory, version, reports, observed, plan, now, tuple(reserved.values())
    )


def check_saved_plan(saved: Plan, snap: Snapshot, nodes: frozenset[str] | None = None) -> None:
    """Raise StalePlan when the state serial, the inventory, or what the plan was made from
    (node lifecycles, accepted reports, drift, halts: Plan.observation_fingerprint) moved on
    since `saved`.

    nodes: for a plan narrowed to these nodes' actions (an MCP confirmation), compare what
    it was made from for them only, plus the halts (both plans must carry their views):
    another node's new heartbeat does not change what their actions mean, and at a
    thousand nodes some report is always newer than the plan.
    """
    if saved.fleet != snap.plan.fleet:
        raise StalePlan(f"Saved plan is for fleet {saved.fleet}, not {snap.plan.fleet}")
    if saved.state_serial != snap.plan.state_serial:
        raise StalePlan(
            f"Saved plan is stale: state serial was {saved.state_serial}, now "
            f"{snap.plan.state_serial}; run `navarch plan` again"
        )
    if saved.inventory_fingerprint != snap.plan.inventory_fingerprint:
        raise StalePlan(
            "Saved plan is stale: the instances changed since it was made; run `navarch plan` again"
        )
    if _observed(saved, nodes) != _observed(snap.plan, nodes):
        raise StalePlan(
            "Saved plan is stale: node health, reports or safety halts changed "
            "since it was made; run `navarch plan` again"
        )


def _observed(plan: Plan, nodes: frozenset[str] | None) -> str:
    """The plan's observation fingerprint, over `nodes`' views only when given."""
    if nodes is None:
        return plan.observation_fingerprint
    would = [w for w in plan.would if w.action.node in nodes]
    return observation_fingerprint([v for v in plan.views if v.node in nodes], plan.halts, would)


def _user_data_renderer(
    spec: FleetSpec, store: ObjectStore
) -> Callable[[PoolSpec, str, bytes, str], str] | None:
    try:
        from navarch.agent.bootstrap import render_cloud_init
    except ImportError:
        return None
    from navarch.reconcile.publish import AgentDelivery

    delivery = AgentDelivery(store)

    def render(pool: PoolSpec, node: str, key: bytes, provider: str) -> str:
        if spec.providers[provider]["type"] == "local":
            return ""
        return render_cloud_init(spec, pool.name, node, key, provider, bundle=delivery.get)

    return render


def run_apply(
    fleet: Fleet,
    *,
    command: str,
    clock: Clock = system_clock,
    saved: Plan | None = None,
    saved_nodes: frozenset[str] | None = None,
    options: PlanOptions | None = None,
    confirm: Callable[[Plan], bool] | None = None,
    on_outcome: Callable[[Outcome], None] | None = None,
    policy: JournalPolicy | None = None,
    max_parallel: Mapping[str, int] | None = None,
    after_apply: Callable[[RunResult | None, NavarchError | None], None] | None = None,
    run_id: str | None = None,
    actor: Actor | None = None,
    named: Collection[str] | None = None,
) -> RunResult | None:
    """Take the lease, gather, (check the saved plan), confirm, execute with a journal,
    save Memory if it changed, release the lease.

    clock: the run's clock (see Clock), read for the snapshot, the lease and every action.
    saved_nodes: the nodes `saved` was narrowed to, whose observations alone (with the
    halts) it is checked against (check_saved_plan); None checks every node.

    after_apply(result, error): called while the lease is still held, once with the result
    or once with the NavarchError the run is about to raise (not for LockHeld, not when
    confirm() declined); notifications hang here. Its own errors are logged,
    never raised. run_id: the audit log's run id (default: the snapshot's UTC time and 8 hex
    digits); the CLI passes its own so log lines and the audit log share it. actor: who runs
    it (navarch.actor: read by the CLI from its environment, or the MCP client a tool call
    came from), recorded in every audit record as `by`; an MCP client is named in the
    lease's command too. named: the report keys an event-started run was started for
    (see gather); when every one is quiet the run is partial (navarch.reconcile.quiet_run:
    the reports folded into Memory, nothing listed or planned, Plan.partial set).

    The lease (state/<fleet>.lock, TTL safety.lock_ttl) is renewed in the background for
    the whole run; every action checks it first and every state write checks the lease
    object's version (fencing). Memory is written by compare-and-swap during the run (see
    navarch.reconcile.executor, JournalPolicy) and at the end, only when it differs from
    what was loaded (serial aside), so an apply with nothing to do keeps the serial and
    saved plans stay valid.

    Returns None when confirm() declined. Raises LockHeld, LeaseLost (the lease lapsed or
    was taken over: no action started after that and no state was written), StalePlan,
    ProviderError, StoreError; the lease is released on every path out.
    """
    with leased(fleet, command + _mcp_suffix(actor), clock) as lease:
        try:
            partial = _partial(fleet, clock(), named, saved, options, lease)
            if partial is not None:
                result = partial.result(run_id or new_run_id(partial.plan.created_at))
                _after(after_apply, result, None)
                return result
            snap, plan = _look_again(fleet, clock(), options, named, saved, saved_nodes)
            _preflight(fleet, plan)
            if confirm is not None and plan.actions and not confirm(plan):
                return None
            journal = _Journal(
                fleet.store, snap.loaded, snap.memory_version, lease, fleet.state_cache
            )
            executor = _executor(
                fleet,
                snap,
                clock,
                run_id or new_run_id(snap.now),
                journal,
                lease,
                policy=policy,
                max_parallel=max_parallel,
                who=_who(options, actor),
            )
            result = _execute(executor, journal, plan, snap, on_outcome)
            _after(after_apply, result, None)
            return result
        except NavarchError as exc:
            _after(after_apply, None, exc)
            raise


def _look_again(
    fleet: Fleet,
    now: datetime,
    options: PlanOptions | None,
    named: Collection[str] | None,
    saved: Plan | None,
    saved_nodes: frozenset[str] | None,
) -> tuple[Snapshot, Plan]:
    """The apply's own snapshot and the plan it runs: its own, or the saved plan's actions
    once the world is checked to be the one that plan saw (check_saved_plan)."""
    snap = gather(fleet, now, options, named)
    if saved is None:
        return snap, snap.plan
    check_saved_plan(saved, snap, saved_nodes)
    return snap, replace(snap.plan, actions=saved.actions)


def _preflight(fleet: Fleet, plan: Plan) -> None:
    """Check what the plan's launches need before any action (navarch.reconcile.preflight):
    skipped checks and warnings are logged; a gap raises PreflightFailed listing them all."""
    from navarch.reconcile.preflight import PreflightFailed, preflight, warn

    result = preflight(fleet, plan)
    warn(result, log)
    if result.blocks:
        raise PreflightFailed(result)


def _execute(
    executor: Executor,
    journal: _Journal,
    plan: Plan,
    snap: Snapshot,
    on_outcome: Callable[[Outcome], None] | None,
) -> RunResult:
    """Execute the plan on the snapshot's Memory and persist what it (or observe) learnt
    -> the run's RunResult. Raises what the executor and the journal raise."""
    memory, outcomes = executor.execute(plan, snap.memory, on_outcome)
    memory = journal.persist(memory)  # what observe() learnt, when nothing was done
    return RunResult(
        plan, tuple(outcomes), memory, executor.run_id, executor.audit_error, snap.reservations
    )


def _partial(
    fleet: Fleet,
    now: datetime,
    named: Collection[str] | None,
    saved: Plan | None,
    options: PlanOptions | None,
    lease: Lease,
) -> Partial | None:
    """The partial run of an event-started apply whose reports are all quiet
    (navarch.reconcile.quiet_run), or None for the full run: always when the apply was not
    started by events or was asked for more than converging (a saved plan, --replace,
    destroy)."""
    if named is None or saved is not None:
        return None
    if options is not None and (options.replace or options.destroy):
        return None
    return quiet_run(
        fleet.store, fleet.spec, fleet.secret(), fleet.state_cache, now, named, lease.check_store
    )


def _executor(
    fleet: Fleet,
    snap: Snapshot,
    clock: Clock,
    run_id: str,
    journal: _Journal,
    lease: Lease,
    *,
    policy: JournalPolicy | None,
    max_parallel: Mapping[str, int] | None,
    who: Mapping[str, Any],
) -> Executor:
    """The apply's executor: acting on the instances of this run's inventory, its audit
    records chunked under run_id, Memory journaled under the lease; who: _who()'s answer."""
    spec = fleet.spec
    return Executor(
        spec,
        fleet.providers,
        AuditLog(fleet.store, spec.name, run_id, snap.now),
        instances={v.node: v.instance for v in snap.observed.views if v.instance is not None},
        inventory=snap.inventory,
        clock=clock,
        run_id=run_id,
        playbooks=fleet.playbooks,
        user_data=_user_data_renderer(spec, fleet.store),
        fleet_secret=fleet.secret(),
        journal=journal.persist,
        policy=policy,
        lease=lease,
        max_parallel=max_parallel,
        **who,
    )


def _mcp_suffix(actor: Actor | None) -> str:
    """What the lease's command adds for an MCP client's tool call (else nothing)."""
    return f" (mcp client {actor.name})" if actor and actor.kind is ActorKind.MCP else ""


def _who(options: PlanOptions | None, actor: Actor | None = None) -> dict[str, Any]:
    """How and by whom an apply's actions were asked for, for the audit log: an MCP
    client's tool call (apply, or replace when it names nodes), `destroy` is an operator's
    verb, `--replace` names nodes; anything else is the plan's own decision. `by` is the
    actor whichever it was."""
    if actor is not None and actor.kind is ActorKind.MCP:
        verb = "replace" if options is not None and options.replace else "apply"
        return {"trigger": Trigger.MCP, "verb": verb, "by": actor}
    if options is not None and options.destroy:
        return {"trigger": Trigger.OPERATOR, "verb": "destroy", "by": actor}
    return {"replace": options.replace if options is not None else frozenset(), "by": actor}


@contextmanager
def leased(fleet: Fleet, command: str, clock: Clock = system_clock) -> Iterator[Lease]:
    """Hold the fleet's lease (state/<fleet>.lock, TTL safety.lock_ttl) for `command`.

    clock: the run's clock (see Clock), for the lease's times.

    Renewed in the background while the block runs, released on every path out. The
    holder calls lease.check() before every action and lease.check_store() before every
    state write (fencing; Kubernetes Lease / etcd leases). A lease past its TTL is taken
    over, logged with whose it was. Raises LockHeld (another run holds it), StoreError.
    """
    spec = fleet.spec
    ttl_s = spec.safety.lock_ttl_s
    lock: Lock = acquire_lock(fleet.store, spec.name, command, ttl_s, clock())
    if lock.took_over:
        log.warning("took over the expired lease of %s", lock.took_over)
    lease = Lease(fleet.store, spec.name, lock, ttl_s, clock).start()
    try:
        yield lease
    finally:
        lease.release()


def _after(
    hook: Callable[[RunResult | None, NavarchError | None], None] | None,
    result: RunResult | None,
    error: NavarchError | None,
) -> None:
    """Run the after_apply hook; a failing hook is logged, never changes the apply."""
    if hook is None:
        return
    try:
        hook(result, error)
    except Exception:  # noqa: BLE001 - notifications must not change the apply's outcome
        log.warning("after_apply hook failed", exc_info=True)


class _Journal:
    """Writes Memory by compare-and-swap when it changed (serial aside), fenced by the lease."""

    def __init__(
        self,
        store: ObjectStore,
        loaded: Memory,
        version: str | None,
        lease: Lease,
        cache: StateCache | None = None,
    ) -> None:
        self.store = store
        self.version = version
        self.lease = lease
        self.cache = cache
        self.docs = cache.node_docs if cache is not None else None
        self.last = memory_to_json(replace(loaded, serial=0), self.docs)

    def persist(self, memory: Memory) -> Memory:
        """Save memory (serial + 1) unless unchanged -> the Memory as saved.

        Raises LeaseLost (the lease is not ours: nothing written), PreconditionFailed
        (another writer moved the state on), StoreError.
        """
        doc = memory_to_json(replace(memory, serial=0), self.docs)
        if doc == self.last:
            return memory
        self.lease.check_store()
        saved, self.version = save_memory(self.store, memory, self.version, doc, self.cache)
        self.last = doc
        return saved

"""The executor: the only place that changes the world.

It runs a Plan's actions against providers and playbooks, records one outcome per action
in the audit log and in Memory, and keeps going when an action fails (kopf's "outcome,
not exception" style): a failed action is retried by a later run, because every run
re-observes and re-plans (level-triggered).

Action boundary: every exception an action raises (a navarch error or any other, e.g. a
KeyError from a provider bug) becomes a failed Outcome carrying the exception's type; the
action's audit record is buffered inside the same boundary.

Concurrency: actions on one node run in plan order as one chain (cordon before drain
before terminate); chains run concurrently on a bounded thread pool per provider
(fleet.yaml providers.<name>.max_parallel, default DEFAULT_MAX_PARALLEL by provider type).
Workers never touch the run's Memory: a handler returns its Outcome and an Update (a pure
function Memory -> Memory), and the one thread that called execute() folds the updates in
completion order, so Memory changes are serialised.

Journal: after actions that changed Memory the folding thread persists it (the journal
callback: compare-and-swap on the state object, fenced by the lease) and writes the
buffered audit records as a new chunk, at least every JournalPolicy.every_actions actions
or every_s seconds, at once after a cordon, drain or uncordon that ran a scheduler playbook
(a change no later run can observe), and at the end. Provisions and terminations may wait for the
batch: a killed run's launches carry their launch tags and are adopted from the next
run's inventory, and EC2's ClientToken still dedupes a launch in flight.

Capacity failover (DESIGN.md safety rule 6): a provision action carries its places in the
pool's order; a CapacityError marks that place exhausted with a backoff (10 min, doubling
per consecutive failure, at most 1 h) and the next place is tried. Fallover stops only for
a reason (issue 16 item 2): a PlacementError (the type is not offered in that zone) is
remembered like capacity, saying why, and the next place is tried; a LaunchSpent (EC2
replayed a launch id whose instance is gone) tries the next place (its own launch id) and
moves the pool's next node index past the node, so the next run uses a new name and
launch id. QuotaError ends the pool's provisioning for this run, AuthError the
provider's, TransientError (and any other error) the action's.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable

from navarch import signing
from navarch.errors import (
    AuthError,
    CapacityError,
    LaunchSpent,
    LeaseLost,
    NavarchError,
    PlacementError,
    ProviderError,
    QuotaError,
    RemoteError,
)
from navarch.health import Remedy
from navarch.inventory import TAG_SPEC, Instance, launch_id, ownership_tags
from navarch.planner.model import (
    Action,
    ActionKind,
    Diag,
    DiagState,
    DiagWhy,
    Exhausted,
    Fault,
    Memory,
    NodeMemory,
    Phase,
    Place,
    Plan,
    PoolMemory,
    ts,
)
from navarch.providers.base import Provider, ProvisionRequest
from navarch.reconcile.state import AuditLog
from navarch.spec import FleetSpec, PoolSpec

BACKOFF_BASE_S = 600
BACKOFF_MAX_S = 3600

#: Concurrent actions per provider when fleet.yaml sets no providers.<name>.max_parallel.
#: EC2 refills RunInstances' request bucket at 2 per second (bucket 5) and its instance
#: bucket at 2 per second (bucket 1,000) (EC2 API reference, "Request throttling"); GCE's
#: per-project write quota is a few hundred per minute; Lambda Cloud allows one launch per
#: 12 s. botocore's and google-api-core's own retries back off when throttled.
DEFAULT_MAX_PARALLEL = {"aws": 8, "gcp": 8, "lambda": 1, "local": 4}
#: Actions whose effect no later run can observe when they run a scheduler playbook (a
#: node's cordon/drain state in Slurm or Kubernetes): Memory is journaled at once after each.
UNOBSERVABLE = frozenset({ActionKind.CORDON, ActionKind.DRAIN, ActionKind.UNCORDON})

Update = Callable[[Memory], Memory]


def _same(memory: Memory) -> Memory:
    return memory


def _past_node(pool: str, node: str) -> Update:
    """Raise the pool's next_index past `node` (<fleet>-<pool>-<nnnn>): its name and launch
    ids are spent, the next provision must use a new name."""
    index = int(node.rsplit("-", 1)[1])

    def update(memory: Memory) -> Memory:
        pm = memory.pool(pool)
        return memory.with_pool(replace(pm, next_index=max(pm.next_index, index + 1)))

    return update


def _chain(*updates: Update) -> Update:
    def run(memory: Memory) -> Memory:
        for u in updates:
            memory = u(memory)
        return memory

    return run


def _set_node(nm: NodeMemory) -> Update:
    return lambda memory: memory.with_node(nm)


def _with_fault(nm: NodeMemory, fault: Fault | None, now: datetime, keep_s: int) -> NodeMemory:
    """Record `fault` as the node's fault (issue 13) and, when it is a new occurrence (another
    report than the one recorded), add (key, now) to its fault history; the history keeps
    what falls within keep_s seconds (max of ladder_window and lemon_window)."""
    if fault is None:
        return nm
    history = tuple((k, t) for k, t in nm.faults if (now - t).total_seconds() <= keep_s)
    if nm.fault != fault:
        history += ((fault.key.kind, now),)
    return replace(nm, fault=fault, faults=history, return_streak=0)


@runtime_checkable
class GpuResetter(Protocol):
    """A provider that resets a machine's GPUs itself (the local provider's fake GPUs have
    no SSH); others reset through the reset_gpu playbook. Returns one audit line; raises
    ProviderError when the reset is refused or fails."""

    def reset_gpus(self, instance: Instance) -> str: ...


@runtime_checkable
class Diagnoser(Protocol):
    """A provider that diagnoses a machine's GPUs itself (the local provider's fake GPUs):
    returns (state, detail), state a DiagState value other than due."""

    def diagnose(self, instance: Instance, level: int) -> tuple[str, str]: ...


class _DiagOutcome(Protocol):
    @property
    def value(self) -> str: ...


class _DiagResult(Protocol):
    @property
    def outcome(self) -> _DiagOutcome: ...

    @property
    def detail(self) -> str: ...


@runtime_checkable
class DiagRunner(Protocol):
    """A playbook runner that also runs the diagnostics playbook (navarch.remote.adapter.
    SSHPlaybooks.diagnose, returning a navarch.remote.diagnostics.DiagResult)."""

    def diagnose(self, pool: PoolSpec, node: str, address: str | None, level: int,
                 reason: str) -> _DiagResult: ...


class PlaybookRunner(Protocol):
    """Runs a scheduler playbook (cordon, drain, drain_check, uncordon) for one node.

    Returns (ok, detail). Implemented over SSH by navarch.remote; scheduler "none" has
    no playbooks and never reaches a runner.
    """

    def run(self, pool: PoolSpec, kind: str, node: str, address: str | None,
            reason: str) -> tuple[bool, str]: ...


@dataclass(frozen=True)
class Outcome:
    """What happened to one action. error: the error class name (navarch's or any other
    exception's, e.g. "KeyError"), or None. diag: a DIAGNOSE's DiagState value (running,
    pass, fail, unavailable, error), None for other actions."""

    action: Action
    ok: bool
    detail: str
    error: str | None = None
    diag: str | None = None


@dataclass(frozen=True)
class JournalPolicy:
    """When the executor persists Memory and the audit log during a run.

    every_actions: at most this many Memory-changing actions between two writes (the
    effective count is max(every_actions, plan size / max_writes), so a 100,000-action run
    writes its O(N) state document a bounded number of times, not N/50: quadratic bytes
    otherwise; each write of a 10,000-node state costs about 0.2 s, bench/scale.py);
    every_s: at most this many seconds between writes while actions finish.
    """

    every_actions: int = 50
    every_s: float = 10.0
    max_writes: int = 10

    def batch(self, actions: int) -> int:
        """Actions per write for a plan of `actions` actions."""
        return max(self.every_actions, -(-actions // max(self.max_writes, 1)), 1)


def backoff_s(failures: int) -> int:
    """Capacity backoff for a place after `failures` consecutive capacity errors."""
    return min(BACKOFF_BASE_S * 2 ** max(failures - 1, 0), BACKOFF_MAX_S)


class _Fence(Protocol):
    def check(self) -> None: ...


def _ladder_record(a: Action) -> dict[str, object]:
    """The remediation ladder's part of an audit record, only when set (issue 13): the fault
    answered, the rung, a lemon's mark, the diagnostics level and why."""
    out: dict[str, object] = {}
    if a.fault is not None:
        out["fault"] = a.fault.key.format()
    if a.rung is not None:
        out["rung"] = a.rung.value
    if a.lemon:
        out["lemon"] = True
    if a.level is not None:
        out.update(level=a.level, why=a.why)
    return out


class Executor:
    """Applies plans. providers: provider name -> Provider. user_data: renders a node's
    cloud-init (pool, node, node_key, provider name) -> str, or None for providers that
    take none.

    inventory: every instance this run listed (fresh: a launch id absent from it was never
    launched, so providers may skip their pre-launch lookup; ProvisionRequest.known_absent).
    journal: persists Memory (compare-and-swap, fenced) and returns it as saved; None keeps
    Memory in memory only (the caller saves it). lease: checked before every action.
    max_parallel: provider name -> concurrent actions (default: fleet.yaml's
    providers.<name>.max_parallel, else DEFAULT_MAX_PARALLEL by type); 1 runs in order.
    """

    def __init__(
        self,
        spec: FleetSpec,
        providers: Mapping[str, Provider],
        audit: AuditLog,
        *,
        instances: Mapping[str, Instance],
        inventory: Sequence[Instance] | None = None,
        clock: Callable[[], datetime],
        run_id: str,
        playbooks: PlaybookRunner | None = None,
        user_data: Callable[[PoolSpec, str, bytes, str], str] | None = None,
        fleet_secret: bytes | None = None,
        journal: Callable[[Memory], Memory] | None = None,
        policy: JournalPolicy | None = None,
        lease: _Fence | None = None,
        max_parallel: Mapping[str, int] | None = None,
    ) -> None:
        self.spec = spec
        self.providers = providers
        self.audit = audit
        self.instances = instances  # node -> Instance, from this run's inventory
        self.by_id = {i.instance_id: i for i in inventory or ()}  # every instance listed
        self.launched = frozenset(i.launch_id for i in inventory or () if i.launch_id)
        self.fresh_inventory = inventory is not None
        self.clock = clock
        self.run_id = run_id
        self.playbooks = playbooks
        self.user_data = user_data
        self.fleet_secret = fleet_secret
        self.journal = journal
        self.policy = policy or JournalPolicy()
        self.lease = lease
        self.max_parallel = dict(max_parallel or {})
        self.audit_error: str | None = None  # the last failed audit write, if any
        self._mutex = threading.Lock()
        self._dead_providers: dict[str, str] = {}
        self._quota_pools: dict[tuple[str, str], str] = {}  # (pool, provider) -> message
        self._stop = threading.Event()
        self._stop_reason: BaseException | None = None

    # -- entry point -------------------------------------------------------------------
    def execute(self, plan: Plan, memory: Memory,
                on_outcome: Callable[[Outcome], None] | None = None) -> tuple[Memory, list[Outcome]]:
        """Run every action of plan; returns (Memory with the results, outcomes in the
        order they finished). With a journal, Memory is persisted as described in the
        module docstring and the returned Memory is the last one saved.

        Raises LeaseLost when the lease lapsed or was taken (no action starts after
        that, and nothing more is persisted); errors of the journal itself (StoreError,
        PreconditionFailed) after stopping and letting started actions finish.
        """
        chains = self._chains(plan.actions)
        results: queue.Queue[tuple[Action, Outcome, Update]] = queue.Queue()
        outcomes: list[Outcome] = []
        batch = self.policy.batch(len(plan.actions))
        dirty, since_write, last_write = 0, 0, time.monotonic()
        total = sum(len(c) for c in chains)
        pools: dict[str, ThreadPoolExecutor] = {}
        futures: list[Future[None]] = []
        try:
            for chain in chains:
                provider = self._provider_of(chain[0])
                workers = self._workers(provider)
                if provider not in pools:
                    pools[provider] = ThreadPoolExecutor(
                        max_workers=workers, thread_name_prefix=f"navarch-{provider}")
                futures.append(pools[provider].submit(self._run_chain, chain, memory, results))
            done = 0
            while done < total:
                try:
                    action, outcome, update = results.get(timeout=0.1)
                except queue.Empty:
                    if all(f.done() for f in futures) and results.empty():
                        break  # the rest were not started (stopped)
                    action = None
                if action is not None:
                    done += 1
                    memory = update(memory)
                    outcomes.append(outcome)
                    self._record(action, outcome)
                    if on_outcome:
                        on_outcome(outcome)
                    if update is not _same:
                        dirty += 1
                    since_write += 1
                due = dirty and (since_write >= batch
                                 or time.monotonic() - last_write >= self.policy.every_s
                                 or (action is not None and outcome.ok
                                     and self._unobservable(action)))
                if due and not self._stop.is_set():
                    memory = self._flush(memory)
                    dirty, since_write, last_write = 0, 0, time.monotonic()
        except BaseException:
            self._stop.set()  # e.g. KeyboardInterrupt: start nothing more
            raise
        finally:
            for p in pools.values():
                p.shutdown(wait=True)
        # Outcomes that arrived while stopping still count.
        while not results.empty():
            action, outcome, update = results.get()
            memory = update(memory)
            outcomes.append(outcome)
            self._record(action, outcome)
            if on_outcome:
                on_outcome(outcome)
            dirty += update is not _same
        if isinstance(self._stop_reason, LeaseLost):
            raise self._stop_reason
        if self._stop_reason is None:
            memory = self._flush(memory, final=True) if (dirty or self.audit.pending) else memory
        if self._stop_reason is not None:
            raise self._stop_reason
        return memory, outcomes

    def _flush(self, memory: Memory, final: bool = False) -> Memory:
        """Persist Memory (journal) then the audit chunk. A journal error stops the run
        (no action starts after it); an audit error is kept and retried next time."""
        if self.journal is not None:
            try:
                memory = self.journal(memory)
            except BaseException as exc:
                self._stop_reason = exc
                self._stop.set()
                if final:
                    raise
                return memory
        try:
            self.audit.flush()
            self.audit_error = None
        except NavarchError as exc:
            self.audit_error = f"audit log chunk not written to {self.audit.prefix}*: {exc}"
        return memory

    def _unobservable(self, a: Action) -> bool:
        """True when the action ran a scheduler playbook: a change (cordon, drain,
        uncordon in Slurm or Kubernetes) no later run can see, so it is journaled at once.
        With scheduler none the change lives only in Memory and a lost record only means
        the next run plans it again."""
        if a.kind not in UNOBSERVABLE:
            return False
        try:
            pool = self.spec.pool(a.pool)
        except KeyError:
            return True
        return pool.scheduler != "none" or a.kind.value in pool.playbooks

    def _record(self, action: Action, outcome: Outcome) -> None:
        self.audit.append({
            "time": ts(self.clock()), "run_id": self.run_id, "action": action.kind.value,
            "pool": action.pool, "node": action.node, "instance_id": action.instance_id,
            "reason": action.reason, "ok": outcome.ok, "detail": outcome.detail,
            "error": outcome.error, **_ladder_record(action),
        })

    def _chains(self, actions: Sequence[Action]) -> list[list[Action]]:
        """Actions grouped by node (or by pool for pool-level actions), in plan order."""
        chains: dict[tuple[str, str], list[Action]] = {}
        for a in actions:
            key = ("node", a.node) if a.node else ("pool", a.pool)
            chains.setdefault(key, []).append(a)
        return list(chains.values())

    def _provider_of(self, a: Action) -> str:
        inst = self._instance(a)
        if inst is not None:
            return inst.provider
        if a.places:
            try:
                return self.spec.pool(a.pool).placed()[a.places[0].placement].provider
            except (KeyError, IndexError):
                return ""
        try:
            return self.spec.pool(a.pool).provider
        except KeyError:
            return ""

    def _workers(self, provider: str) -> int:
        if provider in self.max_parallel:
            return max(1, self.max_parallel[provider])
        conf = self.spec.providers.get(provider, {})
        value = conf.get("max_parallel") or DEFAULT_MAX_PARALLEL.get(str(conf.get("type")), 4)
        return max(1, int(value))

    def _run_chain(self, chain: list[Action], memory: Memory,
                   results: queue.Queue[tuple[Action, Outcome, Update]]) -> None:
        """Run one node's actions in order (a worker thread); post each result."""
        for a in chain:
            if self._stop.is_set():
                return
            if self.lease is not None:
                try:
                    self.lease.check()
                except LeaseLost as exc:
                    with self._mutex:
                        if self._stop_reason is None:
                            self._stop_reason = exc
                    self._stop.set()
                    return
            try:
                outcome, update = self._one(a, memory)
            except Exception as exc:  # the action boundary: any failure is an outcome
                outcome, update = Outcome(a, False, f"{type(exc).__name__}: {exc}",
                                          type(exc).__name__), _same
            try:
                memory = update(memory)
            except Exception as exc:
                outcome, update = Outcome(a, False, f"{type(exc).__name__}: {exc}",
                                          type(exc).__name__), _same
            results.put((a, outcome, update))

    def _one(self, a: Action, memory: Memory) -> tuple[Outcome, Update]:
        handler = self.HANDLERS[a.kind]
        return handler(self, a, memory)

    # -- actions: one handler per ActionKind (HANDLERS below) ----------------------------
    # A handler runs on a worker thread: it reads `memory` (the run's Memory as of the
    # chain's start plus the chain's own earlier updates) and returns its Outcome and an
    # Update; it must not touch other nodes' entries, and pool-level changes belong inside
    # the Update (other workers change the same pool meanwhile).

    def _scale(self, a: Action, memory: Memory) -> tuple[Outcome, Update]:
        pool = self.spec.pool(a.pool)
        now = self.clock()

        def update(m: Memory) -> Memory:
            return m.with_pool(replace(m.pool(a.pool), desired=a.desired,
                                       desired_from_target=pool.target_nodes, scaled_at=now))

        return Outcome(a, True, f"desired {a.desired}"), update

    def _provision(self, a: Action, memory: Memory) -> tuple[Outcome, Update]:
        """Launch the node in the first place that takes it, trying the action's places in
        order (zone, then type, then placement: issue 15). Capacity and placement errors
        back that place off and go on; a quota or auth error bars that provider for the
        rest of the run (the action ends there when the pool has one placement)."""
        pool = self.spec.pool(a.pool)
        assert a.node is not None
        multi = len(pool.placed()) > 1
        tried: list[str] = []
        not_offered = 0  # places of `tried` that failed for another reason than capacity
        updates: list[Update] = []
        barred: tuple[str, str] | None = None  # (error class, message) of a quota/auth bar
        barred_places = 0  # places of `tried` skipped for a bar
        for place in a.places:
            provider = pool.placed()[place.placement].provider
            bar = self._barred(a.pool, provider)
            if bar is None:
                try:
                    inst = self._launch(a, pool, place, provider)
                except (CapacityError, PlacementError) as exc:
                    updates.append(self._exhausted(a.pool, place.zone, place.instance_type,
                                                   place.spot, provider))
                    offered = isinstance(exc, CapacityError)
                    tried.append(f"{place.label()}: {'' if offered else 'not offered here: '}"
                                 f"{exc}")
                    not_offered += not offered
                    continue
                except LaunchSpent as exc:
                    updates.append(_past_node(a.pool, a.node))
                    tried.append(f"{place.label()}: launch id spent: {exc}")
                    not_offered += 1
                    continue
                except (QuotaError, AuthError) as exc:
                    bar = self._bar(a.pool, provider, exc)
                except ProviderError as exc:
                    return (Outcome(a, False, f"{place.label()}: {exc}", type(exc).__name__),
                            _chain(*updates))
                else:
                    return self._launched(a, pool, place, inst, tried, not_offered, updates)
            barred = barred or bar
            if not multi:
                break
            tried.append(f"{place.label()}: {bar[1]}")
            barred_places += 1
        if barred is not None and (not multi or barred_places == len(tried)):
            return Outcome(a, False, barred[1], barred[0]), _chain(*updates)
        if not_offered:
            return (Outcome(a, False, "no place could take it: " + "; ".join(tried),
                            "PlacementError"), _chain(*updates))
        return Outcome(a, False, "no capacity: " + "; ".join(tried), "CapacityError"), _chain(*updates)

    def _barred(self, pool: str, provider: str) -> tuple[str, str] | None:
        """(error class, message) when this run already met an auth error on the provider
        or a quota error for the pool on it; None when launches may go on."""
        with self._mutex:
            dead = self._dead_providers.get(provider)
            quota = self._quota_pools.get((pool, provider))
        if dead is not None:
            return "AuthError", dead
        if quota is not None:
            return "QuotaError", quota
        return None

    def _bar(self, pool: str, provider: str, exc: QuotaError | AuthError) -> tuple[str, str]:
        """Remember a quota error (for the pool on that provider) or an auth error (for
        the provider) for the rest of the run -> (error class, message)."""
        with self._mutex:
            if isinstance(exc, QuotaError):
                self._quota_pools[(pool, provider)] = f"quota: {exc}"
                return "QuotaError", f"quota: {exc}"
            self._dead_providers[provider] = f"provider {provider}: {exc}"
            return "AuthError", f"auth: {exc}"

    def _launch(self, a: Action, pool: PoolSpec, place: Place, provider: str) -> Instance:
        """One launch request in one place (tags, launch id, user-data of that placement)."""
        assert a.node is not None
        user_data = ""
        if self.user_data is not None and self.fleet_secret is not None:
            key = signing.derive_node_key(self.fleet_secret, self.spec.name, a.node)
            user_data = self.user_data(pool, a.node, key, provider)
        lid = launch_id(self.spec.name, a.node, place.attempt)
        tags = {**dict(pool.labels), **ownership_tags(self.spec.name, pool.name, a.node, lid),
                TAG_SPEC: pool.launch_hash(place.placement)}
        request = ProvisionRequest(
            fleet=self.spec.name, pool=pool.name, node=a.node, zone=place.zone,
            instance_type=place.instance_type, spot=place.spot, launch_id=lid,
            attempt=place.attempt, tags=tags, user_data=user_data,
            options=pool.placed()[place.placement].options,
            known_absent=self.fresh_inventory and lid not in self.launched,
        )
        return self.providers[provider].provision(request)

    def _launched(self, a: Action, pool: PoolSpec, place: Place, inst: Instance,
                  tried: list[str], not_offered: int, updates: list[Update]
                  ) -> tuple[Outcome, Update]:
        """The outcome of a launch that took, and its Memory update (the node with its
        launch settings; the place's backoff cleared; next_index raised)."""
        assert a.node is not None
        index = int(a.node.rsplit("-", 1)[1])
        nm = NodeMemory(node=a.node, pool=a.pool, instance_id=inst.instance_id,
                        first_seen_at=self.clock(), launch=pool.launch_settings(place.placement))
        here = (inst.provider, place.zone, place.instance_type, place.spot)

        def launched(m: Memory) -> Memory:
            pm = m.pool(a.pool)
            pm = replace(pm, next_index=max(pm.next_index, index + 1),
                         exhausted=tuple(e for e in pm.exhausted
                                         if (e.provider, e.zone,
                                             e.instance_type, e.spot) != here))
            return m.with_pool(pm).with_node(nm)

        why = "without capacity" if not not_offered else "that could not take it"
        where = place.label() + (f" after {len(tried)} place(s) {why}" if tried else "")
        return Outcome(a, True, f"{inst.instance_id} in {where}"), _chain(*updates, launched)

    def _exhausted(self, pool: str, zone: str, itype: str, spot: bool, provider: str
                   ) -> Update:
        """Back off one place (provider, zone, type, spot): 10 min, doubling per failure."""
        now = self.clock()

        def update(memory: Memory) -> Memory:
            pm = memory.pool(pool)
            key = (provider, zone, itype, spot)
            prev = next((e for e in pm.exhausted
                         if (e.provider, e.zone, e.instance_type, e.spot) == key),
                        None)
            failures = prev.failures + 1 if prev else 1
            entry = Exhausted(zone, itype, spot, now + timedelta(seconds=backoff_s(failures)),
                              failures, provider=provider)
            rest = tuple(e for e in pm.exhausted if e is not prev)
            return memory.with_pool(replace(pm, exhausted=rest + (entry,)))

        return update

    def _node_memory(self, a: Action, memory: Memory) -> NodeMemory:
        assert a.node is not None
        return memory.node(a.node) or NodeMemory(node=a.node, pool=a.pool, first_seen_at=self.clock())

    def _playbook(self, a: Action, kind: str) -> tuple[bool, str]:
        pool = self.spec.pool(a.pool)
        if pool.scheduler == "none" and kind not in pool.playbooks:
            return True, "recorded in navarch (scheduler none)"
        if self.playbooks is None:
            return False, f"no playbook runner for scheduler {pool.scheduler}"
        inst = self.instances.get(a.node or "")
        try:
            return self.playbooks.run(pool, kind, a.node or "", inst.address if inst else None, a.reason)
        except RemoteError as exc:
            return False, str(exc)

    def _cordon(self, a: Action, memory: Memory) -> tuple[Outcome, Update]:
        ok, detail = self._playbook(a, "cordon")
        if not ok:
            return Outcome(a, False, detail, "RemoteError"), _same
        now = self.clock()
        scheduled = a.why == DiagWhy.SCHEDULED.value
        nm = replace(self._node_memory(a, memory), phase=Phase.CORDONED, phase_at=now,
                     phase_reason=a.reason, repair=a.repair, diag_cordon=scheduled)
        if scheduled:  # issue 13: out for scheduled diagnostics, returned after them
            nm = replace(nm, diag=Diag(a.level or 1, DiagWhy.SCHEDULED, DiagState.DUE, now))
        # The fault this cordon answers, or none: a fault remembered from an earlier cordon
        # must not make the ladder remedy a node cordoned for another reason.
        nm = (_with_fault(nm, a.fault, now, self._fault_keep_s(a.pool)) if a.fault is not None
              else replace(nm, fault=None))

        host = self._host_fault(a, memory, now)

        def update(m: Memory) -> Memory:
            m = host(m.with_node(nm))
            if a.repair:
                pm = m.pool(a.pool)
                m = m.with_pool(replace(pm, repairs=self._recent(pm, now) + (now,)))
            return m

        return Outcome(a, True, detail), update

    def _host_fault(self, a: Action, memory: Memory, now: datetime) -> Update:
        """Count a new fault occurrence against the node's physical host (issue 13), where
        the cloud exposes one (Instance.host_id): PoolMemory.host_faults, kept as long as
        the node's own history. A fault already recorded for the node is not counted again."""
        inst = self._instance(a)
        known = memory.node(a.node or "")
        if a.fault is None or inst is None or inst.host_id is None or (
                known is not None and known.fault == a.fault):
            return _same
        host, key, keep_s = inst.host_id, a.fault.key.kind, self._fault_keep_s(a.pool)

        def update(m: Memory) -> Memory:
            pm = m.pool(a.pool)
            kept = tuple(f for f in pm.host_faults if (now - f[2]).total_seconds() <= keep_s)
            return m.with_pool(replace(pm, host_faults=kept + ((host, key, now),)))

        return update

    def _fault_keep_s(self, pool: str) -> int:
        """How long a node's fault history is kept: max(ladder_window, lemon_window)."""
        try:
            h = self.spec.pool(pool).health
        except KeyError:
            return 0
        return max(h.ladder_window_s, h.lemon_window_s)

    @staticmethod
    def _recent(pm: PoolMemory, now: datetime) -> tuple[datetime, ...]:
        return tuple(r for r in pm.repairs if (now - r).total_seconds() < 3600)

    def _drain(self, a: Action, memory: Memory) -> tuple[Outcome, Update]:
        nm = self._node_memory(a, memory)
        if nm.phase is not Phase.CORDONED:
            return Outcome(a, False, "not cordoned (its cordon failed this run)", "Skipped"), _same
        ok, detail = self._playbook(a, "drain")
        if not ok:
            return Outcome(a, False, detail, "RemoteError"), _same
        nm = replace(nm, phase=Phase.DRAINING, phase_at=self.clock())
        return Outcome(a, True, detail if detail else "drain started"), _set_node(nm)

    def _instance(self, a: Action) -> Instance | None:
        """The action's instance: by its instance id when the plan names one (a duplicate's
        extra instance shares the node name), else the node's instance."""
        if a.instance_id is not None and a.instance_id in self.by_id:
            return self.by_id[a.instance_id]
        return self.instances.get(a.node or "")

    def _terminate(self, a: Action, memory: Memory) -> tuple[Outcome, Update]:
        inst = self._instance(a)
        if inst is None:
            return Outcome(a, True, "already gone"), _same
        try:
            # The instance's own provider: an orphan's pool, or a drifted node's old
            # provider, may no longer be in the spec.
            self.providers[inst.provider].terminate([inst])
        except ProviderError as exc:
            return Outcome(a, False, str(exc), type(exc).__name__), _same
        backoff = (self._exhausted(a.pool, inst.zone, inst.instance_type, inst.spot,
                                   inst.provider)
                   if a.backoff else _same)
        known = memory.node(a.node or "")
        if known is not None and known.instance_id not in (None, inst.instance_id):
            # A duplicate's extra instance: the node itself stays as it is.
            return Outcome(a, True, f"terminated extra instance {inst.instance_id}"), backoff
        nm = replace(self._node_memory(a, memory), phase=Phase.TERMINATING, phase_at=self.clock(),
                     phase_reason=a.reason)
        lemon = self._lemon(a.pool, inst.instance_id, inst.host_id) if a.lemon else _same
        return (Outcome(a, True, f"terminated {inst.instance_id}"),
                _chain(backoff, lemon, _set_node(nm)))

    @staticmethod
    def _lemon(pool: str, instance_id: str, host_id: str | None = None) -> Update:
        """Remember a lemon's instance id in its pool (uncordon refuses it without --force),
        and its physical host where the cloud exposes one (shown in status)."""

        def update(memory: Memory) -> Memory:
            pm = memory.pool(pool)
            if instance_id not in pm.lemons:
                pm = replace(pm, lemons=pm.lemons + (instance_id,))
            if host_id is not None and host_id not in pm.lemon_hosts:
                pm = replace(pm, lemon_hosts=pm.lemon_hosts + (host_id,))
            return memory.with_pool(pm)

        return update

    def _reboot(self, a: Action, memory: Memory) -> tuple[Outcome, Update]:
        """The ladder's reboot (issue 13): Provider.reboot on the node's instance; the node
        enters phase REMEDIATING with the rung and the fault it answers. A reboot that
        carries repair=True (a fault again after a reboot) counts toward the hourly limit."""
        inst, nm, refused = self._remediable(a, memory, "reboot")
        if refused is not None:
            return refused, _same
        assert inst is not None and nm is not None
        try:
            self.providers[inst.provider].reboot([inst])
        except ProviderError as exc:
            return Outcome(a, False, str(exc), type(exc).__name__), _same
        return (Outcome(a, True, f"rebooted {inst.instance_id} through provider {inst.provider}"),
                self._remedied(a, nm, Remedy.REBOOT, memory))

    def _reset_gpu(self, a: Action, memory: Memory) -> tuple[Outcome, Update]:
        """The ladder's GPU reset (issue 13): the pool's reset_gpu playbook on the node
        (built in: playbooks/reset_gpu.yaml, `nvidia-smi -r`, refused on the node while GPU
        processes remain), or, for a provider whose machines have no SSH (the local
        provider's fake GPUs), its reset_gpus. The node enters phase REMEDIATING with rung
        reset_gpu and keeps its boot: reports made after the reset decide (observe's
        after_remedy). A failed or refused reset changes nothing; a later run retries."""
        inst, nm, refused = self._remediable(a, memory, "reset")
        if refused is not None:
            return refused, _same
        assert inst is not None and nm is not None
        provider = self.providers[inst.provider]
        if isinstance(provider, GpuResetter):
            try:
                detail = provider.reset_gpus(inst)
            except ProviderError as exc:
                return Outcome(a, False, str(exc), type(exc).__name__), _same
        else:
            if self.playbooks is None:
                return Outcome(a, False, "no playbook runner: a GPU reset runs the reset_gpu "
                               "playbook over SSH (pools.<pool>.ssh)", "RemoteError"), _same
            try:
                ok, detail = self.playbooks.run(self.spec.pool(a.pool), "reset_gpu",
                                                a.node or "", inst.address, a.reason)
            except RemoteError as exc:
                ok, detail = False, str(exc)
            if not ok:
                return Outcome(a, False, detail, "RemoteError"), _same
        return Outcome(a, True, detail), self._remedied(a, nm, Remedy.RESET_GPU, memory)

    def _remediable(self, a: Action, memory: Memory, verb: str
                    ) -> tuple[Instance | None, NodeMemory | None, Outcome | None]:
        """The instance and memory of a node the ladder remedies in place, or the refusal
        (no instance; not drained: only a DRAINING or REMEDIATING node is rebooted or reset)."""
        inst = self._instance(a)
        if inst is None:
            return None, None, Outcome(a, False, f"no instance to {verb}", "NotFound")
        nm = self._node_memory(a, memory)
        if nm.phase not in (Phase.DRAINING, Phase.REMEDIATING):
            return None, None, Outcome(a, False, f"not drained (phase {nm.phase.value or 'none'})",
                                       "Skipped")
        return inst, nm, None

    def _remedied(self, a: Action, nm: NodeMemory, rung: Remedy, memory: Memory) -> Update:
        """Memory after an in-place remedy: phase REMEDIATING, the rung and the fault it
        answers (a new occurrence joins the fault history), return_streak from 0; a remedy
        with repair=True counts toward the hourly repair limit."""
        now = self.clock()
        nm = _with_fault(nm, a.fault, now, self._fault_keep_s(a.pool))
        nm = replace(nm, phase=Phase.REMEDIATING, phase_at=now, phase_reason=a.reason,
                     rung=a.rung or rung, rung_fault=a.fault.key.kind if a.fault else nm.rung_fault,
                     rung_at=now, return_streak=0, diag_cordon=False)

        host = self._host_fault(a, memory, now)

        def update(m: Memory) -> Memory:
            m = host(m.with_node(nm))
            if a.repair:
                pm = m.pool(a.pool)
                m = m.with_pool(replace(pm, repairs=self._recent(pm, now) + (now,)))
            return m

        return update

    def _diagnose(self, a: Action, memory: Memory) -> tuple[Outcome, Update]:
        """Active diagnostics on a cordoned node (issue 13): the pool's diagnostics playbook
        (built in: playbooks/diagnostics.yaml, `dcgmi diag -r LEVEL -j` started detached on
        the node; a later run's DIAGNOSE collects its JSON), or a provider's own diagnose
        (the local provider's fake GPUs). Never waits for the diagnostics: one SSH round
        trip per run. Records a Diag in Memory (running, pass, fail, unavailable, error);
        the planner decides what it means. ok is False only for error (no verdict)."""
        inst, nm, refused = self._remediable(a, memory, "diagnose")
        if refused is not None:
            return refused, _same
        assert inst is not None and nm is not None
        level, why = a.level or 1, DiagWhy(a.why or DiagWhy.RETURN.value)
        provider = self.providers[inst.provider]
        if isinstance(provider, Diagnoser):
            state, detail = provider.diagnose(inst, level)
        elif isinstance(self.playbooks, DiagRunner):
            result = self.playbooks.diagnose(self.spec.pool(a.pool), a.node or "",
                                             inst.address, level, a.reason)
            state, detail = result.outcome.value, result.detail
        else:
            state, detail = "error", "no diagnostics runner: diagnostics run over SSH"
        now = self.clock()
        prev = nm.diag
        running = (prev is not None and prev.state is DiagState.RUNNING and prev.level == level
                   and prev.why is why)
        started = prev.started_at if running and prev is not None else now
        diag = Diag(level, why, DiagState(state), now, started, detail)
        nm = replace(nm, diag=diag)
        return (Outcome(a, diag.state is not DiagState.ERROR, f"dcgmi diag -r {level}: "
                        f"{diag.state.value}" + (f": {detail}" if detail else ""),
                        None if diag.state is not DiagState.ERROR else "DiagError",
                        diag.state.value),
                _set_node(nm))

    def _update_tags(self, a: Action, memory: Memory) -> tuple[Outcome, Update]:
        inst = self._instance(a)
        if inst is None:
            return Outcome(a, True, "already gone"), _same
        try:
            self.providers[inst.provider].update_tags(inst, dict(a.tags))
        except ProviderError as exc:
            return Outcome(a, False, str(exc), type(exc).__name__), _same
        tags = ", ".join(f"{k}={v}" for k, v in a.tags)
        return Outcome(a, True, f"tags set on {inst.instance_id}: {tags}"), _same

    def _uncordon(self, a: Action, memory: Memory) -> tuple[Outcome, Update]:
        ok, detail = self._playbook(a, "uncordon")
        if not ok:
            return Outcome(a, False, detail, "RemoteError"), _same
        nm = replace(self._node_memory(a, memory), phase=Phase.NONE, phase_at=self.clock(),
                     phase_reason="", repair=False, streak=0, return_streak=0, operator_cordon="",
                     diag_cordon=False)
        return Outcome(a, True, detail), _set_node(nm)

    #: ActionKind -> handler(self, action, memory) -> (Outcome, Update). A new kind adds
    #: one method and one entry here.
    HANDLERS: Mapping[ActionKind, Callable[[Executor, Action, Memory], tuple[Outcome, Update]]] = {
        ActionKind.SCALE: _scale,
        ActionKind.PROVISION: _provision,
        ActionKind.CORDON: _cordon,
        ActionKind.DRAIN: _drain,
        ActionKind.TERMINATE: _terminate,
        ActionKind.UNCORDON: _uncordon,
        ActionKind.UPDATE_TAGS: _update_tags,
        ActionKind.REBOOT: _reboot,
        ActionKind.RESET_GPU: _reset_gpu,
        ActionKind.DIAGNOSE: _diagnose,
    }

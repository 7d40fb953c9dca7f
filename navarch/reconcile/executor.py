"""The executor's engine: the only place that changes the world, by running a Plan's
actions through their handlers (navarch.reconcile.handlers, one per ActionKind).

It runs the actions, records one outcome per action in the audit log and in Memory, and
keeps going when an action fails (kopf's "outcome, not exception" style): a failed action
is retried by a later run, because every run re-observes and re-plans (level-triggered).

Action boundary: every exception an action raises (a navarch error or any other, e.g. a
KeyError from a provider bug) becomes a failed Outcome carrying the exception; the
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
run's inventory, and EC2's ClientToken still dedupes a launch in flight. When the run
stops early (the lease lost, a journal write failed, an interrupt) the buffered audit
records are still written: chunks are new objects of this run alone, safe without the
lease; only the state write is skipped.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from navarch.actor import Actor, ActorKind
from navarch.errors import CapacityError, LeaseLost, NavarchError, PlacementError
from navarch.fleet.spec import FleetSpec, PoolSpec, Scheduler
from navarch.history import Trigger, report_ref
from navarch.inventory import Instance
from navarch.outcome import Outcome
from navarch.planner.model import Action, ActionKind, Memory, Plan
from navarch.planner.modes import Would
from navarch.planner.payloads import (
    CordonPayload,
    DiagnosePayload,
    ProvisionPayload,
    RemedyPayload,
    TerminatePayload,
)
from navarch.providers.base import Provider
from navarch.reconcile.handlers import (
    Diagnoser,
    DiagRunner,
    GpuResetter,
    Handlers,
    PlaybookRunner,
)
from navarch.reconcile.state import AuditLog
from navarch.reconcile.updates import Update, same
from navarch.report.timefmt import ts
from navarch.textsafe import node_text

__all__ = [
    "DEFAULT_MAX_PARALLEL",
    "DiagRunner",
    "Diagnoser",
    "Executor",
    "GpuResetter",
    "JournalPolicy",
    "PlaybookRunner",
]

#: What a worker hands back per action: the action, its outcome and its Memory update.
_Results = queue.Queue[tuple[Action, Outcome, Update]]

#: Concurrent actions per provider when fleet.yaml sets no providers.<name>.max_parallel.
#: EC2 refills RunInstances' request bucket at 2 per second (bucket 5) and its instance
#: bucket at 2 per second (bucket 1,000) (EC2 API reference, "Request throttling"); GCE's
#: per-project write quota is a few hundred per minute; Lambda Cloud allows one launch per
#: 12 s. botocore's and google-api-core's own retries back off when throttled.
DEFAULT_MAX_PARALLEL = {"aws": 8, "gcp": 8, "lambda": 1, "local": 4}
#: Actions whose effect no later run can observe when they run a scheduler playbook (a
#: node's cordon/drain state in Slurm or Kubernetes): Memory is journaled at once after each.
UNOBSERVABLE = frozenset({ActionKind.CORDON, ActionKind.DRAIN, ActionKind.UNCORDON})


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


class _Fence(Protocol):
    def check(self) -> None: ...


def _ladder_record(a: Action) -> dict[str, object]:
    """The remediation ladder's part of an audit record, only when set: the fault
    answered, the rung, a lemon's mark, the diagnostics level and why."""
    out: dict[str, object] = {}
    p = a.payload
    if a.fault is not None:
        out["fault"] = a.fault.key.format()
    if isinstance(p, RemedyPayload):
        out["rung"] = p.rung.value
    if isinstance(p, TerminatePayload) and p.lemon:
        out["lemon"] = True
    if isinstance(p, CordonPayload | DiagnosePayload) and p.level is not None:
        out.update(level=p.level, why=p.why.value if p.why is not None else "")
    return out


def host_record(inst: Instance | None) -> dict[str, object]:
    """Where the action's instance sits, only when its cloud says: its physical host
    (Instance.host_id) and topology (coarse to fine), capped as node text."""
    out: dict[str, object] = {}
    if inst is not None and inst.host_id:
        out["host"] = node_text(inst.host_id)
    if inst is not None and inst.topology:
        out["topology"] = [node_text(t) for t in inst.topology]
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
    trigger, verb: how this run's actions were asked for, recorded with each
    (navarch.history); replace: nodes named by `apply --replace`, whose actions are recorded
    as Trigger.REPLACE. by: who acted (navarch.actor), recorded as `by`; an MCP client is
    also recorded as `client`.
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
        trigger: Trigger = Trigger.SCHEDULED,
        verb: str = "",
        replace: frozenset[str] = frozenset(),
        by: Actor | None = None,
    ) -> None:
        self.spec = spec
        self.by = by
        self.trigger = trigger
        self.verb = verb
        self.replace = replace
        self._reports: dict[str, dict[str, object] | None] = {}
        self.audit = audit
        self.clock = clock
        self.run_id = run_id
        self.handlers = Handlers(
            spec,
            providers,
            instances=instances,
            inventory=inventory,
            clock=clock,
            playbooks=playbooks,
            user_data=user_data,
            fleet_secret=fleet_secret,
        )
        self.journal = journal
        self.policy = policy or JournalPolicy()
        self.lease = lease
        self.max_parallel = dict(max_parallel or {})
        self.audit_error: str | None = None  # the last failed audit write, if any
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._stop_reason: BaseException | None = None

    # -- entry point -------------------------------------------------------------------
    def execute(
        self, plan: Plan, memory: Memory, on_outcome: Callable[[Outcome], None] | None = None
    ) -> tuple[Memory, list[Outcome]]:
        """Run every action of plan; returns (Memory with the results, outcomes in the
        order they finished). With a journal, Memory is persisted as described in the
        module docstring and the returned Memory is the last one saved.

        Raises LeaseLost when the lease lapsed or was taken (no action starts after
        that, and nothing more is persisted); errors of the journal itself (StoreError,
        PreconditionFailed) after stopping and letting started actions finish.
        """
        chains = self._chains(plan.actions)
        acted = {a.node for a in plan.actions + tuple(w.action for w in plan.would) if a.node}
        self._reports = {v.node: report_ref(v.summary) for v in plan.views if v.node in acted}
        for w in plan.would:  # on record beside what was done, for `navarch report`
            self._record_would(w)
        results: _Results = queue.Queue()
        outcomes: list[Outcome] = []
        pools: dict[str, ThreadPoolExecutor] = {}
        try:
            futures = self._submit(chains, memory, results, pools)
            memory, dirty = self._collect(
                memory,
                results,
                futures,
                outcomes,
                on_outcome,
                total=sum(len(c) for c in chains),
                batch=self.policy.batch(len(plan.actions)),
            )
        except BaseException:
            self._stop.set()  # e.g. KeyboardInterrupt: start nothing more
            for p in pools.values():
                p.shutdown(wait=True)
            self._flush_audit()  # what was done stays on record, whatever stops the run
            raise
        finally:
            for p in pools.values():
                p.shutdown(wait=True)
        # Outcomes that arrived while stopping still count.
        while not results.empty():
            action, outcome, update = results.get()
            memory = self._took(memory, action, outcome, update, outcomes, on_outcome)
            dirty += update is not same
        if self._stop_reason is None:
            memory = self._flush(memory, final=True) if (dirty or self.audit.pending) else memory
        if self._stop_reason is not None:
            # Lease lost or a journal write failed: no state write, but the audit chunks
            # are new objects of this run alone, safe to write without the lease.
            self._flush_audit()
            raise self._stop_reason
        return memory, outcomes

    def _submit(
        self,
        chains: list[list[Action]],
        memory: Memory,
        results: _Results,
        pools: dict[str, ThreadPoolExecutor],
    ) -> list[Future[None]]:
        """Start every chain on its provider's worker pool (made on first use, into pools)."""
        futures: list[Future[None]] = []
        for chain in chains:
            provider = self._provider_of(chain[0])
            workers = self._workers(provider)
            if provider not in pools:
                pools[provider] = ThreadPoolExecutor(
                    max_workers=workers, thread_name_prefix=f"navarch-{provider}"
                )
            futures.append(pools[provider].submit(self._run_chain, chain, memory, results))
        return futures

    def _collect(
        self,
        memory: Memory,
        results: _Results,
        futures: Sequence[Future[None]],
        outcomes: list[Outcome],
        on_outcome: Callable[[Outcome], None] | None,
        *,
        total: int,
        batch: int,
    ) -> tuple[Memory, int]:
        """Take outcomes as they finish until all `total` arrived or no chain runs any more,
        writing Memory after `batch` outcomes, after policy.every_s, or at once after an
        action no later look can confirm; returns Memory and its changes not yet written."""
        dirty, since_write, last_write = 0, 0, time.monotonic()
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
                memory = self._took(memory, action, outcome, update, outcomes, on_outcome)
                if update is not same:
                    dirty += 1
                since_write += 1
            due = dirty and (
                since_write >= batch
                or time.monotonic() - last_write >= self.policy.every_s
                or (action is not None and outcome.ok and self._unobservable(action))
            )
            if due and not self._stop.is_set():
                memory = self._flush(memory)
                dirty, since_write, last_write = 0, 0, time.monotonic()
        return memory, dirty

    def _took(
        self,
        memory: Memory,
        action: Action,
        outcome: Outcome,
        update: Update,
        outcomes: list[Outcome],
        on_outcome: Callable[[Outcome], None] | None,
    ) -> Memory:
        """Fold one finished action into Memory, the outcomes, the audit log and the caller."""
        memory = update(memory)
        outcomes.append(outcome)
        self._record(action, outcome)
        if on_outcome:
            on_outcome(outcome)
        return memory

    def _flush_audit(self) -> None:
        """Write the buffered audit records as a chunk; a failure is kept in audit_error."""
        try:
            self.audit.flush()
            self.audit_error = None
        except NavarchError as exc:
            self.audit_error = f"audit log chunk not written to {self.audit.prefix}*: {exc}"

    def _flush(self, memory: Memory, final: bool = False) -> Memory:
        """Persist Memory (journal) then the audit chunk. A journal error stops the run
        (no action starts after it); an audit error is kept and retried next time."""
        if self.journal is not None:
            try:
                memory = self.journal(memory)
            except BaseException as exc:
                self._stop_reason = exc
                self._stop.set()
                self._flush_audit()
                if final:
                    raise
                return memory
        self._flush_audit()
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
        return pool.scheduler is not Scheduler.NONE or a.kind.value in pool.playbooks

    def _record(self, action: Action, outcome: Outcome) -> None:
        asked = {action.node, action.replaces} & self.replace
        trigger = Trigger.REPLACE if asked and self.trigger is Trigger.SCHEDULED else self.trigger
        who: dict[str, object] = {"actor": trigger.value}
        if self.verb:
            who["verb"] = self.verb
        if self.by is not None:
            who["by"] = self.by.to_json()
            if self.by.kind is ActorKind.MCP:
                who["client"] = self.by.name
        if action.replaces:
            who["replaces"] = action.replaces
        self.audit.append(
            {
                "time": ts(self.clock()),
                "run_id": self.run_id,
                "action": action.kind.value,
                "pool": action.pool,
                "node": action.node,
                "instance_id": action.instance_id,
                "reason": action.reason,
                "ok": outcome.ok,
                "outcome": outcome.kind.value,
                "detail": outcome.detail,
                "error": outcome.error,
                "report": self._reports.get(action.node or ""),
                **who,
                **_ladder_record(action),
                **host_record(self.handlers.instance(action)),
            }
        )

    def _record_would(self, w: Would) -> None:
        """One audit record for an action a pool's mode held back: the action's fields
        as a done action's, ok false, outcome "would" and `would` the mode that held it."""
        a = w.action
        self.audit.append(
            {
                "time": ts(self.clock()),
                "run_id": self.run_id,
                "action": a.kind.value,
                "pool": a.pool,
                "node": a.node,
                "instance_id": a.instance_id,
                "reason": a.reason,
                "ok": False,
                "outcome": "would",
                "detail": f"not done: {w.headline} (pool mode {w.mode})",
                "error": None,
                "report": self._reports.get(a.node or ""),
                "actor": self.trigger.value,
                "would": w.mode.value,
                **({"replaces": a.replaces} if a.replaces else {}),
                **({"by": self.by.to_json()} if self.by is not None else {}),
                **({"fault": w.fault} if w.fault else {}),
                **_ladder_record(a),
                **host_record(self.handlers.instance(a)),
            }
        )

    def _chains(self, actions: Sequence[Action]) -> list[list[Action]]:
        """Actions grouped by node (or by pool for pool-level actions), in plan order; a
        termination that waits for its replacement's launch (Action.after) joins the end
        of that node's chain (its own when the plan launches no such node)."""
        chains: dict[tuple[str, str], list[Action]] = {}
        waiting = [a for a in actions if a.after]
        for a in actions:
            if not a.after:
                key = ("node", a.node) if a.node else ("pool", a.pool)
                chains.setdefault(key, []).append(a)
        for a in waiting:
            key = ("node", a.after) if ("node", a.after) in chains else ("node", a.node or "")
            chains.setdefault(key, []).append(a)
        return list(chains.values())

    def _provider_of(self, a: Action) -> str:
        inst = self.handlers.instance(a)
        if inst is not None:
            return inst.provider
        places = a.payload.places if isinstance(a.payload, ProvisionPayload) else ()
        if places:
            try:
                return self.spec.pool(a.pool).placed()[places[0].placement].provider
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

    def _run_chain(
        self,
        chain: list[Action],
        memory: Memory,
        results: _Results,
    ) -> None:
        """Run one node's actions in order (a worker thread); post each result."""
        launched: dict[str, Outcome] = {}  # this chain's provisions, by node
        for a in chain:
            if self._stop.is_set():
                return
            no_room = _no_room(launched.get(a.after)) if a.after else ""
            if no_room:
                results.put((a, Outcome.skipped(a, no_room), same))
                continue
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
                outcome, update = self.handlers.run(a, memory)
            except Exception as exc:  # the action boundary: any failure is an outcome
                outcome, update = Outcome.failed(a, exc, f"{type(exc).__name__}: {exc}"), same
            try:
                memory = update(memory)
            except Exception as exc:
                outcome, update = Outcome.failed(a, exc, f"{type(exc).__name__}: {exc}"), same
            if a.kind is ActionKind.PROVISION and a.node:
                launched[a.node] = outcome
            results.put((a, outcome, update))


def _no_room(launch: Outcome | None) -> str:
    """Why a termination waiting for its replacement's launch (Action.after) must not run:
    the launch found no place with room (capacity, or no place could take it); "" when it
    took, or failed otherwise (a quota refusal is after-terminate's own case: the node's
    slot is what the replacement needs; navarch.planner.stockout)."""
    if launch is None or launch.ok or not isinstance(launch.exc, (CapacityError, PlacementError)):
        return ""
    node = launch.action.node
    return (
        f"held cordoned, not terminated: its replacement {node} could not launch "
        f"({launch.detail}); terminated once a replacement runs"
    )

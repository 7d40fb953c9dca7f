"""The executor's action handlers: one function per ActionKind, in the table HANDLERS.

A handler runs one action of a plan on a worker thread of the engine
(navarch.reconcile.executor): it calls a provider or a playbook, and returns the action's
Outcome and an Update (a pure function Memory -> Memory) that the engine folds into the
run's Memory on its one folding thread. A handler reads `memory` (the run's Memory as of
the chain's start plus the chain's own earlier updates); it must not touch other nodes'
entries, and pool-level changes belong inside the Update (other workers change the same
pool meanwhile).

Outcomes, not exceptions (kopf's style): an expected failure is an Outcome of kind
TRANSIENT (throttling, no capacity anywhere, a failed SSH step: the next run plans it
again), PERMANENT (credentials, quota, configuration, a bug: it fails again until a human
acts), REFUSED (the node is not in the phase the action needs) or SKIPPED (an earlier
action of the node's chain failed this run), carrying the exception when there is one.

Capacity failover (DESIGN.md safety rule 6): a provision action carries its places in the
pool's order; a CapacityError marks that place exhausted with a backoff (10 min, doubling
per consecutive failure, at most 1 h) and the next place is tried. Fallover stops only for
a reason: a PlacementError (the type is not offered in that zone) is remembered like
capacity, saying why, and the next place is tried; a LaunchSpent (EC2 replayed a launch id
whose instance is gone) tries the next place (its own launch id) and moves the pool's next
node index past the node, so the next run uses a new name and launch id. QuotaError ends
the pool's provisioning for this run, AuthError the provider's, TransientError (and any
other error) the action's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable

from navarch import signing
from navarch.errors import (
    AuthError,
    CapacityError,
    LaunchSpent,
    PlacementError,
    ProviderError,
    QuotaError,
    RemoteError,
)
from navarch.health import Remedy
from navarch.inventory import TAG_SPEC, Instance, launch_id, ownership_tags
from navarch.outcome import Outcome, OutcomeKind
from navarch.planner.model import (
    Action,
    ActionKind,
    ActionReason,
    Diag,
    DiagState,
    DiagWhy,
    Exhausted,
    Fault,
    Memory,
    NodeMemory,
    Phase,
    Place,
    PoolMemory,
)
from navarch.planner.retired import retired_pool
from navarch.providers.base import Provider, ProvisionRequest
from navarch.spec import FleetSpec, PoolSpec, Scheduler
from navarch.textsafe import node_text

BACKOFF_BASE_S = 600
BACKOFF_MAX_S = 3600

#: A change to the run's Memory, folded by the engine's one folding thread.
Update = Callable[[Memory], Memory]


def same(memory: Memory) -> Memory:
    """The Update that changes nothing (the engine journals only after other ones)."""
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
    """Record `fault` as the node's fault and, when it is a new occurrence (another
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


def diag_token(started_at: datetime) -> str:
    """The name of the diagnostic started at `started_at` (aware UTC), shell-safe:
    20261101T120000Z. Its result files on the node carry it."""
    return started_at.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


@runtime_checkable
class DiagRunner(Protocol):
    """A playbook runner that also runs the diagnostics playbook (navarch.remote.adapter.
    SSHPlaybooks.diagnose, returning a navarch.remote.diagnostics.DiagResult)."""

    def diagnose(
        self,
        pool: PoolSpec,
        node: str,
        address: str | None,
        level: int,
        reason: str,
        *,
        token: str = "",
    ) -> _DiagResult: ...


class PlaybookRunner(Protocol):
    """Runs a scheduler playbook (cordon, drain, drain_check, uncordon) for one node.

    Returns (ok, detail). Implemented over SSH by navarch.remote; scheduler "none" has
    no playbooks and never reaches a runner.
    """

    def run(
        self, pool: PoolSpec, kind: str, node: str, address: str | None, reason: str
    ) -> tuple[bool, str]: ...


def backoff_s(failures: int) -> int:
    """Capacity backoff for a place after `failures` consecutive capacity errors."""
    return min(BACKOFF_BASE_S * (1 << max(failures - 1, 0)), BACKOFF_MAX_S)


class Handlers:
    """The per-run state the handlers share, and the handlers themselves (HANDLERS maps
    each ActionKind to one). Built by the engine; see Executor for the arguments.

    run(action, memory) is the one entry point; it may raise (the engine's action
    boundary turns any exception into a failed Outcome).
    """

    def __init__(
        self,
        spec: FleetSpec,
        providers: Mapping[str, Provider],
        *,
        instances: Mapping[str, Instance],
        inventory: Sequence[Instance] | None,
        clock: Callable[[], datetime],
        playbooks: PlaybookRunner | None,
        user_data: Callable[[PoolSpec, str, bytes, str], str] | None,
        fleet_secret: bytes | None,
    ) -> None:
        self.spec = spec
        self.providers = providers
        self.instances = instances  # node -> Instance, from this run's inventory
        self.by_id = {i.instance_id: i for i in inventory or ()}  # every instance listed
        self.launched = frozenset(i.launch_id for i in inventory or () if i.launch_id)
        self.fresh_inventory = inventory is not None
        self.clock = clock
        self.playbooks = playbooks
        self.user_data = user_data
        self.fleet_secret = fleet_secret
        self._mutex = threading.Lock()
        # Bars met this run: provider -> its AuthError; (pool, provider) -> its QuotaError.
        self._dead_providers: dict[str, AuthError] = {}
        self._quota_pools: dict[tuple[str, str], QuotaError] = {}

    def run(self, a: Action, memory: Memory) -> tuple[Outcome, Update]:
        """Run one action: its handler from HANDLERS."""
        return self.HANDLERS[a.kind](self, a, memory)

    def _scale(self, a: Action, memory: Memory) -> tuple[Outcome, Update]:
        pool = self.spec.pool(a.pool)
        now = self.clock()

        def update(m: Memory) -> Memory:
            return m.with_pool(
                replace(
                    m.pool(a.pool),
                    desired=a.desired,
                    desired_from_target=pool.target_nodes,
                    scaled_at=now,
                )
            )

        return Outcome.done(a, f"desired {a.desired}"), update

    def _provision(self, a: Action, memory: Memory) -> tuple[Outcome, Update]:
        """Launch the node in the first place that takes it, trying the action's places in
        order (zone, then type, then placement). Capacity and placement errors
        back that place off and go on; a quota or auth error bars that provider for the
        rest of the run (the action ends there when the pool has one placement)."""
        pool = self.spec.pool(a.pool)
        assert a.node is not None
        multi = len(pool.placed()) > 1
        tried: list[str] = []
        not_offered = 0  # places of `tried` that failed for another reason than capacity
        updates: list[Update] = []
        barred: tuple[QuotaError | AuthError, str] | None = None  # a bar: error, message
        barred_places = 0  # places of `tried` skipped for a bar
        no_capacity: CapacityError | None = None  # the last place's "no capacity"
        refusal: PlacementError | LaunchSpent | None = None  # the last "cannot take it"
        for place in a.places:
            provider = pool.placed()[place.placement].provider
            bar = self._barred(a.pool, provider)
            if bar is None:
                try:
                    inst = self._launch(a, pool, place, provider)
                except (CapacityError, PlacementError) as exc:
                    updates.append(
                        self._exhausted(
                            a.pool, place.zone, place.instance_type, place.spot, provider
                        )
                    )
                    offered = isinstance(exc, CapacityError)
                    if isinstance(exc, CapacityError):
                        no_capacity = exc
                    else:
                        refusal = exc
                    tried.append(f"{place.label()}: {'' if offered else 'not offered here: '}{exc}")
                    not_offered += not offered
                    continue
                except LaunchSpent as exc:
                    refusal = exc
                    updates.append(_past_node(a.pool, a.node))
                    tried.append(f"{place.label()}: launch id spent: {exc}")
                    not_offered += 1
                    continue
                except (QuotaError, AuthError) as exc:
                    bar = self._bar(a.pool, provider, exc)
                except ProviderError as exc:
                    return Outcome.failed(a, exc, f"{place.label()}: {exc}"), _chain(*updates)
                else:
                    return self._launched(a, pool, place, inst, tried, not_offered, updates)
            barred = barred or bar
            if not multi:
                break
            tried.append(f"{place.label()}: {bar[1]}")
            barred_places += 1
        if barred is not None and (not multi or barred_places == len(tried)):
            return Outcome.failed(a, barred[0], barred[1]), _chain(*updates)
        if not_offered and refusal is not None:
            return (
                Outcome.failed(a, refusal, "no place could take it: " + "; ".join(tried)),
                _chain(*updates),
            )
        full = no_capacity or CapacityError("the pool has no place to launch in", scope="zone")
        return Outcome.failed(a, full, "no capacity: " + "; ".join(tried)), _chain(*updates)

    def _barred(self, pool: str, provider: str) -> tuple[QuotaError | AuthError, str] | None:
        """(error, message) when this run already met an auth error on the provider or a
        quota error for the pool on it; None when launches may go on."""
        with self._mutex:
            dead = self._dead_providers.get(provider)
            quota = self._quota_pools.get((pool, provider))
        if dead is not None:
            return dead, f"provider {provider}: {dead}"
        if quota is not None:
            return quota, f"quota: {quota}"
        return None

    def _bar(
        self, pool: str, provider: str, exc: QuotaError | AuthError
    ) -> tuple[QuotaError | AuthError, str]:
        """Remember a quota error (for the pool on that provider) or an auth error (for
        the provider) for the rest of the run -> (error, message)."""
        with self._mutex:
            if isinstance(exc, QuotaError):
                self._quota_pools[(pool, provider)] = exc
                return exc, f"quota: {exc}"
            self._dead_providers[provider] = exc
            return exc, f"auth: {exc}"

    def _launch(self, a: Action, pool: PoolSpec, place: Place, provider: str) -> Instance:
        """One launch request in one place (tags, launch id, user-data of that placement)."""
        assert a.node is not None
        user_data = ""
        if self.user_data is not None and self.fleet_secret is not None:
            key = signing.derive_node_key(self.fleet_secret, self.spec.name, a.node)
            user_data = self.user_data(pool, a.node, key, provider)
        lid = launch_id(self.spec.name, a.node, place.attempt)
        tags = {
            **dict(pool.labels),
            **ownership_tags(self.spec.name, pool.name, a.node, lid),
            TAG_SPEC: pool.launch_hash(place.placement),
        }
        request = ProvisionRequest(
            fleet=self.spec.name,
            pool=pool.name,
            node=a.node,
            zone=place.zone,
            instance_type=place.instance_type,
            spot=place.spot,
            launch_id=lid,
            attempt=place.attempt,
            tags=tags,
            user_data=user_data,
            options=pool.placed()[place.placement].options,
            known_absent=self.fresh_inventory and lid not in self.launched,
        )
        return self.providers[provider].provision(request)

    def _launched(
        self,
        a: Action,
        pool: PoolSpec,
        place: Place,
        inst: Instance,
        tried: list[str],
        not_offered: int,
        updates: list[Update],
    ) -> tuple[Outcome, Update]:
        """The outcome of a launch that took, and its Memory update (the node with its
        launch settings; the place's backoff cleared; next_index raised)."""
        assert a.node is not None
        index = int(a.node.rsplit("-", 1)[1])
        nm = NodeMemory(
            node=a.node,
            pool=a.pool,
            instance_id=inst.instance_id,
            first_seen_at=self.clock(),
            launch=pool.launch_settings(place.placement),
        )
        here = (inst.provider, place.zone, place.instance_type, place.spot)

        def launched(m: Memory) -> Memory:
            pm = m.pool(a.pool)
            pm = replace(
                pm,
                next_index=max(pm.next_index, index + 1),
                exhausted=tuple(
                    e for e in pm.exhausted if (e.provider, e.zone, e.instance_type, e.spot) != here
                ),
            )
            return m.with_pool(pm).with_node(nm)

        why = "without capacity" if not not_offered else "that could not take it"
        where = place.label() + (f" after {Place.count(len(tried))} {why}" if tried else "")
        return Outcome.done(a, f"{inst.instance_id} in {where}"), _chain(*updates, launched)

    def _exhausted(self, pool: str, zone: str, itype: str, spot: bool, provider: str) -> Update:
        """Back off one place (provider, zone, type, spot): 10 min, doubling per failure."""
        now = self.clock()

        def update(memory: Memory) -> Memory:
            pm = memory.pool(pool)
            key = (provider, zone, itype, spot)
            prev = next(
                (e for e in pm.exhausted if (e.provider, e.zone, e.instance_type, e.spot) == key),
                None,
            )
            failures = prev.failures + 1 if prev else 1
            entry = Exhausted(
                zone,
                itype,
                spot,
                now + timedelta(seconds=backoff_s(failures)),
                failures,
                provider=provider,
            )
            rest = tuple(e for e in pm.exhausted if e is not prev)
            return memory.with_pool(replace(pm, exhausted=rest + (entry,)))

        return update

    def _node_memory(self, a: Action, memory: Memory) -> NodeMemory:
        assert a.node is not None
        return memory.node(a.node) or NodeMemory(
            node=a.node, pool=a.pool, first_seen_at=self.clock()
        )

    def _pool(self, name: str, memory: Memory) -> PoolSpec:
        """The pool as declared, or for a pool that left fleet.yaml (its orphans are still
        cordoned and drained) as navarch recorded it (navarch.planner.retired)."""
        try:
            return self.spec.pool(name)
        except KeyError:
            return retired_pool(name, memory.pool(name).settings)

    def _playbook(self, a: Action, kind: str, memory: Memory) -> Outcome:
        """Run the pool's `kind` playbook for the action's node: a success (its detail),
        a refusal (no runner), or a transient failure (a step failed; the next run retries)."""
        pool = self._pool(a.pool, memory)
        if pool.scheduler is Scheduler.NONE and kind not in pool.playbooks:
            return Outcome.done(a, "recorded in navarch (scheduler none)")
        if self.playbooks is None:
            return Outcome.refused(a, f"no playbook runner for scheduler {pool.scheduler}")
        inst = self.instances.get(a.node or "")
        try:
            ok, detail = self.playbooks.run(
                pool, kind, a.node or "", inst.address if inst else None, a.reason
            )
        except RemoteError as exc:
            return Outcome.failed(a, exc)
        return Outcome.done(a, detail) if ok else Outcome(a, OutcomeKind.TRANSIENT, detail)

    def _cordon(self, a: Action, memory: Memory) -> tuple[Outcome, Update]:
        ran = self._playbook(a, "cordon", memory)
        if not ran.ok:
            return ran, same
        now = self.clock()
        scheduled = a.why == DiagWhy.SCHEDULED.value
        nm = replace(
            self._node_memory(a, memory),
            phase=Phase.CORDONED,
            phase_at=now,
            phase_reason=a.reason,
            repair=a.repair,
            diag_cordon=scheduled,
            impaired_cordon=a.action_reason is ActionReason.IMPAIRED_FIRST_SEEN,
        )
        if scheduled:  # out for scheduled diagnostics, returned after them
            nm = replace(nm, diag=Diag(a.level or 1, DiagWhy.SCHEDULED, DiagState.DUE, now))
        # The fault this cordon answers, or none: a fault remembered from an earlier cordon
        # must not make the ladder remedy a node cordoned for another reason.
        nm = (
            _with_fault(nm, a.fault, now, self._fault_keep_s(a.pool))
            if a.fault is not None
            else replace(nm, fault=None)
        )

        host = self._host_fault(a, memory, now)

        retiring = a.pool not in {p.name for p in self.spec.pools}

        def update(m: Memory) -> Memory:
            m = host(m.with_node(nm))
            if a.repair:
                pm = m.pool(a.pool)
                m = m.with_pool(replace(pm, repairs=self._recent(pm, now) + (now,)))
            if retiring and m.pool(a.pool).retiring_since is None:
                # The first cordon of a removed pool's node: its retirement is under way,
                # so later runs go on with it without asking the orphan guard again.
                m = m.with_pool(replace(m.pool(a.pool), retiring_since=now))
            return m

        return ran, update

    def _host_fault(self, a: Action, memory: Memory, now: datetime) -> Update:
        """Count a new fault occurrence against the node's physical host, where
        the cloud exposes one (Instance.host_id): PoolMemory.host_faults, kept as long as
        the node's own history. A fault already recorded for the node is not counted again."""
        inst = self.instance(a)
        known = memory.node(a.node or "")
        if (
            a.fault is None
            or inst is None
            or inst.host_id is None
            or (known is not None and known.fault == a.fault)
        ):
            return same
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
            return Outcome.skipped(a, "not cordoned (its cordon failed this run)"), same
        ran = self._playbook(a, "drain", memory)
        if not ran.ok:
            return ran, same
        nm = replace(nm, phase=Phase.DRAINING, phase_at=self.clock())
        return Outcome.done(a, ran.detail or "drain started"), _set_node(nm)

    def instance(self, a: Action) -> Instance | None:
        """The action's instance: by its instance id when the plan names one (a duplicate's
        extra instance shares the node name), else the node's instance."""
        if a.instance_id is not None and a.instance_id in self.by_id:
            return self.by_id[a.instance_id]
        return self.instances.get(a.node or "")

    def _terminate(self, a: Action, memory: Memory) -> tuple[Outcome, Update]:
        inst = self.instance(a)
        if inst is None:
            return Outcome.done(a, "already gone"), same
        try:
            # The instance's own provider: an orphan's pool, or a drifted node's old
            # provider, may no longer be in the spec.
            self.providers[inst.provider].terminate([inst])
        except ProviderError as exc:
            return Outcome.failed(a, exc), same
        backoff = (
            self._exhausted(a.pool, inst.zone, inst.instance_type, inst.spot, inst.provider)
            if a.backoff
            else same
        )
        known = memory.node(a.node or "")
        if known is not None and known.instance_id not in (None, inst.instance_id):
            # A duplicate's extra instance: the node itself stays as it is.
            return Outcome.done(a, f"terminated extra instance {inst.instance_id}"), backoff
        nm = replace(
            self._node_memory(a, memory),
            phase=Phase.TERMINATING,
            phase_at=self.clock(),
            phase_reason=a.reason,
        )
        lemon = self._lemon(a.pool, inst.instance_id, inst.host_id) if a.lemon else same
        return (
            Outcome.done(a, f"terminated {inst.instance_id}"),
            _chain(backoff, lemon, _set_node(nm)),
        )

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
        """The ladder's reboot: Provider.reboot on the node's instance; the node
        enters phase REMEDIATING with the rung and the fault it answers. A reboot that
        carries repair=True (a fault again after a reboot) counts toward the hourly limit."""
        inst, nm, refused = self._remediable(a, memory, "reboot")
        if refused is not None:
            return refused, same
        assert inst is not None and nm is not None
        try:
            self.providers[inst.provider].reboot([inst])
        except ProviderError as exc:
            return Outcome.failed(a, exc), same
        return (
            Outcome.done(a, f"rebooted {inst.instance_id} through provider {inst.provider}"),
            self._remedied(a, nm, Remedy.REBOOT, memory),
        )

    def _reset_gpu(self, a: Action, memory: Memory) -> tuple[Outcome, Update]:
        """The ladder's GPU reset: the pool's reset_gpu playbook on the node
        (built in: playbooks/reset_gpu.yaml, `nvidia-smi -r`, refused on the node while GPU
        processes remain), or, for a provider whose machines have no SSH (the local
        provider's fake GPUs), its reset_gpus. The node enters phase REMEDIATING with rung
        reset_gpu and keeps its boot: reports made after the reset decide (observe's
        after_remedy). A failed or refused reset changes nothing; a later run retries."""
        inst, nm, refused = self._remediable(a, memory, "reset")
        if refused is not None:
            return refused, same
        assert inst is not None and nm is not None
        provider = self.providers[inst.provider]
        if isinstance(provider, GpuResetter):
            try:
                detail = provider.reset_gpus(inst)
            except ProviderError as exc:
                return Outcome.failed(a, exc), same
        else:
            if self.playbooks is None:
                return Outcome.refused(
                    a,
                    "no playbook runner: a GPU reset runs the reset_gpu "
                    "playbook over SSH (pools.<pool>.ssh)",
                ), same
            try:
                ok, detail = self.playbooks.run(
                    self.spec.pool(a.pool), "reset_gpu", a.node or "", inst.address, a.reason
                )
            except RemoteError as exc:
                return Outcome.failed(a, exc), same
            if not ok:
                return Outcome(a, OutcomeKind.TRANSIENT, detail), same
        return Outcome.done(a, detail), self._remedied(a, nm, Remedy.RESET_GPU, memory)

    def _remediable(
        self, a: Action, memory: Memory, verb: str
    ) -> tuple[Instance | None, NodeMemory | None, Outcome | None]:
        """The instance and memory of a node the ladder remedies in place, or the refusal
        (no instance; not drained: only a DRAINING or REMEDIATING node is rebooted or reset)."""
        inst = self.instance(a)
        if inst is None:
            return None, None, Outcome.refused(a, f"no instance to {verb}")
        nm = self._node_memory(a, memory)
        if nm.phase not in (Phase.DRAINING, Phase.REMEDIATING):
            return None, None, Outcome.refused(a, f"not drained (phase {nm.phase.value or 'none'})")
        return inst, nm, None

    def _remedied(self, a: Action, nm: NodeMemory, rung: Remedy, memory: Memory) -> Update:
        """Memory after an in-place remedy: phase REMEDIATING, the rung and the fault it
        answers (a new occurrence joins the fault history), return_streak from 0; a remedy
        with repair=True counts toward the hourly repair limit."""
        now = self.clock()
        nm = _with_fault(nm, a.fault, now, self._fault_keep_s(a.pool))
        nm = replace(
            nm,
            phase=Phase.REMEDIATING,
            phase_at=now,
            phase_reason=a.reason,
            rung=a.rung or rung,
            rung_fault=a.fault.key.kind if a.fault else nm.rung_fault,
            rung_at=now,
            return_streak=0,
            diag_cordon=False,
            impaired_cordon=False,
        )

        host = self._host_fault(a, memory, now)

        def update(m: Memory) -> Memory:
            m = host(m.with_node(nm))
            if a.repair:
                pm = m.pool(a.pool)
                m = m.with_pool(replace(pm, repairs=self._recent(pm, now) + (now,)))
            return m

        return update

    def _diagnose(self, a: Action, memory: Memory) -> tuple[Outcome, Update]:
        """Active diagnostics on a cordoned node: the pool's diagnostics playbook
        (built in: playbooks/diagnostics.yaml, `dcgmi diag -r LEVEL -j` started detached on
        the node; a later run's DIAGNOSE collects its JSON), or a provider's own diagnose
        (the local provider's fake GPUs). Never waits for the diagnostics: one SSH round
        trip per run. Records a Diag in Memory (running, pass, fail, unavailable, error);
        the planner decides what it means. ok is False only for error (no verdict)."""
        inst, nm, refused = self._remediable(a, memory, "diagnose")
        if refused is not None:
            return refused, same
        assert inst is not None and nm is not None
        level, why = a.level or 1, DiagWhy(a.why or DiagWhy.RETURN.value)
        now = self.clock()
        prev = nm.diag
        running = (
            prev is not None
            and prev.state is DiagState.RUNNING
            and prev.level == level
            and prev.why is why
        )
        started = prev.started_at if running and prev is not None else now
        provider = self.providers[inst.provider]
        if isinstance(provider, Diagnoser):
            state, detail = provider.diagnose(inst, level)
        elif isinstance(self.playbooks, DiagRunner):
            # The run that starts a diagnostic names it; a later run collects only a result
            # of that name, never one a diagnostic from before a remedy left on the node.
            result = self.playbooks.diagnose(
                self.spec.pool(a.pool),
                a.node or "",
                inst.address,
                level,
                a.reason,
                token=diag_token(started or now),
            )
            state, detail = result.outcome.value, result.detail
        else:
            state, detail = "error", "no diagnostics runner: diagnostics run over SSH"
        diag = Diag(level, why, DiagState(state), now, started, node_text(detail))
        nm = replace(nm, diag=diag)
        # Only an error is a failure (no verdict, so a later run diagnoses again); a failed
        # diagnosis is a verdict the planner acts on.
        kind = OutcomeKind.TRANSIENT if diag.state is DiagState.ERROR else OutcomeKind.OK
        text = f"dcgmi diag -r {level}: {diag.state.value}" + (f": {detail}" if detail else "")
        return Outcome(a, kind, text, diag=diag.state), _set_node(nm)

    def _update_tags(self, a: Action, memory: Memory) -> tuple[Outcome, Update]:
        inst = self.instance(a)
        if inst is None:
            return Outcome.done(a, "already gone"), same
        try:
            self.providers[inst.provider].update_tags(inst, dict(a.tags))
        except ProviderError as exc:
            return Outcome.failed(a, exc), same
        tags = ", ".join(f"{k}={v}" for k, v in a.tags)
        return Outcome.done(a, f"tags set on {inst.instance_id}: {tags}"), same

    def _uncordon(self, a: Action, memory: Memory) -> tuple[Outcome, Update]:
        ran = self._playbook(a, "uncordon", memory)
        if not ran.ok:
            return ran, same
        nm = replace(
            self._node_memory(a, memory),
            phase=Phase.NONE,
            phase_at=self.clock(),
            phase_reason="",
            repair=False,
            streak=0,
            return_streak=0,
            operator_cordon="",
            diag_cordon=False,
            impaired_cordon=False,
        )
        return ran, _set_node(nm)

    #: ActionKind -> handler(self, action, memory) -> (Outcome, Update). A new kind adds
    HANDLERS: Mapping[ActionKind, Callable[[Handlers, Action, Memory], tuple[Outcome, Update]]] = {
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

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

Provisioning, with its fail-over over zones and instance types and the capacity backoff,
is navarch.reconcile.provisioning's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable

from navarch.capabilities import Capability
from navarch.errors import (
    NavarchError,
    ProviderError,
    RemoteError,
)
from navarch.fleet.spec import FleetSpec, PoolSpec, Scheduler
from navarch.inventory import Instance
from navarch.outcome import Outcome, OutcomeKind
from navarch.planner.acceptance import run_key
from navarch.planner.model import (
    REMEDY_SUPERSEDES,
    Action,
    ActionKind,
    ActionReason,
    Cordon,
    Diag,
    DiagState,
    DiagWhy,
    Fault,
    Memory,
    NodeMemory,
    Phase,
    PoolMemory,
)
from navarch.planner.payloads import (
    CordonPayload,
    DiagnosePayload,
    PeerPayload,
    RemedyPayload,
    ScalePayload,
    TagsPayload,
    TerminatePayload,
)
from navarch.planner.retired import retired_pool
from navarch.planner.vacancies import fill, record, vacancy_of
from navarch.providers.base import HostReporter, Provider
from navarch.reconcile.provisioning import Provisioner
from navarch.reconcile.updates import Update, chain, same, set_node
from navarch.report.acceptance import AcceptanceStatus
from navarch.report.health import Remedy
from navarch.textsafe import node_text


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


#: The most host faults a pool keeps (PoolMemory.host_faults, the newest): the state stays
#: small on a fleet whose hosts fail often, and the lemon host list is counted from these.
MAX_HOST_FAULTS = 1000


def _no_phase(nm: NodeMemory, now: datetime) -> NodeMemory:
    """The node's memory out of any phase navarch put it in (a spare held, or uncordoned):
    no cordon of any kind, no remedy under way, its report streaks counted afresh."""
    return replace(
        nm,
        phase=Phase.NONE,
        phase_at=now,
        phase_reason="",
        streak=0,
        return_streak=0,
        cordon=None,
    )


def _cordon_of(a: Action, now: datetime, *, scheduled: bool) -> Cordon:
    """The Cordon a CORDON action leaves on its node: its action_reason (DIAGNOSTICS for
    scheduled diagnostics), the fault it answers, whether the node served nothing, and
    whether it starts a repair."""
    return Cordon(
        ActionReason.DIAGNOSTICS if scheduled else a.action_reason,
        now,
        fault=a.fault.key.format() if a.fault is not None else "",
        idle=a.carries(CordonPayload).idle,
        repair=a.repair,
    )


def _spare_set(m: Memory, a: Action, *, add: bool) -> Memory:
    """Memory with the action's node added to (or removed from) its pool's warm spares
    (PoolMemory.spares, kept sorted); the same Memory when nothing changes."""
    pm = m.pool(a.pool)
    node = a.node or ""
    if (node in pm.spares) == add or not node:
        return m
    spares = pm.spares + (node,) if add else tuple(n for n in pm.spares if n != node)
    return m.with_pool(replace(pm, spares=tuple(sorted(spares))))


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
        self.clock = clock
        self.playbooks = playbooks
        self.provisioner = Provisioner(
            spec,
            providers,
            inventory=inventory,
            clock=clock,
            user_data=user_data,
            fleet_secret=fleet_secret,
        )

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
                    desired=a.carries(ScalePayload).desired,
                    desired_from_target=pool.target_nodes,
                    scaled_at=now,
                )
            )

        return Outcome.done(a, f"desired {a.carries(ScalePayload).desired}"), update

    def _provision(self, a: Action, memory: Memory) -> tuple[Outcome, Update]:
        """Launch the node in the first place that takes it (navarch.reconcile.provisioning);
        a launched replacement fills the vacancy of the node it replaces, if one is open
        (navarch.planner.vacancies)."""
        outcome, update = self.provisioner.provision(a)
        if not outcome.ok or not a.replaces:
            return outcome, update
        replaced, now = a.replaces, self.clock()

        def filled(m: Memory) -> Memory:
            pm = m.pool(a.pool)
            done = fill(pm, replaced, now)
            return m if done is pm else m.with_pool(done)

        return outcome, chain(update, filled)

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
        if a.action_reason is ActionReason.SPARE:
            return ran, self._held_spare(a, memory)
        if a.action_reason is ActionReason.ACCEPTANCE:
            # In acceptance is no phase: observe judges the node by its acceptance run, and
            # the flag tells the planner to uncordon it once the run passed.
            accepting = Cordon(ActionReason.ACCEPTANCE, self.clock())
            nm = self._node_memory(a, memory)
            if nm.cordon is not None and nm.cordon.cause is ActionReason.BOOT_TIMEOUT:
                # A late first report: its suite, not the boot_timeout phase, now decides.
                nm = _no_phase(nm, self.clock())
            return ran, set_node(replace(nm, cordon=accepting))
        now = self.clock()
        scheduled = a.carries(CordonPayload).why is DiagWhy.SCHEDULED
        nm = replace(
            self._node_memory(a, memory),
            phase=Phase.CORDONED,
            phase_at=now,
            phase_reason=a.reason,
            cordon=_cordon_of(a, now, scheduled=scheduled),
        )
        if scheduled:  # out for scheduled diagnostics, returned after them
            nm = replace(
                nm,
                diag=Diag(
                    a.carries(CordonPayload).level or 1, DiagWhy.SCHEDULED, DiagState.DUE, now
                ),
            )
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
            m = _spare_set(host(m.with_node(nm)), a, add=False)  # out: no longer a spare
            if a.repair:
                pm = m.pool(a.pool)
                m = m.with_pool(replace(pm, repairs=self._recent(pm, now) + (now,)))
            if retiring and m.pool(a.pool).retiring_since is None:
                # The first cordon of a removed pool's node: its retirement is under way,
                # so later runs go on with it without asking the orphan guard again.
                m = m.with_pool(replace(m.pool(a.pool), retiring_since=now))
            return m

        return ran, update

    def _held_spare(self, a: Action, memory: Memory) -> Update:
        """Memory after a cordon that holds a healthy node as a warm spare (action_reason
        SPARE): the node joins PoolMemory.spares and has no phase (a spare is out of the
        scheduler, not out for a fault); a node cured in place leaves its remedy behind."""
        nm = _no_phase(self._node_memory(a, memory), self.clock())
        return chain(set_node(nm), lambda m: _spare_set(m, a, add=True))

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
            kept = (kept + ((host, key, now),))[-MAX_HOST_FAULTS:]
            return m.with_pool(replace(pm, host_faults=kept))

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
        return Outcome.done(a, ran.detail or "drain started"), set_node(nm)

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
        # Handed back before the termination: Compute Engine takes a report only for a
        # running VM (reportHostAsFaulty, "The VM is running").
        handed = self._hand_back(a, inst) if a.carries(TerminatePayload).hand_back else ""
        try:
            # The instance's own provider: an orphan's pool, or a drifted node's old
            # provider, may no longer be in the spec.
            self.providers[inst.provider].terminate([inst])
        except ProviderError as exc:
            return Outcome.failed(a, exc, f"{exc}{handed}"), same
        backoff = (
            self.provisioner.exhausted(
                a.pool, inst.zone, inst.instance_type, inst.spot, inst.provider
            )
            if a.carries(TerminatePayload).backoff
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
        lemon = (
            self._lemon(a.pool, inst.instance_id, inst.host_id)
            if a.carries(TerminatePayload).lemon
            else same
        )
        now = self.clock()
        pool = next((p for p in self.spec.pools if p.name == a.pool), None)
        vacancy = vacancy_of(pool, a, known, inst, now)

        def vacated(m: Memory) -> Memory:
            return m if vacancy is None else m.with_pool(record(m.pool(a.pool), vacancy, now))

        return (
            Outcome.done(a, f"terminated {inst.instance_id}{handed}"),
            chain(backoff, lemon, set_node(nm), lambda m: _spare_set(m, a, add=False), vacated),
        )

    def _hand_back(self, a: Action, inst: Instance) -> str:
        """Report a node replaced for a hardware fault to its cloud as a faulty host, where
        the provider can (Capability.REPORT_FAULTY_HOST) -> "; ..." for the outcome line,
        "" when the provider cannot. A refused report never stops the termination: the
        node leaves either way, and the line says what the cloud answered."""
        provider = self.providers[inst.provider]
        caps = getattr(provider, "capabilities", Capability.NONE)
        if Capability.REPORT_FAULTY_HOST not in caps or not isinstance(provider, HostReporter):
            return ""
        fault = a.fault.key.format() if a.fault is not None else "hardware"
        try:
            return "; " + provider.report_faulty_host(inst, fault)
        except NavarchError as exc:  # a refusal (400: ConfigError) as much as an outage
            return f"; reporting its host as faulty failed: {node_text(str(exc))}"

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
            rung=a.carries(RemedyPayload).rung,
            rung_fault=a.fault.key.kind if a.fault else nm.rung_fault,
            rung_at=now,
            return_streak=0,
            cordon=nm.cordon.after_remedy(*REMEDY_SUPERSEDES) if nm.cordon else None,
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
        level, why = a.carries(DiagnosePayload).level, a.carries(DiagnosePayload).why
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
        return Outcome(a, kind, text, diag=diag.state), set_node(nm)

    def _update_tags(self, a: Action, memory: Memory) -> tuple[Outcome, Update]:
        inst = self.instance(a)
        if inst is None:
            return Outcome.done(a, "already gone"), same
        try:
            self.providers[inst.provider].update_tags(inst, dict(a.carries(TagsPayload).tags))
        except ProviderError as exc:
            return Outcome.failed(a, exc), same
        tags = ", ".join(f"{k}={v}" for k, v in a.carries(TagsPayload).tags)
        return Outcome.done(a, f"tags set on {inst.instance_id}: {tags}"), same

    def _uncordon(self, a: Action, memory: Memory) -> tuple[Outcome, Update]:
        ran = self._playbook(a, "uncordon", memory)
        if not ran.ok:
            return ran, same
        nm = _no_phase(self._node_memory(a, memory), self.clock())
        # Uncordoned, a spare serves (promoted, or by an operator): no longer a spare.
        return ran, chain(set_node(nm), lambda m: _spare_set(m, a, add=False))

    def _nccl_peer(self, a: Action, memory: Memory) -> tuple[Outcome, Update]:
        """The multi-node NCCL test of a node in acceptance with the known-good a.peer, through
        the pool's Slurm head node (navarch.remote.nccl_peer; a node drained for acceptance
        through a maintenance reservation). The result is kept for the node's acceptance
        run (NodeMemory.peer_test, peer_run) where the planner's acceptance verdict reads it;
        a node not drained again afterwards loses its acceptance cordon, so the next run
        cordons it anew. ok is False only for unknown (no verdict: planned again)."""
        from navarch.remote.nccl_peer import run_drained_peer_test, run_peer_test

        peer = a.carries(PeerPayload).peer
        nm = self._node_memory(a, memory)
        run = nm.report.acceptance if nm.report is not None else None
        if run is None or not peer:
            return Outcome.refused(a, "no acceptance run of the node to pair with"), same
        pool, node, base = self._pool(a.pool, memory), a.node or "", self.spec.base_dir
        drained = True
        accepting = nm.cordon is not None and nm.cordon.acceptance
        if accepting:
            result, drained = run_drained_peer_test(
                self.spec.name, pool, node, peer, base_dir=base, mpi=self.peer_mpi
            )
        else:
            result = run_peer_test(
                self.spec.name, pool, node, peer, base_dir=base, mpi=self.peer_mpi
            )
        nm = replace(
            nm,
            peer_test=result,
            peer_run=run_key(run),
            cordon=nm.cordon if drained or not accepting else None,
        )
        unit = f" {result.unit}" if result.unit else ""
        figure = f" {result.figure:g}{unit}" if result.figure is not None else ""
        why = f": {result.reason}" if result.reason else ""
        text = f"nccl_multi_node with {peer}: {result.status.value}{figure}{why}"
        if not drained:
            text += "; the node could not be drained again (cordoned anew next run)"
        kind = (
            OutcomeKind.TRANSIENT if result.status is AcceptanceStatus.UNKNOWN else OutcomeKind.OK
        )
        return Outcome(a, kind, node_text(text)), set_node(nm)

    #: srun's --mpi plugin for the multi-node NCCL test ("pmix": how Slurm sites launch
    #: nccl-tests built with MPI=1; navarch.remote.nccl_peer). Tests without PMIx set "none".
    peer_mpi = "pmix"

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
        ActionKind.NCCL_PEER: _nccl_peer,
    }

"""Plain immutable data the planner reads and returns.

Inputs: FleetSpec (navarch.fleet.spec), Instances (navarch.inventory), ReportObservations (what
navarch.reconcile.reports made of each node's health report), Memory (what earlier runs saw and did)
and a clock. Outputs: NodeViews (observe) and a Plan (plan). Nothing here does I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

from navarch.fleet.spec import Scheduler
from navarch.inventory import Instance
from navarch.planner.node_table import NodeTable
from navarch.planner.payloads import (
    CordonPayload,
    DiagnosePayload,
    Payload,
    PeerPayload,
    ProvisionPayload,
    RemedyPayload,
    ScalePayload,
    TagsPayload,
    TerminatePayload,
    UncordonPayload,
)

# Re-exported: the values an action's payload holds, long imported from this module.
from navarch.planner.payloads import DiagWhy as DiagWhy
from navarch.planner.payloads import Fault as Fault
from navarch.planner.payloads import Place as Place
from navarch.report.acceptance import AcceptanceResult, AcceptanceRun
from navarch.report.compat import RenamedStrEnum
from navarch.report.health import FaultKey, Remedy, Status
from navarch.report.health_report import NoticeKind, RejectReason

if TYPE_CHECKING:
    from navarch.planner.modes import Would


class Lifecycle(RenamedStrEnum):
    """A node's lifecycle state, derived each run (docs/design.md, Node lifecycle)."""

    PROVISIONING = "provisioning"  # instance pending
    BOOTING = "booting"  # running, no report yet, within boot_timeout
    HEALTHY = "healthy"
    DEGRADED = "degraded"  # serving; alerts, not replaced
    UNKNOWN = "unknown"  # doubt: reports missing/rejected, or the agent cannot tell
    STALE = "stale"  # last report older than stale_after
    OFFLINE = "offline"  # no fresh report for offline_after: counts as unhealthy
    UNHEALTHY = "unhealthy"  # to be cordoned and replaced
    PREEMPTING = "preempting"  # spot preemption notice: replace at once, budget or not
    MAINTENANCE = "maintenance"  # maintenance notice: replace before its deadline, in budget
    STUCK = "stuck"  # pending past provision_timeout: terminated, its place backed off
    CORDONED = "cordoned"
    DRAINING = "draining"
    TERMINATING = "terminating"
    ORPHAN = "orphan"  # carries this fleet's tags, but its pool is no longer declared
    REMEDIATING = "remediating"  # drained and rebooted by the ladder; waits for its new boot
    OPERATOR_CORDONED = "operator_cordoned"  # `navarch cordon`: out of service until uncordoned
    #: launched or back from an in-place remedy, its pool's acceptance suite not yet passed
    #: on this boot: kept from the scheduler, counted against max, not serving work
    ACCEPTANCE = "acceptance"
    #: a warm spare: healthy, kept cordoned from the scheduler, promoted when a node leaves
    #: service for a fault (PoolMemory.spares; navarch.planner.spares)
    SPARE = "spare"


SERVING = frozenset(
    {
        Lifecycle.PROVISIONING,
        Lifecycle.BOOTING,
        Lifecycle.HEALTHY,
        Lifecycle.DEGRADED,
        Lifecycle.UNKNOWN,
        Lifecycle.STALE,
        Lifecycle.MAINTENANCE,
        Lifecycle.ACCEPTANCE,
    }
)
READY = frozenset({Lifecycle.HEALTHY, Lifecycle.DEGRADED})  # reporting and taking work
#: Out of service because of navarch or an operator: counted against max_unavailable and not
#: toward desired (a remediating node's surge replacement serves meanwhile).
LEAVING = frozenset(
    {
        Lifecycle.CORDONED,
        Lifecycle.DRAINING,
        Lifecycle.TERMINATING,
        Lifecycle.REMEDIATING,
        Lifecycle.OPERATOR_CORDONED,
    }
)


class ActionKind(enum.StrEnum):
    PROVISION = "provision"
    CORDON = "cordon"
    DRAIN = "drain"
    TERMINATE = "terminate"
    UNCORDON = "uncordon"
    SCALE = "scale"  # change a pool's autoscaled desired count
    UPDATE_TAGS = "update_tags"  # set the pool's labels on an instance in place
    REBOOT = "reboot"  # remediation ladder: restart a drained node in place
    RESET_GPU = "reset_gpu"  # remediation ladder: reset a drained node's GPUs (nvidia-smi -r)
    DIAGNOSE = "diagnose"  # start, or collect, a dcgmi diag on a cordoned node
    #: the multi-node NCCL test of a node in acceptance with a known-good peer (Action.peer)
    NCCL_PEER = "nccl_peer"


class ActionReason(RenamedStrEnum):
    """Why an action is in the plan, as a code for scripts (Terraform's ``action_reason``);
    the prose ``Action.reason`` says the same for people. Serialised by value."""

    UNHEALTHY = "unhealthy"  # unhealthy reports (a streak, or a fatal XID)
    BOOT_TIMEOUT = "boot_timeout"  # no first report within boot_timeout
    OFFLINE = "offline"  # no fresh report for offline_after
    PREEMPTION = "preemption"  # spot preemption notice
    MAINTENANCE = "maintenance"  # maintenance notice
    REPLACE_REQUESTED = "replace_requested"  # `apply --replace NODE`
    DRIFT = "drift"  # launched from settings the pool no longer declares, or labels changed
    ORPHAN = "orphan"  # its pool left fleet.yaml
    DUPLICATE = "duplicate"  # a second instance carries the node's name
    PROVISION_TIMEOUT = "provision_timeout"  # pending past provision_timeout
    SCALE_UP = "scale_up"  # below desired, or autoscaling up
    SCALE_DOWN = "scale_down"  # above desired, or autoscaling down
    REPLACEMENT = "replacement"  # provisions a node that replaces one leaving
    DRAIN_FINISHED = "drain_finished"  # terminate: the drain finished
    DRAIN_TIMEOUT = "drain_timeout"  # terminate: drain_timeout passed
    TERMINATING = "terminating"  # terminate still in progress
    REDRAIN = "redrain"  # cordoned but never drained
    REMEDY = "remedy"  # the ladder's rung for a fault (reset_gpu, reboot, replace)
    LEMON = "lemon"  # the ladder replaces a lemon (lemon_after faults in lemon_window)
    REMEDY_TIMEOUT = "remedy_timeout"  # not back within boot_timeout/return_timeout of a remedy
    RECOVERED = "recovered"  # healthy reports after the remedy: back in service
    DIAGNOSTICS = "diagnostics"  # dcgmi diag, scheduled or before a return
    DESTROY = "destroy"  # `navarch destroy`
    OPERATOR = "operator"  # `navarch reboot|cordon|uncordon`
    INSTANCE_IMPAIRED = "instance_impaired"  # the cloud's status: impaired past IMPAIRED_AFTER_S
    #: cordon only: the cloud's first impaired listing, not yet confirmed
    IMPAIRED_FIRST_SEEN = "impaired_first_seen"
    IMPAIRMENT_CLEARED = "impairment_cleared"  # uncordon: the listing cleared before confirmed
    #: replaced: the acceptance suite failed on a new or remedied node (dead on arrival)
    ACCEPTANCE_FAILED = "acceptance_failed"
    #: replaced: the acceptance suite did not pass within the pool's acceptance timeout_s
    ACCEPTANCE_TIMEOUT = "acceptance_timeout"
    SPARE = "spare"  # cordon: a healthy node beyond target is held as a warm spare
    SPARE_PROMOTED = "spare_promoted"  # uncordon: a spare serves in place of a node that left

    #: cordon + drain: the pool's Capacity Block ends (EC2 reclaims its instances)
    CAPACITY_BLOCK_END = "capacity_block_end"
    #: provision: one node into the emptiest zone of a spread pool whose zones are uneven
    ZONE_REBALANCE = "zone_rebalance"
    #: cordon: kept from the scheduler while the acceptance suite loads its GPUs
    #: (NodeMemory.cordon, no phase: the node is in acceptance, not out for a fault)
    ACCEPTANCE = "acceptance"
    ACCEPTANCE_PASSED = "acceptance_passed"  # uncordon: the acceptance passed, the node serves
    ACCEPTANCE_PEER = "acceptance_peer"  # nccl_peer: a node in acceptance with a known-good peer


class Acceptance(enum.StrEnum):
    """Where a node's acceptance stands this run (navarch.planner.acceptance decides)."""

    RUNNING = "running"  # the suite has not finished (or not passed) on this boot yet
    PASSED = "passed"  # every test passed, figures within the pool's: back to service
    FAILED = "failed"  # a test failed: replaced, counted dead on arrival
    TIMED_OUT = "timed_out"  # no pass within the acceptance timeout: replaced
    #: no run reported by the deadline: the agent config or image lacks acceptance, so the
    #: node is held out of service (acceptance) and never replaced for it
    NO_RUN = "no_run"
    #: a finding about the image (a setting, version drift) or a suspect pool baseline, not
    #: the node's hardware: kept in acceptance, never replaced for it, never a host strike
    HELD = "held"


class Phase(enum.StrEnum):
    """What navarch has done to a node so far (kept in Memory)."""

    NONE = ""
    CORDONED = "cordoned"
    DRAINING = "draining"
    TERMINATING = "terminating"
    REMEDIATING = "remediating"  # rebooted or GPU-reset by the ladder; later reports decide


#: A node whose report's generated_at is further than this from the store's modification
#: time has a wrong clock: agents write a report seconds after making it.
CLOCK_SKEW_S = 120

#: How long the cloud must keep listing an instance impaired, from the first run that saw it,
#: before it is evidence: one listing can catch a status check mid-flap, and EC2 evaluates
#: its status checks every minute (EC2 User Guide, "Status checks for your instances"), so
#: a second run at least a minute later sees a second evaluation. With a reconcile every 1
#: to 2 minutes this is the next run; two applies seconds apart never act on one sample.
IMPAIRED_AFTER_S = 60


@dataclass(frozen=True)
class ReportSummary:
    """What the reconciler keeps of one accepted health report.

    generated_at: aware UTC. utilization_pct: mean over GPUs (None if none reported).
    process_count: GPU processes over all GPUs (None if unknown). fatal: a fatal XID is
    latched in the report, or a GPU call hung (navarch.reconcile.reports: act at once). findings: up to 5 human lines, worst first. stored_at: the
    store's modification time of the report object (aware UTC; None when unknown): the
    report's age is judged by it, not by the node's clock.
    """

    sequence: int
    boot_id: str
    generated_at: datetime
    status: Status
    action: Remedy  # the recommended remedy (a user rule's, else the catalogue's)
    health_score: int
    fatal: bool
    findings: tuple[str, ...] = ()
    notice_kind: NoticeKind | None = None  # a spot preemption or a maintenance event
    notice_deadline: datetime | None = None
    process_count: int | None = None
    utilization_pct: float | None = None
    gpu_count: int = 0
    stored_at: datetime | None = None
    fault_key: FaultKey | None = None  # the fault the report shows (reports._fault_check)
    #: the agent's consecutive checks that saw fault_key (0: not reported): what
    #: unhealthy_after counts when the agent checks more often than it writes
    consecutive: int = 0
    #: the report's acceptance run, its text made plain and capped (node_text); None: the
    #: agent runs no acceptance suite
    acceptance: AcceptanceRun | None = None
    #: when the agent first saw fault_key (its clock, aware UTC; None: not reported): what
    #: a remediation table row's wait counts from (navarch.fleet.remedies)
    first_seen: datetime | None = None

    @property
    def clock_skew_s(self) -> float | None:
        """generated_at - stored_at in seconds (positive: the node's clock is ahead of the
        store's), or None when stored_at is unknown."""
        if self.stored_at is None:
            return None
        return (self.generated_at - self.stored_at).total_seconds()

    @property
    def observed_at(self) -> datetime:
        """When the report was made, by the best clock known: stored_at, else generated_at."""
        return self.stored_at or self.generated_at


@dataclass(frozen=True)
class ReportObservation:
    """One node's report as read this run.

    summary: the newest accepted report (None if the node never had one accepted).
    version: store version of the object read (None if no object).
    rejected: why this run's object was rejected, or None.
    stored_at: the store's modification time of the object read (None if unknown).
    """

    node: str
    pool: str
    summary: ReportSummary | None
    version: str | None
    rejected: RejectReason | None = None
    stored_at: datetime | None = None


class DiagState(enum.StrEnum):
    """Where a node's diagnostics stand. DUE: cordoned for it, not started; RUNNING: started
    on the node (detached), no result yet; then the verdict of navarch.remote.diagnostics
    (pass, fail, unavailable: no dcgmi on the node, error: no verdict). Only FAIL is a fault."""

    DUE = "due"
    RUNNING = "running"
    PASS = "pass"
    FAIL = "fail"
    UNAVAILABLE = "unavailable"
    ERROR = "error"


@dataclass(frozen=True)
class Diag:
    """A node's last active diagnostics (dcgmi diag), kept in Memory and shown in status.

    level: dcgmi diag -r level (1-3); why: DiagWhy; state: DiagState; at: when this state
    was recorded (aware UTC); started_at: when the run on the node started (None while
    DUE); detail: one line (the failed tests and GPUs, or why there is no verdict).
    """

    level: int
    why: DiagWhy
    state: DiagState
    at: datetime
    started_at: datetime | None = None
    detail: str = ""


@dataclass(frozen=True)
class Cordon:
    """Why a node is out of its scheduler, one value for every reader (NodeMemory.cordon).

    cause: the cordon's ActionReason, the latest when one cordon takes over another
    (OFFLINE: reports fell silent, doubt that never terminates alone; IMPAIRED_FIRST_SEEN:
    the cloud's first impaired listing; SCALE_DOWN; DIAGNOSTICS: scheduled diagnostics,
    uncordoned after them; ACCEPTANCE: kept from the scheduler while it runs acceptance, no phase;
    OPERATOR: `navarch cordon`, never undone automatically; REMEDY: out for an in-place
    remedy; else the fault's or change's reason). at: when (aware UTC; None when a state
    written before this type did not say). by: who ("" navarch, else the operator).
    fault: the fault key it answers (FaultKey.format, "" none). idle: the node served
    nothing when cordoned (a warm spare, a node in acceptance), so its leaving takes no place
    of max_unavailable. repair: to be replaced, counted toward the hourly repair limit.
    note: the operator's reason ("operator: ..."), "" otherwise.
    """

    cause: ActionReason
    at: datetime | None = None
    by: str = ""
    fault: str = ""
    idle: bool = False
    repair: bool = False
    note: str = ""

    @property
    def is_operator(self) -> bool:
        """An operator's cordon: only `navarch uncordon` (or --replace) ends it."""
        return self.cause is ActionReason.OPERATOR

    @property
    def silent(self) -> bool:
        """Cordoned because its reports fell silent (navarch.planner.silence)."""
        return self.cause is ActionReason.OFFLINE

    @property
    def impaired(self) -> bool:
        """Cordoned on the cloud's first impaired listing, not yet confirmed."""
        return self.cause is ActionReason.IMPAIRED_FIRST_SEEN

    @property
    def scale_down(self) -> bool:
        """Cordoned for a scale-down: its termination is a scale-down."""
        return self.cause is ActionReason.SCALE_DOWN

    @property
    def diagnostics(self) -> bool:
        """Cordoned for scheduled diagnostics (returned after them)."""
        return self.cause is ActionReason.DIAGNOSTICS

    @property
    def acceptance(self) -> bool:
        """Cordoned while it runs acceptance (uncordoned when the acceptance passes)."""
        return self.cause is ActionReason.ACCEPTANCE

    @property
    def serves_nothing(self) -> bool:
        """Out of service without holding work: in acceptance, or idle when cordoned."""
        return self.idle or self.acceptance

    def after_remedy(self, *causes: ActionReason) -> Cordon:
        """The cordon once an in-place remedy takes the node: a cordon for one of `causes`
        is now the remedy's (the node is out for the remedy, no longer for that cause)."""
        return replace(self, cause=ActionReason.REMEDY) if self.cause in causes else self


#: The cordon causes an in-place remedy supersedes (handlers' _remedied).
REMEDY_SUPERSEDES = (
    ActionReason.DIAGNOSTICS,
    ActionReason.IMPAIRED_FIRST_SEEN,
    ActionReason.OFFLINE,
    ActionReason.SCALE_DOWN,
)


@dataclass(frozen=True)
class NodeMemory:
    """Per-node facts earlier runs saw and did."""

    node: str
    pool: str
    instance_id: str | None = None
    first_seen_at: datetime | None = None
    phase: Phase = Phase.NONE
    phase_at: datetime | None = None  # when the phase was entered
    phase_reason: str = ""
    report_version: str | None = None
    #: why the object at report_version was rejected (None: it was not)
    report_rejected: RejectReason | None = None
    report: ReportSummary | None = None
    streak: int = 0  # consecutive distinct unhealthy reports
    streak_sequence: int = 0  # sequence of the last report counted in streak
    launch: tuple[tuple[str, str], ...] = ()  # PoolSpec.launch_settings() it was launched with
    # The remediation ladder's memory:
    fault: Fault | None = None  # the last fault navarch acted on
    faults: tuple[tuple[str, datetime], ...] = ()  # (fault key, when), within the windows
    rung: Remedy | None = None  # the last remedy tried, for the fault kind rung_fault
    rung_fault: str = ""  # the FaultKey.kind the rung answered
    rung_at: datetime | None = None
    return_streak: int = 0  # distinct healthy reports from a boot later than the fault
    #: why it is out of its scheduler (None: navarch and its operators hold it in service)
    cordon: Cordon | None = None
    diag: Diag | None = None  # the last active diagnostics
    impaired_since: datetime | None = None  # first run of an unbroken impaired listing
    #: "<boot_id>/<reset>" of the acceptance run the planner accepted ("": none): a node
    #: past acceptance on that boot is not judged against its pool's figures again
    accepted: str = ""
    #: the multi-node NCCL result (nccl_multi_node) for the acceptance run peer_run
    #: ("<boot_id>/<reset>", navarch.planner.acceptance.run_key) with a known-good peer
    peer_test: AcceptanceResult | None = None
    peer_run: str = ""


@dataclass(frozen=True)
class Exhausted:
    """A (provider, zone, instance_type, spot) place that answered 'no capacity', until
    `until`; failures: how many times in a row (the backoff doubles per failure)."""

    zone: str
    instance_type: str
    spot: bool
    until: datetime
    failures: int = 1
    provider: str = field(kw_only=True)


#: A pool's ssh mapping as stored: (key, value) pairs in key order (fleet.schema.json
#: $defs.ssh holds only scalars).
SshSettings = tuple[tuple[str, str | int | float | bool], ...]


@dataclass(frozen=True)
class PoolSettings:
    """What retiring a pool's nodes needs once the pool has left fleet.yaml: its scheduler
    (none, slurm, kubernetes), playbook overrides (kind -> path relative to fleet.yaml)
    and ssh mapping as the pool declared them, its drain_timeout and stale_after in
    seconds, and its disruption budget as a node count (max_unavailable of its target).

    observe() records it in PoolMemory every run the pool is declared. The defaults are
    fleet.schema.json's (scheduler none, drain_timeout 30m, stale_after 6m,
    max_unavailable 1): what an orphan is retired with when its pool's settings are
    unknown (a state written before navarch kept them).
    """

    scheduler: Scheduler = Scheduler.NONE
    playbooks: tuple[tuple[str, str], ...] = ()
    ssh: SshSettings = ()
    drain_timeout_s: int = 1800
    stale_after_s: int = 360
    max_unavailable: int = 1


@dataclass(frozen=True)
class PoolMemory:
    pool: str
    next_index: int = 1
    repairs: tuple[datetime, ...] = ()  # when each repair (replacement cordon) started
    exhausted: tuple[Exhausted, ...] = ()
    desired: int | None = None  # autoscaled desired count
    desired_from_target: int | None = None  # spec target the autoscaled count started from
    scaled_at: datetime | None = None
    lemons: tuple[str, ...] = ()  # instance ids replaced as lemons (uncordon needs --force)
    # Faults per physical host where the cloud exposes one (Instance.host_id):
    # (host id, fault key, when), kept for lemon_window; hosts whose nodes were lemons.
    host_faults: tuple[tuple[str, str, datetime], ...] = ()
    lemon_hosts: tuple[str, ...] = ()
    # What the pool's nodes are retired with once it leaves fleet.yaml (None: unknown).
    settings: PoolSettings | None = None
    # When navarch first cordoned a node of the pool after it left fleet.yaml: its
    # retirement is under way and the orphan guard has been passed (None: not started).
    retiring_since: datetime | None = None
    # Nodes held as warm spares (cordoned from the scheduler, not serving), sorted by name:
    # the designation survives runs; the planner's spares stage alone decides it.
    spares: tuple[str, ...] = ()
    # Nodes terminated to be replaced whose replacement has not launched yet (replacement:
    # after-terminate), oldest first: the replacement still lands where they sat.
    vacancies: tuple[Vacancy, ...] = ()
    # When observe first saw the pool with acceptance enabled (None: acceptance off): a
    # node launched before then was not launched to run acceptance, so it is not held for a run.
    acceptance_since: datetime | None = None
    # (node, baseline) of the new nodes that failed acceptance's relative comparison in a row
    # against the same baseline (navarch.planner.acceptance_figures.BASELINE_SUSPECT_AFTER).
    baseline_misses: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Pause:
    """`navarch pause FLEET --reason TEXT`: every run plans and reports but acts on nothing
    until `navarch resume`. by: who paused ("user@host"); at: when (aware UTC); reason: the
    operator's words (plain, capped)."""

    by: str
    at: datetime
    reason: str


@dataclass(frozen=True)
class Memory:
    """The reconciler's memory, state/<fleet>.json. serial grows with every write.

    nodes: a NodeTable (built from any iterable of NodeMemory); pools sorted by name.
    """

    fleet: str
    serial: int = 0
    lineage: str = ""
    nodes: NodeTable[NodeMemory] = field(default_factory=NodeTable)
    pools: tuple[PoolMemory, ...] = ()
    rejections: tuple[tuple[str, int], ...] = ()  # reason -> count, cumulative
    pause: Pause | None = None  # `navarch pause`: the planner holds every action

    def __post_init__(self) -> None:
        if not isinstance(self.nodes, NodeTable):
            object.__setattr__(self, "nodes", NodeTable(self.nodes))

    def node(self, name: str) -> NodeMemory | None:
        """The node's memory, or None. O(log N)."""
        return self.nodes.get(name)

    def pool(self, name: str) -> PoolMemory:
        for p in self.pools:
            if p.pool == name:
                return p
        return PoolMemory(pool=name)

    def with_node(self, nm: NodeMemory) -> Memory:
        """A copy with nm replacing the node of the same name. O(log N)."""
        return replace(self, nodes=self.nodes.set(nm))

    def with_nodes(self, nodes: Iterable[NodeMemory], without: Iterable[str] = ()) -> Memory:
        """A copy with each of `nodes` replacing the node of its name, and the nodes named
        in `without` removed. O(k log N) for k changes."""
        return replace(self, nodes=self.nodes.updated(nodes, without))

    def without_node(self, name: str) -> Memory:
        """A copy without the named node (no error when absent). O(log N)."""
        return replace(self, nodes=self.nodes.discard(name))

    def with_pool(self, pm: PoolMemory) -> Memory:
        others = tuple(p for p in self.pools if p.pool != pm.pool)
        return replace(self, pools=tuple(sorted(others + (pm,), key=lambda p: p.pool)))


@dataclass(frozen=True)
class NodeView:
    """One owned node as this run sees it."""

    node: str
    pool: str
    lifecycle: Lifecycle
    reason: str
    instance: Instance | None
    summary: ReportSummary | None
    report_age_s: float | None
    streak: int
    phase_at: datetime | None = None
    rejected: RejectReason | None = None
    immediate: bool = False  # fatal XID or notice: act without waiting for a streak
    drained: bool | None = None  # drain check result where known
    drift: str | None = None  # why the node no longer matches its pool (None: it does)
    tags_drift: tuple[tuple[str, str], ...] = ()  # pool labels to set on it in place
    deadline: datetime | None = None  # maintenance: the cloud acts at this time
    # What the remediation ladder reads (copied from NodeMemory).
    fault: Fault | None = None
    faults: tuple[tuple[str, datetime], ...] = ()
    rung: Remedy | None = None
    rung_fault: str = ""
    rung_at: datetime | None = None
    return_streak: int = 0
    diag: Diag | None = None
    cordon: Cordon | None = None  # NodeMemory.cordon
    impaired: bool = False  # the lifecycle comes from the cloud's own status, not a report
    orphan: bool = False  # its pool is no longer in fleet.yaml (retired: cordon, drain, terminate)
    #: acceptance's verdict when the node is being or was just judged (navarch.planner.acceptance)
    acceptance: Acceptance | None = None
    #: the known-good peer its acceptance waits on for the multi-node NCCL test ("": none)
    peer: str = ""
    #: Acceptance.HELD: the pool-wide finding that holds it, the same words for every node it
    #: holds (one halt per pool and finding); or a serving node's flag: a figure of its own
    #: that the acceptance refused as implausible ("": none)
    finding: str = ""

    @property
    def counts_against_budget(self) -> bool:
        """Whether its leaving takes a place of max_unavailable: not when it was cordoned
        while serving nothing (Cordon.idle; docs/design.md, Safety rules, rule 3)."""
        return self.cordon is None or not self.cordon.idle

    @property
    def impaired_cordon(self) -> bool:
        """Whether it is cordoned on the cloud's first impaired listing (Cordon.impaired)."""
        return self.cordon is not None and self.cordon.impaired


#: The one payload shape each kind carries; a kind not listed carries none.
PAYLOAD_TYPES: dict[ActionKind, type[Payload]] = {
    ActionKind.PROVISION: ProvisionPayload,
    ActionKind.CORDON: CordonPayload,
    ActionKind.TERMINATE: TerminatePayload,
    ActionKind.REBOOT: RemedyPayload,
    ActionKind.RESET_GPU: RemedyPayload,
    ActionKind.DIAGNOSE: DiagnosePayload,
    ActionKind.UNCORDON: UncordonPayload,
    ActionKind.SCALE: ScalePayload,
    ActionKind.UPDATE_TAGS: TagsPayload,
    ActionKind.NCCL_PEER: PeerPayload,
}

#: The kinds whose payload fields all have defaults: an action of one may omit its payload.
_DEFAULT_PAYLOADS: dict[ActionKind, Payload] = {
    ActionKind.PROVISION: ProvisionPayload(),
    ActionKind.CORDON: CordonPayload(),
    ActionKind.TERMINATE: TerminatePayload(),
    ActionKind.UNCORDON: UncordonPayload(),
}

_P = TypeVar("_P", bound=Payload)


@dataclass(frozen=True)
class Action:
    """One change the plan makes. reason is for humans ("XID 79: GPU has fallen off ...");
    action_reason is the same as a code (JSON plan). payload: the fields that go with the
    kind, of the one type PAYLOAD_TYPES names for it (None for a kind with none; for a
    kind whose payload fields all have defaults, None is taken as the default payload),
    the way Terraform's plan carries one change shape per action.

    Raises TypeError when the payload is not the kind's shape.
    """

    kind: ActionKind
    pool: str
    node: str | None
    reason: str
    instance_id: str | None = None
    payload: Payload | None = None
    action_reason: ActionReason = field(kw_only=True)

    def __post_init__(self) -> None:
        want = PAYLOAD_TYPES.get(self.kind)
        if self.payload is None and self.kind in _DEFAULT_PAYLOADS:
            object.__setattr__(self, "payload", _DEFAULT_PAYLOADS[self.kind])
        if (want is None) != (self.payload is None) or (
            want is not None and type(self.payload) is not want
        ):
            raise TypeError(
                f"a {self.kind.value} action carries "
                f"{want.__name__ if want else 'no payload'}, not {type(self.payload).__name__}"
            )

    def carries(self, shape: type[_P]) -> _P:
        """The payload as `shape`. Raises TypeError when this kind carries another."""
        if not isinstance(self.payload, shape):
            raise TypeError(f"a {self.kind.value} action carries no {shape.__name__}")
        return self.payload

    @property
    def fault(self) -> Fault | None:
        """The fault the action answers (a cordon, a termination or a rung), else None."""
        p = self.payload
        return p.fault if isinstance(p, CordonPayload | TerminatePayload | RemedyPayload) else None

    @property
    def replaces(self) -> str | None:
        """The node the action stands in for: a provision's, or a promoted spare's."""
        p = self.payload
        return p.replaces if isinstance(p, ProvisionPayload | UncordonPayload) else None

    @property
    def after(self) -> str:
        """The node whose launch this action waits for (a termination's
        TerminatePayload.after), "" for none: the executor's ordering question."""
        p = self.payload
        return p.after if isinstance(p, TerminatePayload) else ""

    @property
    def repair(self) -> bool:
        """Whether the action starts a repair (a cordon or a rung; the hourly limit)."""
        p = self.payload
        return p.repair if isinstance(p, CordonPayload | RemedyPayload) else False


class HaltRule(RenamedStrEnum):
    """The safety rule (or limit) that held actions back; serialised by value."""

    CIRCUIT_BREAKER = "circuit_breaker"
    DISRUPTION_BUDGET = "disruption_budget"
    REPAIR_RATE_LIMIT = "repair_rate_limit"
    CAPACITY = "capacity"
    MAX_NODES = "max_nodes"
    ORPHAN_GUARD = "orphan_guard"
    DUPLICATE_NODE = "duplicate_node"
    MAX_LAUNCHES = "max_launches"
    PAUSED = "paused"  # `navarch pause`: every action held until `navarch resume`
    #: block_fault_after nodes of one topology block failed within block_fault_window:
    #: a rack or switch fault; the ladder stops for the block until a human looks
    BLOCK_FAULT = "block_fault"
    #: a node of an acceptance pool reported no acceptance run by its deadline: its agent
    #: config or image lacks acceptance; the node is held in acceptance, the pool notified
    NO_ACCEPTANCE_RUN = "no_acceptance_run"
    #: acceptance replacements held for a finding about the pool, not its nodes: a setting or
    #: version drift of the image, a declared baseline no serving node has, or a relative
    #: baseline that new nodes keep failing (navarch.planner.acceptance); notified
    ACCEPTANCE_HELD = "acceptance_held"

    @property
    def safety_stop(self) -> bool:
        """True for rules that stop a run for a human (exit 3): breaker, orphan guard,
        duplicate node names, more launches than safety.max_launches_per_run, a block
        (rack or switch) fault. Budget, rate limit, capacity and max pace a converging run;
        a pause was asked for by a human, who expects runs to say so, not to fail."""
        return self in _SAFETY_STOPS


_SAFETY_STOPS = frozenset(
    {
        HaltRule.CIRCUIT_BREAKER,
        HaltRule.ORPHAN_GUARD,
        HaltRule.DUPLICATE_NODE,
        HaltRule.MAX_LAUNCHES,
        HaltRule.BLOCK_FAULT,
    }
)


@dataclass(frozen=True)
class Halt:
    """A safety rule stopped actions in a pool (or "*" for the fleet). rule: a HaltRule
    (a rule's value is accepted and converted); node: the one node it holds back, where it
    holds one (the disruption budget, the repair rate limit), so `--replace NODE` can say
    what holds it; not part of the plan's JSON."""

    pool: str
    rule: HaltRule
    message: str
    node: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rule", HaltRule(self.rule))

    @property
    def safety_stop(self) -> bool:
        """True for rules that stop a run for a human (exit 3); see HaltRule.safety_stop."""
        return self.rule.safety_stop


@dataclass(frozen=True)
class Plan:
    """The changes one run would make, in execution order, plus why some were held back."""

    fleet: str
    created_at: datetime
    actions: tuple[Action, ...]
    halts: tuple[Halt, ...] = ()
    notes: tuple[str, ...] = ()
    state_serial: int = 0
    inventory_fingerprint: str = ""
    pending: tuple[str, ...] = ()  # differences from fleet.yaml this run does not act on
    observation_fingerprint: str = ""  # digest of the views and halts (saved-plan check)
    views: tuple[NodeView, ...] = field(default=(), compare=False)
    foreign: tuple[Instance, ...] = field(default=(), compare=False)
    #: set on a partial run (an event-started run that read only the reports its events
    #: named and planned nothing else: navarch.planner.quiet): what it did and did not look
    #: at. Such a plan is never converged: it cannot say the world matches fleet.yaml.
    partial: str = ""
    would: tuple[Would, ...] = ()  # held back by the pools' modes: shown, never executed

    @property
    def breaker_open(self) -> bool:
        return any(h.rule is HaltRule.CIRCUIT_BREAKER for h in self.halts)

    @property
    def paused(self) -> Halt | None:
        """The fleet's pause (`navarch pause`: who, when, why) when this plan was made
        paused, else None."""
        return next((h for h in self.halts if h.rule is HaltRule.PAUSED and h.pool == "*"), None)

    @property
    def safety_stopped(self) -> bool:
        """A safety rule stopped something for a human to look at (exit 3)."""
        return any(h.safety_stop for h in self.halts)

    @property
    def converged(self) -> bool:
        """The world matches fleet.yaml: nothing to do, nothing held back, nothing waiting.

        Only then may a plan say "No changes" (and --detailed-exitcode exit 0).
        """
        return not (self.actions or self.would or self.halts or self.pending or self.partial)


@dataclass(frozen=True)
class Vacancy:
    """Where a node navarch terminated to replace sat, while its replacement is owed
    (navarch.planner.vacancies): node name, (provider, zone), topology block ("" when the
    cloud reports none) and when it was terminated (aware UTC)."""

    node: str
    provider: str
    zone: str
    block: str
    at: datetime

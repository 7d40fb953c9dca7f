"""The simulated world: instances, agents, faults and jobs (its Provider: navarch.simulate.provider).

Time is continuous: the world holds one event queue (heapq) of what happens next (a fault
strikes, an application XID burst, a spot notice and its preemption, a boot completes,
the cloud lists a dead host impaired, a job ends after a cordon or starts on a serving
node, an agent check). The engine (navarch.simulate.engine) pops events in time order and
runs the reconciler at its ticks.

Randomness comes from common random numbers: one random.Random per (seed, purpose, key)
(``World.stream``), e.g. a node's fault schedule is drawn from its own stream, relative to
its launch, so two policies on one seed face the same faults on the same nodes however
differently they answer them. A node's fault process runs for the life of its instance:
a reboot or a GPU reset cures a fault, never the hardware's odds of the next one.

Every node runs the shipped agent (navarch.simulate.node) on its own cadence: checks on a
grid (boot + phase + k * agent_period). A node is ACTIVE after any change of what its agent
reads (a fault, a cure, a new boot, a GPU reset, a notice, jobs starting or ending, its
store writes failing) and runs every check until it is QUIESCENT: no check with a fault,
the check wrote nothing, and its verdict's run of checks reached STREAK_WRITE_CAP. A
quiescent node's later checks would each read the same inputs and write nothing until its
heartbeat, so they are not run; its heartbeats are materialised lazily (``catch_up``): the
real agent runs once at the latest heartbeat check time before the moment its report can
be read (an executed reconcile run, or a change on the node). Heartbeats nobody reads are
never built, so a report's sequence counts the reports written, not the heartbeats due.

Each cause of failure is what the node's hardware would show that agent:
  xid79    the driver logs XID 79 (GPU fallen off the bus) in the kernel log
  hbm_ecc  the driver logs XID 48, 64 or 95 (uncorrectable ECC, row-remap failure,
           uncontained error)
  nvlink   an NVLink link of GPU 0 is down (fake GPU readings)
  gpu_lost GPU 0 is lost (fake GPU readings)
  thermal  GPU 0 at 95 C, past its 92 C shutdown threshold (fake GPU readings)
  host_down the host stops: no reports at all; the cloud lists it impaired after a delay
  network, fabric, gpu_hung, host_cpu, host_memory, host_storage, pcie, clock
           the finding of that class's check (an InfiniBand port flapping, the fabric's
           health, an NVML call past its deadline, a soft lockup, ...), as
           navarch.providers.local.faults gives it, until cured
  software a burst of application XIDs (13, 31, 43, 45): must cause nothing
A fault the node still has after a reboot or a GPU reset shows again (the XID is logged
again in the new boot, the readings stay). The sources of every number are in
navarch.simulate.scenario.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from navarch.agent.config import AgentConfig
from navarch.agent.gpu import FakeFaults
from navarch.agent.runner import STREAK_WRITE_CAP
from navarch.errors import StoreError
from navarch.inventory import NO_CLOUD_STATUS, CloudStatus, Instance, InstanceHealth
from navarch.providers.local.faults import INJECTABLE, finding
from navarch.report import signing
from navarch.report.acceptance import AcceptancePolicy
from navarch.simulate.acceptance import draw_latent
from navarch.simulate.node import SimAgent
from navarch.simulate.scenario import CURES, Scenario
from navarch.simulate.store import MemoryStore
from navarch.stores.base import Blob, ObjectInfo

DAY_S = 86400
APP_XIDS = (13, 31, 43, 45)
# An HBM failure that interrupts a job, as the Llama 3 study counts them: the fatal ECC XIDs
# of the NVIDIA catalogue (48 double-bit, 64 row-remap failure, 95 uncontained). XID 63 (a
# row remapped) and 94 (a contained error) are warnings the node serves through.
ECC_XIDS = (48, 64, 95)
XID_CAUSES = ("xid79", "hbm_ecc")
#: cause -> the fake GPU readings it gives GPU 0 (navarch.agent.gpu.FakeFaults); a cause
#: named after a fault class the fake does not read (network, fabric, the host, a hung
#: call) shows its representative finding, as `navarch local inject --fault` gives it.
DEVICE_FAULTS = {
    "nvlink": FakeFaults(nvlink_down=frozenset({0})),
    "gpu_lost": FakeFaults(gpu_lost=frozenset({0})),
    "thermal": FakeFaults(temperature_c={0: 95.0}),
    **{row.fault_class.value: FakeFaults(findings=(finding(row, 0),)) for row in INJECTABLE},
}
APP_BURST_LINES = 40  # an application XID prints dozens of lines per fault


@dataclass
class SimNode:
    """One simulated machine (an instance, the agent on it, and its jobs).

    Times are seconds since the simulation's start. up_at: when the current boot completes
    (None: the launch never completes). anchor_s: the current boot's check grid (checks at
    anchor_s + k * agent_period). epoch: bumped by every new boot and the termination, so
    events scheduled for an earlier boot are dropped (faults are not: they are keyed on the
    instance). never_boots: the host hangs in every boot (scenario.never_boots_rate).
    """

    instance: Instance
    node: str
    pool: str
    gpus: int
    launched_s: float
    up_at: float | None
    agent: SimAgent
    boot: int = 1
    epoch: int = 0
    anchor_s: float = 0.0
    active: bool = False
    last_write_s: float | None = None
    first_report_s: float | None = None  # first report written of the latest boot
    fault: str | None = None
    fault_s: float | None = None
    fault_code: int = 0
    fault_ordinal: int = 0  # faults this node has had (the cure streams' key)
    lemon: bool = False
    busy: bool = False  # GPU processes run
    cordoned: bool = False  # navarch's cordon holds (the scheduler places no work)
    released: bool = True  # the planner let work onto it (in a pool with acceptance: passed)
    work_pending: bool = False  # a job start or end is scheduled
    notice_s: float | None = None
    silent_since: float | None = None  # the agent crashed: it runs nothing ...
    silent_until: float | None = None  # ... until then
    cut_off_until: float | None = None  # its writes fail (a failing disk path, a partition)
    had_fault: bool = False  # a real fault ever, this instance (a reboot may have cured it)
    never_boots: bool = False
    latent: str | None = None  # a fault only the acceptance suite sees (dead on arrival)

    @property
    def boot_id(self) -> str:
        return f"{self.instance.instance_id}-boot{self.boot}"

    def up(self, t: float) -> bool:
        """Booted and running its agent at t (a dead host runs nothing)."""
        return self.up_at is not None and t >= self.up_at and self.fault != "host_down"


class _NodeStore:
    """One node's view of the store: writes fail while the world says so (a store outage
    or agent outage window, or this node cut off), reads pass through unless cut off."""

    def __init__(self, world: World, node: SimNode) -> None:
        self.world = world
        self.node = node

    def get(self, key: str) -> Blob:
        if self.world.cut_off(self.node):
            raise StoreError(f"simulated partition: cannot read {key}")
        return self.world.store.get(key)

    def put(
        self, key: str, data: bytes, *, if_absent: bool = False, if_version: str | None = None
    ) -> str:
        if self.world.writes_fail() or self.world.cut_off(self.node):
            raise StoreError(f"simulated store outage: cannot write {key}")
        delay_s = self.node.agent.tool_s()
        if delay_s > 0 and not if_absent and if_version is None:
            # The check ran acceptance tools: its report lands when they are done.
            self.world.schedule(
                self.world.t + delay_s, "deliver", self.node.node, self.node.epoch, key, data
            )
            return "pending"
        return self.world.store.put(key, data, if_absent=if_absent, if_version=if_version)

    def list(self, prefix: str) -> Sequence[ObjectInfo]:
        return self.world.store.list(prefix)


class World:
    """The machines, the clock, the event queue and the failure processes of one run."""

    def __init__(
        self, scenario: Scenario, fleet: str, secret: bytes, start: datetime, lazy: bool = True
    ) -> None:
        self.scenario = scenario
        self.fleet = fleet
        self.secret = secret
        self.start = start
        self.lazy = lazy
        self.t = 0.0
        self.now = start
        self.nodes: dict[str, SimNode] = {}  # by instance id
        self.by_name: dict[str, SimNode] = {}
        self.store = MemoryStore(self.clock)
        self.api_calls: Counter[str] = Counter()
        self.counter = 0
        self.fault_log: list[dict[str, Any]] = []  # every real fault injected
        self.preempted = 0
        self.on_fault: Callable[[SimNode], None] | None = None
        self._keys: dict[str, bytes] = {}
        self._streams: dict[str, random.Random] = {}
        self.terminated: dict[str, SimNode] = {}  # by node name: what each terminate removed
        self.queue: list[tuple[float, int, str, tuple[Any, ...]]] = []
        self._seq = 0
        #: Something the reconciler reads changed since the last executed run.
        self.dirty = True
        self.agent_checks = 0
        self.reports_written = 0
        #: The engine's hook: n wrote a report that differs from its last (not a heartbeat).
        self.on_report: Callable[[SimNode], None] | None = None
        #: Called when the cloud's own status of a node changes (navarch.simulate.events).
        self.on_cloud_event: Callable[[SimNode], None] | None = None
        #: The engine's hook for a caught-up heartbeat: True when it accounted it without
        #: running the agent (navarch.simulate.heartbeats), False to run the agent.
        self.on_heartbeat: Callable[[SimNode], bool] | None = None
        #: The engine's hook for a report an active node wrote: whether a run would read
        #: anything new in it (False: the same verdict again; the world stays clean).
        self.on_write: Callable[[SimNode], bool] | None = None
        self._heartbeat_step_s = (
            math.ceil(scenario.heartbeat_s / scenario.agent_period_s) * scenario.agent_period_s
        )
        #: pool -> its acceptance suite (the agent's config, as cloud-init renders it)
        self.acceptance: dict[str, AcceptancePolicy] = {}
        #: pools whose new nodes take no work until the planner releases them (acceptance or
        #: warm spares: the planner decides which new node serves and which waits)
        self.gated: frozenset[str] = frozenset()

    # -- clock, streams, queue -------------------------------------------------------------
    def clock(self) -> datetime:
        """The virtual clock (navarch.reconcile.run.Clock): now in the simulation."""
        return self.now

    def set_time(self, t: float) -> None:
        """Move the clock to t seconds after the start."""
        self.t = t
        self.now = self.start + timedelta(seconds=t)

    def stream(self, purpose: str, key: str = "") -> random.Random:
        """The random stream of one purpose and key (common random numbers): the same seed
        gives every (purpose, key) the same draws whatever else happened."""
        name = f"{self.scenario.seed}:{purpose}:{key}"
        rng = self._streams.get(name)
        if rng is None:
            rng = self._streams[name] = random.Random(name)
        return rng

    def schedule(self, t: float, kind: str, *args: Any) -> None:
        """Push an event: kind and args are what World.handle receives at time t."""
        self._seq += 1
        heapq.heappush(self.queue, (t, self._seq, kind, args))

    def _in_window(self, windows: Sequence[Any], zone: str = "", itype: str = "") -> bool:
        for w in windows:
            if w.at_s <= self.t < w.at_s + w.for_s:
                if (not w.zone or w.zone == zone) and (
                    not w.instance_type or w.instance_type == itype
                ):
                    return True
        return False

    def cut_off(self, n: SimNode) -> bool:
        """Node n's agent cannot reach the store now (its own false signal)."""
        return n.cut_off_until is not None and self.t < n.cut_off_until

    def writes_fail(self) -> bool:
        """Agents cannot write now (a store outage or an agent outage window)."""
        return self._in_window(self.scenario.store_outages) or self._in_window(
            self.scenario.agent_outages
        )

    def _sorted(self) -> list[SimNode]:
        return [self.nodes[k] for k in sorted(self.nodes)]

    # -- the world's processes -------------------------------------------------------------
    def start_processes(self) -> None:
        """Schedule the fleet-wide windows (rack failures, outages' ends)."""
        for i, w in enumerate(self.scenario.rack_failures):
            self.schedule(float(w.at_s), "rack", i)
        for w in (*self.scenario.store_outages, *self.scenario.agent_outages):
            self.schedule(float(w.at_s), "outage")
            self.schedule(float(w.at_s + w.for_s), "outage")
        for w in self.scenario.zone_outages:
            self.schedule(float(w.at_s), "outage")
            self.schedule(float(w.at_s + w.for_s), "outage")

    def _boot_s(self, n: SimNode, first: bool) -> float:
        """Seconds from launch (first) or reboot to a running agent (scenario.boot_time)."""
        sc = self.scenario
        rng = self.stream("boot", f"{n.node}:{n.instance.instance_id}:{n.boot}")
        host_s = sc.draw_boot_s(rng)
        return host_s + (rng.uniform(sc.launch_min_s, sc.launch_max_s) if first else 0.0)

    def _next_fault(self, n: SimNode) -> None:
        """Schedule n's next hardware fault from its own stream (relative to its launch)."""
        rate = self.scenario.failure_rate_per_node_day * (
            self.scenario.lemon_multiplier if n.lemon else 1.0
        )
        if rate <= 0 or n.never_boots:
            return
        # Keyed on the instance, not the boot: a reboot leaves the hardware as it was.
        gap_s = self.stream("fault", n.node).expovariate(rate) * DAY_S
        self.schedule(self.t + gap_s, "fault", n.node, n.instance.instance_id)

    def _pick_cause(self, rng: random.Random) -> str:
        causes = sorted(self.scenario.causes.items())
        total = sum(w for _, w in causes)
        x = rng.random() * total
        for name, weight in causes:
            x -= weight
            if x < 0:
                return name
        return causes[-1][0]

    def new_node(self, n: SimNode) -> None:
        """A launched machine joins the world: its boot, fault, XID-burst and spot streams."""
        self.nodes[n.instance.instance_id] = n
        self.by_name[n.node] = n
        n.lemon = self.stream("lemon", n.node).random() < self.scenario.lemon_fraction
        if self.scenario.doa_rate > 0:
            n.latent = draw_latent(self.stream("doa", n.node), self.scenario.doa_rate)
        if n.pool in self.acceptance:
            n.agent.set_latent(n.latent)
        # No work until the planner passes its acceptance or leaves it out of the spare set.
        n.released = n.pool not in self.gated
        n.fault_s = None
        if n.up_at is not None:
            self.schedule(n.up_at, "boot_done", n.node, n.epoch)
        self._next_fault(n)
        sc = self.scenario
        if sc.app_xid_bursts_per_node_day > 0:
            gap_s = self.stream("app", n.node).expovariate(sc.app_xid_bursts_per_node_day) * DAY_S
            self.schedule(n.launched_s + gap_s, "app_xid", n.node, n.instance.instance_id)
        for kind, rate in (
            ("crash", sc.agent_crashes_per_node_day),
            ("cut_off", sc.cut_offs_per_node_day),
        ):
            if rate > 0:
                gap_s = self.stream(kind, n.node).expovariate(rate) * DAY_S
                self.schedule(n.launched_s + gap_s, "signal", n.node, n.instance.instance_id, kind)
        if n.instance.spot and sc.spot_preemptions_per_node_day > 0:
            gap_s = self.stream("spot", n.node).expovariate(sc.spot_preemptions_per_node_day)
            self.schedule(n.launched_s + gap_s * DAY_S, "notice", n.node, n.instance.instance_id)

    def _alive(self, name: str, iid_or_epoch: Any, by_epoch: bool) -> SimNode | None:
        n = self.by_name.get(name)
        if n is None or n.instance.instance_id not in self.nodes:
            return None
        if by_epoch and n.epoch != iid_or_epoch:
            return None
        if not by_epoch and n.instance.instance_id != iid_or_epoch:
            return None
        return n

    def handle(self, kind: str, args: tuple[Any, ...]) -> None:
        """Apply one event at the current time."""
        getattr(self, f"_on_{kind}")(*args)

    def _on_rack(self, index: int) -> None:
        w = self.scenario.rack_failures[index]
        healthy = [n for n in self._sorted() if n.fault is None]
        rng = self.stream("rack", str(index))
        for n in rng.sample(healthy, min(w.nodes, len(healthy))):
            self.inject(n, "host_down")

    def _on_outage(self) -> None:
        # Writes start or stop failing: every live node's next check notices it. A window
        # was queued before the checks due at its start, so those checks run inside it:
        # the heartbeats caught up are the ones before it (strict), as the exhaustive
        # engine writes them; a heartbeat due at the very start fails like the check.
        self.dirty = True
        for n in self._sorted():
            self.activate(n, strict=True)

    def _on_fault(self, name: str, iid: str) -> None:
        n = self._alive(name, iid, False)
        if n is None:
            return
        # Cause and XID are drawn whether or not the node can take the fault, so the
        # node's stream stays aligned across policies.
        rng = self.stream("fault", n.node)
        cause = self._pick_cause(rng)
        code = 79 if cause == "xid79" else rng.choice(ECC_XIDS)
        if cause == "software":
            code = rng.choice(APP_XIDS)
        if n.fault is None:
            self.inject(n, cause, code)
        self._next_fault(n)

    def _on_app_xid(self, name: str, iid: str) -> None:
        n = self._alive(name, iid, False)
        if n is None:
            return
        rng = self.stream("app", n.node)
        if n.up(self.t):
            self.activate(n)  # the heartbeats before the burst are caught up without it
            n.agent.log_xid(rng.choice(APP_XIDS), 0, self.now, count=APP_BURST_LINES)
        gap_s = rng.expovariate(self.scenario.app_xid_bursts_per_node_day) * DAY_S
        self.schedule(self.t + gap_s, "app_xid", n.node, iid)

    def _on_notice(self, name: str, iid: str) -> None:
        n = self._alive(name, iid, False)
        if n is None or n.notice_s is not None:
            return
        self.activate(n)  # the heartbeats before the notice are caught up without it
        n.notice_s = self.t
        deadline = self.now + timedelta(minutes=2)  # EC2's two-minute interruption warning
        n.agent.set_notice(
            {
                "kind": "preemption",
                "source": "aws",
                "deadline": deadline.isoformat(),
                "detail": "EC2 spot instance interruption notice",
            }
        )
        self.schedule(self.t + 120.0, "preempt", n.node, iid)

    def _on_preempt(self, name: str, iid: str) -> None:
        n = self._alive(name, iid, False)
        if n is None:
            return
        self._remove(n)
        self.preempted += 1
        self.dirty = True

    def _on_boot_done(self, name: str, epoch: int) -> None:
        n = self._alive(name, epoch, True)
        if n is None:
            return
        # The agent's timer starts with the boot at a phase of its own (systemd's
        # RandomizedDelaySec spreads a fleet's checks); whole seconds keep ages exact.
        phase_s = float(
            self.stream("boot", f"{n.node}:phase:{n.boot}").randrange(
                int(self.scenario.agent_period_s)
            )
        )
        n.anchor_s = math.ceil(self.t) + phase_s
        n.first_report_s = None
        self.activate(n)
        if not n.cordoned and n.released:
            self._schedule_work(n, start=True)

    def _on_signal(self, name: str, iid: str, kind: str) -> None:
        """A false signal starts on a healthy node: its agent crashes (silent for a drawn
        while), or its writes fail (a partition from the store); the next one is drawn."""
        n = self._alive(name, iid, False)
        if n is None:
            return
        sc = self.scenario
        rng = self.stream(kind, n.node)
        until_s = self.t + rng.uniform(sc.signal_min_s, sc.signal_max_s)
        rate = sc.agent_crashes_per_node_day if kind == "crash" else sc.cut_offs_per_node_day
        self.schedule(self.t + rng.expovariate(rate) * DAY_S, "signal", n.node, iid, kind)
        if kind == "crash":
            self.catch_up(n, self.t)
            n.silent_since, n.silent_until = self.t, until_s
            n.active = False
        else:
            self.catch_up(n, self.t)  # the heartbeats before it were written
            n.cut_off_until = until_s
            self.activate(n)
        self.dirty = True
        self.schedule(until_s, "signal_end", n.node, iid)

    def _on_signal_end(self, name: str, iid: str) -> None:
        n = self._alive(name, iid, False)
        if n is not None:
            self.activate(n)

    def _on_impair(self, name: str, epoch: int) -> None:
        n = self._alive(name, epoch, True)
        if n is None or n.fault != "host_down":
            return
        self.impair(n)
        self.dirty = True

    def _on_work(self, name: str, epoch: int, start: bool) -> None:
        n = self._alive(name, epoch, True)
        if n is None:
            return
        n.work_pending = False
        if start and (n.cordoned or not n.released or not n.up(self.t)):
            return
        if n.busy != start:
            # Caught up first: a heartbeat due before now read the jobs as they were then.
            self.activate(n)
            n.busy = start
            self._show(n)

    def _on_check(self, name: str, epoch: int) -> None:
        n = self._alive(name, epoch, True)
        if n is None or not n.active:
            return
        if not n.up(self.t) or self._silent(n, self.t):
            n.active = False
            return
        # The agent runs again: its crash is over even where no signal_end woke it (a job
        # ending during the crash had made it active), so its heartbeats are written again.
        n.silent_since = None
        self.run_agent(n)
        if self.lazy and self._quiescent(n):
            n.active = False
            return
        nxt = self.t + self.scenario.agent_period_s
        if n.agent.tool_s() > self.scenario.agent_period_s:
            nxt = self._grid_at_or_after(n, self.t + n.agent.tool_s())  # the tools ran on
        self.schedule(nxt, "check", n.node, n.epoch)

    def _on_deliver(self, name: str, epoch: int, key: str, data: bytes) -> None:
        """A check's report reaches the store once its acceptance tools are done (lost
        if the store cannot be written then, as the agent's write would fail)."""
        n = self._alive(name, epoch, True)
        if n is None or self.writes_fail() or self.cut_off(n):
            return
        self.store.put(key, data)
        self.dirty = True

    # -- agents ------------------------------------------------------------------------
    def _grid_at_or_after(self, n: SimNode, t: float) -> float:
        """The first check time of n's grid at or after t."""
        p = self.scenario.agent_period_s
        if t <= n.anchor_s:
            return n.anchor_s
        return n.anchor_s + math.ceil((t - n.anchor_s) / p) * p

    def activate(self, n: SimNode, strict: bool = False) -> None:
        """What n's agent reads changed now: catch up its heartbeats (strict: only those
        before now, see catch_up), then run every check."""
        self.dirty = True
        if n.active or not n.up(self.t):
            return
        self.catch_up(n, self.t, strict)
        if not self._silent(n, self.t):
            n.silent_since = None
        n.active = True
        self.schedule(self._grid_at_or_after(n, self.t), "check", n.node, n.epoch)

    def catch_up(self, n: SimNode, until_s: float, strict: bool = False) -> None:
        """Run a quiescent node's agent at its latest heartbeat check time <= until_s (<
        with strict: a tick runs before the checks due at its time); the heartbeats before
        it would be overwritten unread."""
        if n.active or not n.up(until_s) or n.last_write_s is None:
            return
        if n.up_at is not None and n.last_write_s < n.up_at:
            return  # a new boot: its first check writes anyway
        if n.silent_since is not None:
            # A crashed agent wrote nothing while it was down: only the heartbeats before
            # the crash were written (its first check after the restart runs as active).
            until_s = min(until_s, n.silent_since - 1e-6)
        first = self._grid_at_or_after(n, n.last_write_s + self.scenario.heartbeat_s)
        if first > until_s:
            return
        step = self._heartbeat_step_s
        at = first + math.floor((until_s - first) / step) * step
        if strict and at >= until_s:
            at -= step
            if at < first:
                return
        saved = self.t
        self.set_time(at)
        try:
            if self.on_heartbeat is None or not self.on_heartbeat(n):
                self.run_agent(n)
        finally:
            self.set_time(saved)

    def _silent(self, n: SimNode, t: float) -> bool:
        return n.silent_until is not None and t < n.silent_until

    def catch_up_all(self, strict: bool = True) -> None:
        """Materialise every quiescent node's latest heartbeat before a reconcile run."""
        for n in self._sorted():
            self.catch_up(n, self.t, strict)

    def run_agent(self, n: SimNode) -> None:
        """One check of n's agent now (the shipped run_once): a failed store write is what
        the real agent's timer logs; the next check retries. A host cut off by a zone
        outage runs nothing."""
        if self._in_window(self.scenario.zone_outages, n.instance.zone):
            return
        self.agent_checks += 1
        before = n.agent.host.state.written.get("change") if n.agent.host.state else None
        try:
            n.agent.run(self.now, _NodeStore(self, n))
        except StoreError:
            return
        written = n.agent.host.state.written if n.agent.host.state else {}
        if written.get("at_s") == self.now.timestamp():
            n.last_write_s = self.t
            self.reports_written += 1
            changed = n.first_report_s is None or written.get("change") != before
            if n.first_report_s is None:
                n.first_report_s = self.t
            if n.active and (self.on_write is None or self.on_write(n)):
                self.dirty = True
            # A heartbeat (the same report again) would start a run that plans nothing.
            if changed and self.on_report is not None:
                self.on_report(n)

    def _quiescent(self, n: SimNode) -> bool:
        """Whether n's next checks would read what this one read and write nothing until
        its heartbeat: no fault, nothing written now, its verdict's streak at the cap."""
        state = n.agent.host.state
        if (
            state is None
            or n.last_write_s == self.t
            or self.writes_fail()
            or self.cut_off(n)
            or self._in_window(self.scenario.zone_outages, n.instance.zone)
        ):
            return False
        report = n.agent.last_report
        if report is None or any(c.get("fault_key") for c in report["checks"]):
            return False
        return int(state.streaks.get(f"verdict|{report['status']}", 0)) >= STREAK_WRITE_CAP

    # -- world events ------------------------------------------------------------------
    def inject(self, n: SimNode, cause: str, code: int = 0) -> None:
        """Give node n a fault of this cause now (software: an application XID burst of
        `code`; hbm_ecc: XID `code`, one of ECC_XIDS)."""
        if cause == "software":
            if n.up(self.t):
                self.activate(n)
                n.agent.log_xid(code or APP_XIDS[0], 0, self.now, count=APP_BURST_LINES)
            return
        if n.fault is not None:
            return
        # The heartbeats written before the strike were written (a dead host's last one
        # is what the reconciler ages).
        self.catch_up(n, self.t)
        n.fault = cause
        n.fault_s = self.t
        n.fault_ordinal += 1
        n.had_fault = True
        n.fault_code = 79 if cause == "xid79" else (code if code in ECC_XIDS else ECC_XIDS[0])
        self.fault_log.append(
            {"node": n.node, "cause": cause, "t_s": round(self.t, 3), "code": n.fault_code}
        )
        if cause == "host_down":
            n.active = False
            delay_s = self.stream("impair", f"{n.node}:{n.fault_ordinal}").uniform(
                self.scenario.impair_min_s, self.scenario.impair_max_s
            )
            self.schedule(self.t + delay_s, "impair", n.node, n.epoch)
            self.dirty = True
        else:
            if n.up(self.t):
                self.activate(n)  # catch up on the healthy heartbeat before the fault shows
            self._show(n, xid_at=self.now)
        if self.on_fault is not None:
            self.on_fault(n)

    def impair(self, n: SimNode, detail: str = "instance status check failed") -> None:
        """The cloud lists node n's instance impaired from now on, as EC2's status checks
        list a dead host (SimProvider.list_instances carries it as Instance.cloud_status);
        the first run that sees it cordons the node, and a run IMPAIRED_AFTER_S or more
        later drains and replaces it."""
        status = CloudStatus(InstanceHealth.IMPAIRED, detail, since=self.now)
        n.instance = replace(n.instance, cloud_status=status)
        if self.on_cloud_event is not None:
            self.on_cloud_event(n)

    def restore(self, n: SimNode) -> None:
        """The cloud says nothing about node n's instance any more (its impairment ended)."""
        n.instance = replace(n.instance, cloud_status=NO_CLOUD_STATUS)

    def _show(self, n: SimNode, xid_at: datetime | None = None) -> None:
        """What n's hardware shows its agent: the XID logged at xid_at (a fault's strike or
        its return after a remedy), the device fault's readings and the running jobs."""
        if xid_at is not None and n.fault in XID_CAUSES:
            n.agent.log_xid(n.fault_code, 0, xid_at)
        faults = DEVICE_FAULTS.get(n.fault or "", FakeFaults())
        if n.busy:
            faults = replace(faults, process_count={i: 1 for i in range(n.gpus)})
        n.agent.set_faults(faults)

    def cure(self, n: SimNode) -> None:
        """A reboot or a GPU reset cured n's fault."""
        n.fault = None
        self._show(n)

    def _cures(self, n: SimNode, rung: str) -> bool:
        """Whether this rung cures n's fault (the scenario's cure table; one draw per
        node, fault and rung, so policies see the same luck)."""
        cause = n.fault or ""
        key = f"{cause}:{n.fault_code}" if cause in XID_CAUSES else cause
        p = self.scenario.cures.get(key, CURES.get(key, {})).get(rung, 0.0)
        draw = self.stream("cure", f"{n.node}:{n.fault_ordinal}:{rung}").random()
        return draw < p

    def _schedule_work(self, n: SimNode, start: bool) -> None:
        """Jobs start on a serving node a drawn while after it serves, and end a drawn
        while after a cordon (scenario.job_start / drain model)."""
        if n.work_pending or n.busy == start:
            return
        rng = self.stream("work", n.node)
        sc = self.scenario
        if start:
            delay_s = rng.uniform(sc.job_start_min_s, sc.job_start_max_s)
        else:
            delay_s = sc.drain_grace_s
            if rng.random() < sc.checkpoint_fraction:
                delay_s += rng.uniform(sc.checkpoint_min_s, sc.checkpoint_max_s)
        n.work_pending = True
        self.schedule(self.t + delay_s, "work", n.node, n.epoch, start)

    def release(self, n: SimNode) -> None:
        """The planner lets work onto n (a run saw it serving: past acceptance, not held as
        a spare): jobs start on it unless a cordon holds. In a gated pool the world starts
        jobs only on released nodes."""
        if n.released:
            return
        n.released = True
        if not n.cordoned and n.up(self.t):
            self._schedule_work(n, start=True)

    def cordoned(self, n: SimNode, on: bool) -> None:
        """navarch cordoned (on) or uncordoned n: its jobs end, or new ones start (an
        uncordon releases the node)."""
        n.cordoned = on
        n.released = n.released or not on
        n.work_pending = False
        self._schedule_work(n, start=not on)

    def _remove(self, n: SimNode) -> None:
        del self.nodes[n.instance.instance_id]
        n.epoch += 1
        n.active = False
        self.terminated[n.node] = n

    def new_agent(self, inst: Instance, node: str, pool: str, gpus: int, boot_id: str) -> SimAgent:
        """The agent of a newly launched machine, configured as cloud-init would."""
        key = self._keys.get(node)
        if key is None:
            key = self._keys[node] = signing.derive_node_key(self.secret, self.fleet, node)
        config = AgentConfig(
            fleet=self.fleet,
            pool=pool,
            node=node,
            store=self.store.url,
            instance_id=inst.instance_id,
            key=key.hex(),
            gpus_per_node=gpus,
            state_file="memory",
            fake_gpu=True,
            gpu_count=gpus,
            boot_id=boot_id,
            metadata="none",
            heartbeat_s=float(self.scenario.heartbeat_s),
            acceptance=self.acceptance.get(pool),
        )
        return SimAgent(config)

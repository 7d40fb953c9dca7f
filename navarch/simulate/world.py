"""The simulated world: instances, agents, faults, and the simulated Provider.

Everything random comes from one seeded random.Random, drawn in a fixed order, and time
is a virtual clock advanced by the engine, so a seed gives the same run byte for byte.

Every node runs the shipped agent (navarch.simulate.node): each cause of failure is what
the node's hardware would show that agent, and the report is whatever the agent makes of it:
  xid79    the driver logs XID 79 (GPU fallen off the bus) in the kernel log
  hbm_ecc  the driver logs XID 48, 64 or 95 (uncorrectable ECC, row-remap failure,
           uncontained error)
  nvlink   an NVLink link of GPU 0 is down (fake GPU readings)
  gpu_lost GPU 0 is lost (fake GPU readings)
  thermal  GPU 0 at 95 C, past its 92 C shutdown threshold (fake GPU readings)
  host_down the host stops: no reports at all until it is terminated
  software a burst of application XIDs (13, 31, 43, 45): must cause nothing
A fault the node still has after a reboot or a GPU reset shows again (the XID is logged
again in the new boot, the readings stay).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from navarch import signing
from navarch.agent.config import AgentConfig
from navarch.agent.gpu import FakeFaults
from navarch.errors import CapacityError, ProviderError, TransientError
from navarch.inventory import NO_CLOUD_STATUS, CloudStatus, Instance, InstanceHealth, InstanceState
from navarch.providers.base import ProvisionRequest, ensure_no_ownership_tags, ensure_owned
from navarch.simulate.node import SimAgent
from navarch.simulate.scenario import Scenario
from navarch.simulate.store import MemoryStore

DAY_S = 86400
APP_XIDS = (13, 31, 43, 45)
# An HBM failure that interrupts a job, as the Llama 3 study counts them: the fatal ECC XIDs
# of the NVIDIA catalogue (48 double-bit, 64 row-remap failure, 95 uncontained). XID 63 (a
# row remapped) and 94 (a contained error) are warnings the node serves through: drawing
# them as failures counted healthy, serving nodes as out of capacity for days.
ECC_XIDS = (48, 64, 95)
XID_CAUSES = ("xid79", "hbm_ecc")
#: cause -> the fake GPU readings it gives GPU 0 (navarch.agent.gpu.FakeFaults).
DEVICE_FAULTS = {
    "nvlink": FakeFaults(nvlink_down=frozenset({0})),
    "gpu_lost": FakeFaults(gpu_lost=frozenset({0})),
    "thermal": FakeFaults(temperature_c={0: 95.0}),
}
APP_BURST_LINES = 40  # an application XID prints dozens of lines per fault


@dataclass
class SimNode:
    """One simulated machine (an instance and the agent on it)."""

    instance: Instance
    node: str
    pool: str
    gpus: int
    ready_at: datetime
    agent: SimAgent
    boot: int = 1
    last_report_at: datetime | None = None
    fault: str | None = None
    fault_at: datetime | None = None
    fault_code: int = 0
    lemon: bool = False
    next_fault_at: datetime | None = None
    notice_at: datetime | None = None
    preempt_at: datetime | None = None
    silent_until: datetime | None = None  # zone outage: host unreachable for a while
    had_fault: bool = False  # a real fault ever, this instance (a reboot may have cured it)

    @property
    def boot_id(self) -> str:
        return f"{self.instance.instance_id}-boot{self.boot}"


class World:
    """The machines, the clock and the failure processes of one simulation."""

    def __init__(self, scenario: Scenario, fleet: str, secret: bytes, start: datetime) -> None:
        self.scenario = scenario
        self.fleet = fleet
        self.secret = secret
        self.start = start
        self.now = start
        self.rng = random.Random(scenario.seed)
        self.nodes: dict[str, SimNode] = {}  # by instance id
        self.store = MemoryStore(self.clock)
        self.api_calls: Counter[str] = Counter()
        self.counter = 0
        self.fault_log: list[dict[str, Any]] = []  # every real fault injected
        self.events: list[dict[str, Any]] = []  # timeline: faults and actions
        self.preempted = 0
        self.on_fault: Callable[[SimNode], None] | None = None
        self._keys: dict[str, bytes] = {}
        self.terminated: dict[str, SimNode] = {}  # by node name: what each terminate removed

    # -- helpers ---------------------------------------------------------------------
    def clock(self) -> datetime:
        """The virtual clock (navarch.reconcile.run.Clock): now in the simulation."""
        return self.now

    def at(self, offset_s: int) -> datetime:
        return self.start + timedelta(seconds=offset_s)

    def _active(self, windows: Sequence[Any], zone: str = "", itype: str = "") -> bool:
        for w in windows:
            if self.at(w.at_s) <= self.now < self.at(w.at_s + w.for_s):
                if (not w.zone or w.zone == zone) and (
                    not w.instance_type or w.instance_type == itype
                ):
                    return True
        return False

    def _boot_s(self) -> int:
        return self.rng.randint(self.scenario.boot_min_s, self.scenario.boot_max_s)

    def _schedule_fault(self, n: SimNode) -> None:
        rate = self.scenario.failure_rate_per_node_day * (
            self.scenario.lemon_multiplier if n.lemon else 1.0
        )
        n.next_fault_at = (
            self.now + timedelta(days=self.rng.expovariate(rate)) if rate > 0 else None
        )

    def _pick_cause(self) -> str:
        causes = sorted(self.scenario.causes.items())
        total = sum(w for _, w in causes)
        x = self.rng.random() * total
        for name, weight in causes:
            x -= weight
            if x < 0:
                return name
        return causes[-1][0]

    # -- world events ------------------------------------------------------------------
    def inject(self, n: SimNode, cause: str) -> None:
        """Give node n a fault of this cause now (software: an application XID burst)."""
        if cause == "software":
            code = self.rng.choice(APP_XIDS)
            n.agent.log_xid(code, 0, self.now, count=APP_BURST_LINES)
            return
        if n.fault is not None:
            return
        n.fault = cause
        n.fault_at = self.now
        n.had_fault = True
        n.fault_code = 79 if cause == "xid79" else self.rng.choice(ECC_XIDS)
        self._show_fault(n, self.now)
        rec = {
            "node": n.node,
            "pool": n.pool,
            "instance_id": n.instance.instance_id,
            "cause": cause,
            "at": self.now,
            "lemon": n.lemon,
        }
        self.fault_log.append(rec)
        if self.on_fault is not None:
            self.on_fault(n)

    def impair(self, n: SimNode, detail: str = "instance status check failed") -> None:
        """The cloud lists node n's instance impaired from now on, as EC2's status checks
        list a dead host (SimProvider.list_instances carries it as Instance.cloud_status);
        the planner acts on it on a run IMPAIRED_AFTER_S or more after the first that saw it."""
        status = CloudStatus(InstanceHealth.IMPAIRED, detail, since=self.now)
        n.instance = replace(n.instance, cloud_status=status)

    def restore(self, n: SimNode) -> None:
        """The cloud says nothing about node n's instance any more (its impairment ended)."""
        n.instance = replace(n.instance, cloud_status=NO_CLOUD_STATUS)

    def _show_fault(self, n: SimNode, at: datetime) -> None:
        """What n's hardware shows its agent of its fault from `at` on: the driver logs the
        XID (again, after a reboot or a reset that did not cure it); device faults stay in
        the GPU readings."""
        if n.fault in XID_CAUSES:
            n.agent.log_xid(n.fault_code, 0, at)
        n.agent.set_faults(DEVICE_FAULTS.get(n.fault or "", FakeFaults()))

    def cure(self, n: SimNode) -> None:
        """A reboot or a GPU reset cured n's fault."""
        n.fault = None
        n.fault_at = None
        n.agent.set_faults(FakeFaults())

    def step(self) -> None:
        """Advance the failure processes to self.now (called once per reconcile period)."""
        period_days = self.scenario.reconcile_period_s / DAY_S
        app_p = self.scenario.app_xid_bursts_per_node_day * period_days
        spot_p = self.scenario.spot_preemptions_per_node_day * period_days
        for w in self.scenario.rack_failures:
            if (
                self.at(w.at_s)
                <= self.now
                < self.at(w.at_s) + timedelta(seconds=self.scenario.reconcile_period_s)
            ):
                healthy = [n for n in self._sorted() if n.fault is None]
                for n in self.rng.sample(healthy, min(w.nodes, len(healthy))):
                    self.inject(n, "host_down")
        for n in self._sorted():
            if n.next_fault_at is not None and n.next_fault_at <= self.now:
                self.inject(n, self._pick_cause())
                self._schedule_fault(n)
            if app_p and self.rng.random() < app_p:
                self.inject(n, "software")
            if n.instance.spot and spot_p and n.notice_at is None and self.rng.random() < spot_p:
                n.notice_at = self.now
                n.preempt_at = self.now + timedelta(minutes=2)  # EC2 two-minute warning
                n.agent.set_notice(
                    {
                        "kind": "preemption",
                        "source": "aws",
                        "deadline": n.preempt_at.isoformat(),
                        "detail": "EC2 spot instance interruption notice",
                    }
                )
            if self._active(self.scenario.zone_outages, n.instance.zone):
                n.silent_until = self.now + timedelta(seconds=self.scenario.reconcile_period_s)
        for n in [n for n in self._sorted() if n.preempt_at and n.preempt_at <= self.now]:
            del self.nodes[n.instance.instance_id]
            self.preempted += 1
            self.events.append({"t": self.now, "kind": "preempted", "node": n.node})

    def _sorted(self) -> list[SimNode]:
        return [self.nodes[k] for k in sorted(self.nodes)]

    # -- agents ------------------------------------------------------------------------
    def agents(self) -> None:
        """Every booted agent whose period is due runs once: the shipped agent code writes
        its signed report to the store (navarch.simulate.node)."""
        silent = self._active(self.scenario.agent_outages) or self._active(
            self.scenario.store_outages
        )
        if silent:
            return
        period = timedelta(seconds=self.scenario.agent_period_s)
        for n in self._sorted():
            if self.now < n.ready_at or n.fault == "host_down":
                continue
            if n.silent_until is not None and self.now < n.silent_until:
                continue
            if n.last_report_at is not None and self.now - n.last_report_at < period:
                continue
            n.last_report_at = self.now
            n.agent.run(self.now, self.store)

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
        )
        return SimAgent(config)


class SimProvider:
    """The Provider protocol over the World (navarch.providers.base): boot times, stockouts
    per zone and type, zone outages (no capacity there), API error rates, spot notices."""

    def __init__(self, name: str, world: World, gpus_per_pool: Mapping[str, int]) -> None:
        self.name = name
        self.world = world
        self.gpus = gpus_per_pool
        self.launches: dict[str, str] = {}  # launch id -> instance id

    def _api(self, kind: str) -> None:
        self.world.api_calls[kind] += 1
        if self.world.scenario.api_error_rate and (
            self.world.rng.random() < self.world.scenario.api_error_rate
        ):
            raise TransientError(f"simulated API error on {kind}", code="RequestLimitExceeded")

    def list_instances(self, fleet: str) -> Sequence[Instance]:
        self.world.api_calls["list"] += 1
        return [n.instance for n in self.world._sorted() if n.instance.provider == self.name]

    def provision(self, request: ProvisionRequest) -> Instance:
        w = self.world
        existing = self.launches.get(request.launch_id)
        if existing is not None and existing in w.nodes:
            return w.nodes[existing].instance
        self._api("provision")
        if w._active(w.scenario.stockouts, request.zone, request.instance_type) or w._active(
            w.scenario.zone_outages, request.zone
        ):
            raise CapacityError(
                f"no {request.instance_type} capacity in {request.zone}",
                code="InsufficientInstanceCapacity",
                scope="zone",
            )
        w.counter += 1
        iid = f"i-{w.counter:08d}"
        inst = Instance(
            provider=self.name,
            instance_id=iid,
            zone=request.zone,
            instance_type=request.instance_type,
            state=InstanceState.RUNNING,
            launched_at=w.now,
            tags=tuple(sorted(request.tags.items())),
            spot=request.spot,
            address=None,
        )
        gpus = self.gpus.get(request.pool, 8)
        node = SimNode(
            inst,
            request.node,
            request.pool,
            gpus,
            ready_at=w.now + timedelta(seconds=w._boot_s()),
            agent=w.new_agent(inst, request.node, request.pool, gpus, f"{iid}-boot1"),
        )
        node.lemon = w.rng.random() < w.scenario.lemon_fraction
        w._schedule_fault(node)
        w.nodes[iid] = node
        self.launches[request.launch_id] = iid
        return inst

    def terminate(self, instances: Sequence[Instance]) -> None:
        ensure_owned(instances, self.world.fleet, "terminate")
        self._api("terminate")
        for i in instances:
            n = self.world.nodes.pop(i.instance_id, None)
            if n is not None:
                self.world.terminated[n.node] = n

    def reboot(self, instances: Sequence[Instance]) -> None:
        ensure_owned(instances, self.world.fleet, "reboot")
        self._api("reboot")
        w = self.world
        for i in instances:
            n = w.nodes.get(i.instance_id)
            if n is None:
                raise ProviderError(f"instance {i.instance_id} is gone", code="NotFound")
            n.boot += 1
            n.ready_at = w.now + timedelta(seconds=w._boot_s())
            n.agent.reboot(n.boot_id)
            n.last_report_at = None  # the agent's timer fires on boot (OnBootSec)
            # Faults are latched until a reboot; a reboot cures some of them.
            if (
                n.fault is not None
                and n.fault != "host_down"
                and (w.rng.random() < w.scenario.reboot_cures)
            ):
                w.cure(n)
            elif n.fault is not None and n.fault != "host_down":
                w._show_fault(n, n.ready_at)

    def reset_gpus(self, instance: Instance) -> str:
        """The ladder's GPU reset on a simulated node: the boot stays, the agent finds the
        reset marker; it cures the node's fault with the scenario's reboot_cures odds (a
        host that is down is not reached). Raises ProviderError for a node that is gone."""
        ensure_owned([instance], self.world.fleet, "reset")
        self._api("reset_gpu")
        w = self.world
        n = w.nodes.get(instance.instance_id)
        if n is None:
            raise ProviderError(f"instance {instance.instance_id} is gone", code="NotFound")
        if n.fault == "host_down":
            raise ProviderError(f"{instance.instance_id} does not answer", code="Unreachable")
        n.agent.reset_gpus()
        if n.fault is not None and w.rng.random() < w.scenario.reboot_cures:
            w.cure(n)
        elif n.fault is not None:
            w._show_fault(n, w.now)
        return f"GPUs of {instance.instance_id} reset"

    def diagnose(self, instance: Instance, level: int) -> tuple[str, str]:
        """dcgmi diag on a simulated node: fail while it has a fault, else pass; at once."""
        n = self.world.nodes.get(instance.instance_id)
        if n is None:
            return "error", f"instance {instance.instance_id} is gone"
        if n.fault is not None:
            return "fail", f"dcgmi diag -r {level} (simulated): {n.fault}"
        return "pass", f"dcgmi diag -r {level} (simulated): passed"

    def update_tags(self, instance: Instance, tags: Mapping[str, str]) -> None:
        ensure_no_ownership_tags(instance, tags)
        self._api("update_tags")
        n = self.world.nodes.get(instance.instance_id)
        if n is not None:
            merged = dict(n.instance.tags)
            merged.update(tags)
            n.instance = replace(n.instance, tags=tuple(sorted(merged.items())))

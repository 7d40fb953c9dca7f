"""The simulated Provider: the Provider protocol (navarch.providers.base) over the World
(navarch.simulate.world): boot times, failed launches, stockouts per zone and type, zone
outages, API errors."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import timedelta

from navarch.errors import CapacityError, ProviderError, TransientError
from navarch.inventory import Instance, InstanceState
from navarch.providers.base import ProvisionRequest, ensure_no_ownership_tags, ensure_owned
from navarch.providers.local import LocalProvider
from navarch.simulate.world import SimNode, World


class SimProvider:
    """The Provider protocol over the World (navarch.providers.base): boot times, failed
    launches, stockouts per zone and type, zone outages (no capacity there), API errors."""

    capabilities = LocalProvider.capabilities  # the simulated providers are of type local

    def __init__(self, name: str, world: World, gpus_per_pool: Mapping[str, int]) -> None:
        self.name = name
        self.world = world
        self.gpus = gpus_per_pool
        self.launches: dict[str, str] = {}  # launch id -> instance id

    def _api(self, kind: str) -> None:
        self.world.api_calls[kind] += 1
        if self.world.scenario.api_error_rate and (
            self.world.stream("api").random() < self.world.scenario.api_error_rate
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
        if w._in_window(w.scenario.stockouts, request.zone, request.instance_type) or w._in_window(
            w.scenario.zone_outages, request.zone
        ):
            raise CapacityError(
                f"no {request.instance_type} capacity in {request.zone}",
                code="InsufficientInstanceCapacity",
                scope="zone",
            )
        if w.stream("launch", request.node).random() < w.scenario.launch_failure_rate:
            raise TransientError(
                f"simulated launch failure of {request.node}", code="InternalError"
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
            launched_s=w.t,
            up_at=None,
            agent=w.new_agent(inst, request.node, request.pool, gpus, f"{iid}-boot1"),
        )
        node.never_boots = (
            w.stream("never_boots", request.node).random() < w.scenario.never_boots_rate
        )
        node.up_at = None if node.never_boots else w.t + w._boot_s(node, first=True)
        w.new_node(node)
        self.launches[request.launch_id] = iid
        return inst

    def terminate(self, instances: Sequence[Instance]) -> None:
        ensure_owned(instances, self.world.fleet, "terminate")
        self._api("terminate")
        for i in instances:
            n = self.world.nodes.get(i.instance_id)
            if n is not None:
                self.world._remove(n)

    def reboot(self, instances: Sequence[Instance]) -> None:
        ensure_owned(instances, self.world.fleet, "reboot")
        self._api("reboot")
        w = self.world
        for i in instances:
            n = w.nodes.get(i.instance_id)
            if n is None:
                raise ProviderError(f"instance {i.instance_id} is gone", code="NotFound")
            n.boot += 1
            n.epoch += 1
            n.active = False
            n.busy = False
            n.work_pending = False
            n.up_at = None if n.never_boots else w.t + w._boot_s(n, first=False)
            n.agent.reboot(n.boot_id)
            if n.up_at is None:
                w.dirty = True
                continue
            if n.fault is not None and n.fault != "host_down" and w._cures(n, "reboot"):
                w.cure(n)
            else:
                # The fault shows again in the new boot (the XID is logged once more).
                w._show(n, xid_at=w.start + timedelta(seconds=n.up_at))
            w.schedule(n.up_at, "boot_done", n.node, n.epoch)
            w.dirty = True

    def reset_gpus(self, instance: Instance) -> str:
        """The ladder's GPU reset on a simulated node: the boot stays, the agent finds the
        reset marker; it cures the fault with the cure table's odds (a host that is down is
        not reached). Raises ProviderError for a node that is gone or down."""
        ensure_owned([instance], self.world.fleet, "reset")
        self._api("reset_gpu")
        w = self.world
        n = w.nodes.get(instance.instance_id)
        if n is None:
            raise ProviderError(f"instance {instance.instance_id} is gone", code="NotFound")
        if n.fault == "host_down":
            raise ProviderError(f"{instance.instance_id} does not answer", code="Unreachable")
        n.agent.reset_gpus()
        if n.fault is not None and w._cures(n, "reset_gpu"):
            w.cure(n)
        elif n.fault is not None:
            w._show(n, xid_at=w.now)
        w.activate(n)
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


__all__ = ["SimNode", "SimProvider", "World"]

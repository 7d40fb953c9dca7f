"""The executor: the only place that changes the world.

It runs a Plan's actions in order against providers and playbooks, records one outcome per
action in the audit log and in Memory, and keeps going when an action fails (kopf's
"outcome, not exception" style): a failed action is retried by a later run, because every
run re-observes and re-plans (level-triggered).

Capacity failover (DESIGN.md safety rule 6): a provision action carries its places in the
pool's order; a CapacityError marks that place exhausted with a backoff (10 min, doubling
per consecutive failure, at most 1 h) and the next place is tried. QuotaError ends the
pool's provisioning for this run, AuthError the provider's, TransientError the action's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Protocol

from navarch import signing
from navarch.errors import (
    AuthError,
    CapacityError,
    NavarchError,
    ProviderError,
    QuotaError,
    RemoteError,
)
from navarch.inventory import TAG_SPEC, Instance, launch_id, ownership_tags
from navarch.planner.model import (
    Action,
    ActionKind,
    Exhausted,
    Memory,
    NodeMemory,
    Phase,
    Plan,
    PoolMemory,
    ts,
)
from navarch.providers.base import Provider, ProvisionRequest
from navarch.reconcile.state import AuditLog
from navarch.spec import FleetSpec, PoolSpec

BACKOFF_BASE_S = 600
BACKOFF_MAX_S = 3600


class PlaybookRunner(Protocol):
    """Runs a scheduler playbook (cordon, drain, drain_check, uncordon) for one node.

    Returns (ok, detail). Implemented over SSH by navarch.remote; scheduler "none" has
    no playbooks and never reaches a runner.
    """

    def run(self, pool: PoolSpec, kind: str, node: str, address: str | None,
            reason: str) -> tuple[bool, str]: ...


@dataclass(frozen=True)
class Outcome:
    """What happened to one action. error: the navarch error class name, or None."""

    action: Action
    ok: bool
    detail: str
    error: str | None = None


def backoff_s(failures: int) -> int:
    """Capacity backoff for a place after `failures` consecutive capacity errors."""
    return min(BACKOFF_BASE_S * 2 ** max(failures - 1, 0), BACKOFF_MAX_S)


class Executor:
    """Applies plans. providers: provider name -> Provider. user_data: renders a node's
    cloud-init (pool, node, node_key) -> str, or None for providers that take none."""

    def __init__(
        self,
        spec: FleetSpec,
        providers: Mapping[str, Provider],
        audit: AuditLog,
        *,
        instances: Mapping[str, Instance],
        inventory: Sequence[Instance] = (),
        clock: Callable[[], datetime],
        run_id: str,
        playbooks: PlaybookRunner | None = None,
        user_data: Callable[[PoolSpec, str, bytes], str] | None = None,
        fleet_secret: bytes | None = None,
    ) -> None:
        self.spec = spec
        self.providers = providers
        self.audit = audit
        self.instances = instances  # node -> Instance, from this run's inventory
        self.by_id = {i.instance_id: i for i in inventory}  # every instance listed this run
        self.clock = clock
        self.run_id = run_id
        self.playbooks = playbooks
        self.user_data = user_data
        self.fleet_secret = fleet_secret
        self._dead_providers: dict[str, str] = {}
        self._quota_pools: dict[str, str] = {}

    # -- entry point -------------------------------------------------------------------
    def execute(self, plan: Plan, memory: Memory,
                on_outcome: Callable[[Outcome], None] | None = None) -> tuple[Memory, list[Outcome]]:
        """Run every action of plan; returns (Memory with the results, outcomes in order)."""
        outcomes: list[Outcome] = []
        for action in plan.actions:
            try:
                memory, outcome = self._one(action, memory)
            except NavarchError as exc:  # a failure the action's own handler did not expect
                outcome = Outcome(action, False, str(exc), type(exc).__name__)
            outcomes.append(outcome)
            self.audit.append({
                "time": ts(self.clock()), "run_id": self.run_id, "action": action.kind.value,
                "pool": action.pool, "node": action.node, "reason": action.reason,
                "ok": outcome.ok, "detail": outcome.detail, "error": outcome.error,
            })
            if on_outcome:
                on_outcome(outcome)
        return memory, outcomes

    def _one(self, a: Action, memory: Memory) -> tuple[Memory, Outcome]:
        handler = {
            ActionKind.SCALE: self._scale,
            ActionKind.PROVISION: self._provision,
            ActionKind.CORDON: self._cordon,
            ActionKind.DRAIN: self._drain,
            ActionKind.TERMINATE: self._terminate,
            ActionKind.UNCORDON: self._uncordon,
            ActionKind.UPDATE_TAGS: self._update_tags,
        }[a.kind]
        return handler(a, memory)

    # -- actions -----------------------------------------------------------------------
    def _scale(self, a: Action, memory: Memory) -> tuple[Memory, Outcome]:
        pool = self.spec.pool(a.pool)
        pm = replace(memory.pool(a.pool), desired=a.desired, desired_from_target=pool.target_nodes,
                     scaled_at=self.clock())
        return memory.with_pool(pm), Outcome(a, True, f"desired {a.desired}")

    def _provision(self, a: Action, memory: Memory) -> tuple[Memory, Outcome]:
        pool = self.spec.pool(a.pool)
        assert a.node is not None
        if pool.provider in self._dead_providers:
            return memory, Outcome(a, False, self._dead_providers[pool.provider], "AuthError")
        if a.pool in self._quota_pools:
            return memory, Outcome(a, False, self._quota_pools[a.pool], "QuotaError")
        provider = self.providers[pool.provider]
        user_data = ""
        if self.user_data is not None and self.fleet_secret is not None:
            key = signing.derive_node_key(self.fleet_secret, self.spec.name, a.node)
            user_data = self.user_data(pool, a.node, key)
        tried: list[str] = []
        for place in a.places:
            lid = launch_id(self.spec.name, a.node, place.attempt)
            tags = {**dict(pool.labels), **ownership_tags(self.spec.name, pool.name, a.node, lid),
                    TAG_SPEC: pool.launch_hash()}
            request = ProvisionRequest(
                fleet=self.spec.name, pool=pool.name, node=a.node, zone=place.zone,
                instance_type=place.instance_type, spot=place.spot, launch_id=lid,
                attempt=place.attempt, tags=tags, user_data=user_data, options=pool.options,
            )
            try:
                inst = provider.provision(request)
            except CapacityError as exc:
                memory = self._exhausted(memory, a.pool, place.zone, place.instance_type, place.spot)
                tried.append(f"{place.label()}: {exc}")
                continue
            except QuotaError as exc:
                self._quota_pools[a.pool] = f"quota: {exc}"
                return memory, Outcome(a, False, f"quota: {exc}", "QuotaError")
            except AuthError as exc:
                self._dead_providers[pool.provider] = f"provider {pool.provider}: {exc}"
                return memory, Outcome(a, False, f"auth: {exc}", "AuthError")
            except ProviderError as exc:
                return memory, Outcome(a, False, f"{place.label()}: {exc}", type(exc).__name__)
            index = int(a.node.rsplit("-", 1)[1])
            pm = memory.pool(a.pool)
            pm = replace(pm, next_index=max(pm.next_index, index + 1),
                         exhausted=tuple(e for e in pm.exhausted
                                         if (e.zone, e.instance_type, e.spot)
                                         != (place.zone, place.instance_type, place.spot)))
            nm = NodeMemory(node=a.node, pool=a.pool, instance_id=inst.instance_id,
                            first_seen_at=self.clock(), launch=pool.launch_settings())
            memory = memory.with_pool(pm).with_node(nm)
            where = place.label() + (f" after {len(tried)} place(s) without capacity" if tried else "")
            return memory, Outcome(a, True, f"{inst.instance_id} in {where}")
        return memory, Outcome(a, False, "no capacity: " + "; ".join(tried), "CapacityError")

    def _exhausted(self, memory: Memory, pool: str, zone: str, itype: str, spot: bool) -> Memory:
        pm = memory.pool(pool)
        now = self.clock()
        prev = next((e for e in pm.exhausted if (e.zone, e.instance_type, e.spot) == (zone, itype, spot)), None)
        failures = prev.failures + 1 if prev else 1
        entry = Exhausted(zone, itype, spot, now + timedelta(seconds=backoff_s(failures)), failures)
        rest = tuple(e for e in pm.exhausted if e is not prev)
        return memory.with_pool(replace(pm, exhausted=rest + (entry,)))

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

    def _cordon(self, a: Action, memory: Memory) -> tuple[Memory, Outcome]:
        ok, detail = self._playbook(a, "cordon")
        if not ok:
            return memory, Outcome(a, False, detail, "RemoteError")
        now = self.clock()
        nm = replace(self._node_memory(a, memory), phase=Phase.CORDONED, phase_at=now,
                     phase_reason=a.reason, repair=a.repair)
        memory = memory.with_node(nm)
        if a.repair:
            pm = memory.pool(a.pool)
            memory = memory.with_pool(replace(pm, repairs=self._recent(pm, now) + (now,)))
        return memory, Outcome(a, True, detail)

    @staticmethod
    def _recent(pm: PoolMemory, now: datetime) -> tuple[datetime, ...]:
        return tuple(r for r in pm.repairs if (now - r).total_seconds() < 3600)

    def _drain(self, a: Action, memory: Memory) -> tuple[Memory, Outcome]:
        nm = self._node_memory(a, memory)
        if nm.phase is not Phase.CORDONED:
            return memory, Outcome(a, False, "not cordoned (its cordon failed this run)", "Skipped")
        ok, detail = self._playbook(a, "drain")
        if not ok:
            return memory, Outcome(a, False, detail, "RemoteError")
        nm = replace(nm, phase=Phase.DRAINING, phase_at=self.clock())
        return memory.with_node(nm), Outcome(a, True, detail if detail else "drain started")

    def _instance(self, a: Action) -> Instance | None:
        """The action's instance: by its instance id when the plan names one (a duplicate's
        extra instance shares the node name), else the node's instance."""
        if a.instance_id is not None and a.instance_id in self.by_id:
            return self.by_id[a.instance_id]
        return self.instances.get(a.node or "")

    def _terminate(self, a: Action, memory: Memory) -> tuple[Memory, Outcome]:
        inst = self._instance(a)
        if inst is None:
            return memory, Outcome(a, True, "already gone")
        try:
            # The instance's own provider: an orphan's pool, or a drifted node's old
            # provider, may no longer be in the spec.
            self.providers[inst.provider].terminate([inst])
        except ProviderError as exc:
            return memory, Outcome(a, False, str(exc), type(exc).__name__)
        if a.backoff:
            memory = self._exhausted(memory, a.pool, inst.zone, inst.instance_type, inst.spot)
        known = memory.node(a.node or "")
        if known is not None and known.instance_id not in (None, inst.instance_id):
            # A duplicate's extra instance: the node itself stays as it is.
            return memory, Outcome(a, True, f"terminated extra instance {inst.instance_id}")
        nm = replace(self._node_memory(a, memory), phase=Phase.TERMINATING, phase_at=self.clock(),
                     phase_reason=a.reason)
        return memory.with_node(nm), Outcome(a, True, f"terminated {inst.instance_id}")

    def _update_tags(self, a: Action, memory: Memory) -> tuple[Memory, Outcome]:
        inst = self._instance(a)
        if inst is None:
            return memory, Outcome(a, True, "already gone")
        try:
            self.providers[inst.provider].update_tags(inst, dict(a.tags))
        except ProviderError as exc:
            return memory, Outcome(a, False, str(exc), type(exc).__name__)
        tags = ", ".join(f"{k}={v}" for k, v in a.tags)
        return memory, Outcome(a, True, f"tags set on {inst.instance_id}: {tags}")

    def _uncordon(self, a: Action, memory: Memory) -> tuple[Memory, Outcome]:
        ok, detail = self._playbook(a, "uncordon")
        if not ok:
            return memory, Outcome(a, False, detail, "RemoteError")
        nm = replace(self._node_memory(a, memory), phase=Phase.NONE, phase_at=self.clock(),
                     phase_reason="", repair=False, streak=0)
        return memory.with_node(nm), Outcome(a, True, detail)


"""`navarch adopt`: take instances that already run under management, without restarting them.

Under the fleet's lease (like every operator verb): look at the world as a run would
(gather), ask the pool's provider for the running instances without navarch's tags that
the filter selects (Adopter.list_unmanaged), plan the adoption (plan_adoption: pure), show
it and ask a person's consent, then write navarch's ownership tags on each instance in
place (Adopter.adopt: EC2 CreateTags, GCE setLabels, ARM tags, the local machine file)
and record each in the audit log. The next plan counts them as the pool's nodes.

An instance is adopted only where the planner will not replace it at once as drift: its
provider, zone, instance type and capacity must be the pool's (the planner's own
drift_reason decides); the rest are listed as passed over, with the reason. An adopted
instance has no agent yet, and a node without a report is unhealthy once boot_timeout has
passed since its launch, so adopt asks for the pool to run in `observe` (adopt_mode)
until its agents report; the change to fleet.yaml is printed (fleet_yaml_change).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from navarch.actor import Actor
from navarch.capabilities import Capability
from navarch.errors import ConfigError, NavarchError, ProviderError
from navarch.fleet.modes import Mode
from navarch.fleet.spec import FleetSpec, PoolSpec
from navarch.inventory import TAG_ADOPTED, Instance, launch_id, ownership_tags
from navarch.logs import new_run_id
from navarch.planner.capacity import index_of, node_name
from navarch.planner.observe import drift_reason
from navarch.reconcile.operator.manual import verb_who
from navarch.reconcile.run import Clock, Fleet, gather, leased, system_clock
from navarch.reconcile.state import AuditLog
from navarch.report.timefmt import ts

__all__ = [
    "ADOPT_MODES",
    "Adoption",
    "AdoptPlan",
    "PassedOver",
    "adopt",
    "adopt_mode",
    "adoption_tags",
    "fleet_yaml_change",
    "plan_adoption",
]

#: The modes a pool can run in (a pool's `mode:` in fleet.yaml), mildest first.
ADOPT_MODES = ("observe", "cordon", "full")


def adopt_mode(requested: str | None) -> str:
    """The mode an adopted pool should run in: `requested`, else "observe" (act on nothing
    until the adopted machines' agents report and a person raises it). Raises ConfigError
    for a mode that is not one of ADOPT_MODES. The one place the default is decided: the
    caller records it (fleet_yaml_change, the audit log)."""
    if requested is None:
        return "observe"
    if requested not in ADOPT_MODES:
        raise ConfigError(
            f"unknown mode {requested!r}", hint=f"use one of {', '.join(ADOPT_MODES)}"
        )
    return requested


@dataclass(frozen=True)
class Adoption:
    """One instance to adopt and the node name it gets (<fleet>-<pool>-<nnnn>)."""

    instance: Instance
    node: str

    def to_json(self) -> dict[str, Any]:
        i = self.instance
        return {
            "node": self.node,
            "instance_id": i.instance_id,
            "zone": i.zone,
            "instance_type": i.instance_type,
            "launched_at": ts(i.launched_at),
        }


@dataclass(frozen=True)
class PassedOver:
    """An instance the filter selected that adopt leaves alone, and why."""

    instance: Instance
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"instance_id": self.instance.instance_id, "reason": self.reason}


@dataclass(frozen=True)
class AdoptPlan:
    """What adopt will do: adopt (in node-name order), passed_over, the pool's nodes
    before, its target and max, the mode asked for, and the filter for people."""

    fleet: str
    pool: str
    provider: str
    selected_by: str
    adopt: tuple[Adoption, ...]
    passed_over: tuple[PassedOver, ...]
    nodes_before: int
    target: int
    max_nodes: int
    mode: str

    @property
    def nodes_after(self) -> int:
        return self.nodes_before + len(self.adopt)

    def text(self) -> str:
        """The plan for people (Terraform-like `+ adopt` lines), ending with a newline."""
        head = f"navarch adopt: pool {self.pool} on {self.provider}, {self.selected_by}"
        lines = [head, ""]
        for a in self.adopt:
            i = a.instance
            lines.append(
                f"  + adopt {i.instance_id} as {a.node}  ({i.instance_type} in {i.zone}, "
                f"running since {ts(i.launched_at)}; not restarted)"
            )
        for p in self.passed_over:
            lines.append(f"  . leave {p.instance.instance_id}  # {p.reason}")
        if not self.adopt and not self.passed_over:
            lines.append("  (no running instance without navarch's tags matches the filter)")
        lines += ["", f"Plan: {len(self.adopt)} to adopt, {len(self.passed_over)} left alone."]
        lines += [f"  {line}" for line in fleet_yaml_change(self).splitlines()]
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict[str, Any]:
        return {
            "fleet": self.fleet,
            "pool": self.pool,
            "provider": self.provider,
            "selected_by": self.selected_by,
            "adopt": [a.to_json() for a in self.adopt],
            "passed_over": [p.to_json() for p in self.passed_over],
            "nodes_before": self.nodes_before,
            "nodes_after": self.nodes_after,
            "target": self.target,
            "mode": self.mode,
            "fleet_yaml": fleet_yaml_change(self),
        }


def _check_pool_mode(pool: PoolSpec, wanted: str) -> None:
    """Refuse to adopt into a pool whose declared mode (fleet.yaml) lets navarch do more
    than the mode asked for (default observe): machines that ran for months would be
    judged, drained or replaced by the very next run, before anyone compared navarch's
    verdicts with their own. fleet.yaml stays the one place a pool's mode is decided."""
    if pool.mode.strictness < Mode(wanted).strictness:
        raise ConfigError(
            f"pool {pool.name} runs in mode {pool.mode.value}: adopting into it lets navarch "
            f"act on the adopted machines at once, and adopt puts a pool in {wanted}",
            key_path=f"pools.{pool.name}.mode",
            hint=f"set pools.{pool.name}.mode: {wanted} in fleet.yaml first, or pass "
            f"--mode {pool.mode.value} to adopt into the pool as it is",
        )


def fleet_yaml_change(plan: AdoptPlan) -> str:
    """The fleet.yaml change adopt asks for, as lines to read: the pool's mode, and its
    target where the adopted nodes would make the next plan launch or scale down."""
    lines = [
        f"Set in fleet.yaml: pools.{plan.pool}.mode: {plan.mode} (adopted machines have no "
        "agent yet: install it (docs/adopt.md) before raising the mode)."
    ]
    if plan.adopt and plan.nodes_after != plan.target:
        lines.append(
            f"Set pools.{plan.pool}.nodes.target: {plan.nodes_after} (now {plan.target}"
            + (f", max {plan.max_nodes}" if plan.nodes_after > plan.max_nodes else "")
            + "), or the next plan launches or scales down to the target."
        )
    return "\n".join(lines) + "\n"


def adoption_tags(fleet: str, pool: str, node: str, now: datetime) -> dict[str, str]:
    """The tags adopt writes: navarch's ownership tags (launch id of attempt 0, which no
    launch uses) and TAG_ADOPTED (now, whole seconds), from which the node's boot window
    runs (observe: a node without a report is unhealthy only past boot_timeout)."""
    tags = ownership_tags(fleet, pool, node, launch_id(fleet, node, 0))
    return {**tags, TAG_ADOPTED: str(int(now.timestamp()))}


def plan_adoption(
    spec: FleetSpec,
    pool: PoolSpec,
    provider: str,
    candidates: Sequence[Instance],
    pool_nodes: Sequence[str],
    next_index: int,
    mode: str,
    selected_by: str,
    now: datetime,
) -> AdoptPlan:
    """Plan the adoption (pure). candidates: what list_unmanaged returned; pool_nodes: the
    pool's node names now (live instances and Memory); next_index: the pool's next unused
    node index as Memory keeps it. Each candidate the planner would not call drift
    (observe.drift_reason, read on the instance as tagged) gets the next free name."""
    index = max([next_index - 1, *(index_of(spec.name, pool.name, n) for n in pool_nodes)])
    adopt: list[Adoption] = []
    passed: list[PassedOver] = []
    for inst in sorted(candidates, key=lambda i: (i.launched_at, i.instance_id)):
        name = node_name(spec.name, pool.name, index + 1)
        tags = adoption_tags(spec.name, pool.name, name, now)
        tagged = replace(inst, tags=tuple(sorted({**dict(inst.tags), **tags}.items())))
        drift = drift_reason(pool, tagged, None)
        if drift is not None:
            passed.append(PassedOver(inst, f"the pool would replace it at once: {drift}"))
            continue
        index += 1
        adopt.append(Adoption(inst, name))
    return AdoptPlan(
        spec.name,
        pool.name,
        provider,
        selected_by,
        tuple(adopt),
        tuple(passed),
        len(set(pool_nodes)),
        pool.target_nodes,
        pool.max_nodes,
        mode,
    )


@dataclass(frozen=True)
class AdoptOutcome:
    """adopt()'s result: the plan shown; adopted, the instances now tagged (in plan order);
    applied: False when consent was refused or there was nothing to adopt; run_id: the
    audit log's run id."""

    plan: AdoptPlan
    adopted: tuple[Adoption, ...]
    applied: bool
    run_id: str


def _pool_of(spec: FleetSpec, pool: str) -> PoolSpec:
    try:
        return spec.pool(pool)
    except KeyError:
        raise ConfigError(
            f"--pool {pool}: no such pool in {spec.source}",
            key_path=f"pools.{pool}",
            hint=f"use one of {', '.join(p.name for p in spec.pools)}",
        ) from None


def _adopter(fleet: Fleet, pool: PoolSpec) -> Any:
    """The pool's provider when it can adopt; NavarchError saying it cannot otherwise."""
    from navarch.providers.base import Adopter

    provider = fleet.providers[pool.provider]
    caps = getattr(provider, "capabilities", Capability.NONE)
    if not isinstance(caps, Capability) or Capability.ADOPT not in caps:
        kind = fleet.spec.providers[pool.provider].get("type")
        raise NavarchError(
            f"provider {pool.provider} (type {kind}) cannot adopt instances: it cannot "
            "write navarch's ownership tags on a running instance; launch the pool's "
            "nodes with `navarch apply` instead"
        )
    assert isinstance(provider, Adopter)
    return provider


def adopt(
    fleet: Fleet,
    pool_name: str,
    match: Any,
    *,
    confirm: Callable[[AdoptPlan], bool],
    mode: str | None = None,
    clock: Clock = system_clock,
    actor: Actor | None = None,
    run_id: str | None = None,
) -> AdoptOutcome:
    """Adopt the running instances `match` (providers.base.AdoptFilter) selects into pool
    `pool_name`, after confirm(plan) accepts the plan (not asked when nothing matches).

    Raises ConfigError (no such pool, unknown mode, empty filter), NavarchError (the
    provider cannot adopt; a tag write failed, after the others were recorded), LockHeld,
    LeaseLost, StoreError, ProviderError (listing).
    """
    spec = fleet.spec
    pool = _pool_of(spec, pool_name)
    wanted = adopt_mode(mode)
    _check_pool_mode(pool, wanted)
    provider = _adopter(fleet, pool)
    with leased(fleet, f"adopt {pool.name}", clock) as lease:
        snap = gather(fleet, clock())
        run_id = run_id or new_run_id(snap.now)
        names = {i.node for i in snap.inventory if i.fleet == spec.name and i.pool == pool.name}
        names |= {nm.node for nm in snap.memory.nodes if nm.pool == pool.name}
        plan = plan_adoption(
            spec,
            pool,
            pool.provider,
            provider.list_unmanaged(match),
            sorted(n for n in names if n),
            snap.memory.pool(pool.name).next_index,
            wanted,
            match.describe(),
            snap.now,
        )
        if not plan.adopt or not confirm(plan):
            return AdoptOutcome(plan, (), False, run_id)
        audit = AuditLog(fleet.store, spec.name, run_id, snap.now)
        done: list[Adoption] = []
        try:
            for a in plan.adopt:
                lease.check()
                tags = adoption_tags(spec.name, pool.name, a.node, snap.now)
                record = {**_record(a, plan, actor, clock), "run_id": run_id}
                try:
                    provider.adopt(a.instance, tags)
                except ProviderError as exc:
                    audit.append(
                        {**record, "ok": False, "detail": str(exc), "error": type(exc).__name__}
                    )
                    raise NavarchError(f"adopt of {a.instance.instance_id} failed: {exc}") from exc
                audit.append(
                    {**record, "ok": True, "detail": "ownership tags written", "error": None}
                )
                done.append(a)
        finally:
            audit.flush()
        return AdoptOutcome(plan, tuple(done), True, run_id)


def _record(a: Adoption, plan: AdoptPlan, actor: Actor | None, clock: Clock) -> dict[str, Any]:
    """The audit record of one adoption (history.schema.json's fields)."""
    return {
        "time": ts(clock()),
        "operator": True,
        **verb_who(actor),
        "verb": "adopt",
        "action": "adopt",
        "pool": plan.pool,
        "node": a.node,
        "instance_id": a.instance.instance_id,
        "reason": f"adopted ({plan.selected_by}); pool to run in {plan.mode}",
        "mode": plan.mode,
        "report": None,
    }

"""`navarch uncordon`: return a node that navarch cordoned to service.

Rules (LBNL NHC: only undo what you did yourself):
- only a node navarch cordoned, is draining or is remediating (its Memory phase says so),
  or one an operator cordoned with `navarch cordon` (NodeMemory.cordon, cleared
  here), is uncordoned; a node cordoned by a human outside navarch is refused;
- only when its latest accepted report is healthy and fresh (within stale_after);
- never an instance the remediation ladder replaced as a lemon (its id is kept in the
  pool's Memory: an adopted instance with the same id), nor one on a physical host whose
  instances were (EC2 Dedicated Hosts).
`--force` is the operator taking responsibility: it lifts every rule above but one (a node
being terminated is not returned) and the returned detail says which rule it overrode.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from navarch.actor import Actor, ActorKind
from navarch.errors import NavarchError
from navarch.fleet.spec import FleetSpec
from navarch.history import Trigger
from navarch.logs import new_run_id
from navarch.planner.model import (
    Action,
    ActionKind,
    ActionReason,
    NodeMemory,
    NodeView,
    Phase,
    PoolMemory,
)
from navarch.reconcile.executor import Executor
from navarch.reconcile.operator.manual import lease_command
from navarch.reconcile.run import Clock, Fleet, Snapshot, gather, leased, system_clock
from navarch.reconcile.state import AuditLog, Lease, save_memory
from navarch.report.health import Status


def uncordon(
    fleet: Fleet,
    node: str,
    *,
    force: bool = False,
    clock: Clock = system_clock,
    actor: Actor | None = None,
    run_id: str | None = None,
) -> str:
    """Uncordon `node`; returns the playbook's detail. Raises NavarchError saying why not.

    force: uncordon all the same a lemon's instance (or one on a lemon host), a node whose
    report is not fresh and healthy, and one cordoned outside navarch.
    clock: the run's clock (navarch.reconcile.run.Clock).
    Holds the fleet's lease like apply (checked before the uncordon and before the state
    write): raises LockHeld when another run holds it, LeaseLost when it lapsed or was taken
    over meanwhile (then nothing more is done and no state written). actor: who asked
    (navarch.actor), recorded as `by` (an MCP client also as trigger `mcp` with `client`).
    run_id: the audit log's run id (default: a new one; the CLI passes its own).
    """
    spec = fleet.spec
    with leased(fleet, lease_command("uncordon", node, actor), clock) as lease:
        snap = gather(fleet, clock())
        nm = snap.memory.node(node)
        view = next((v for v in snap.observed.views if v.node == node), None)
        if nm is None or view is None:
            raise NavarchError(f"{node} is not a node of fleet {spec.name}")
        _check_returnable(nm, view)
        overridden: list[str] = []
        for override, refusal in _rules_broken(spec, nm, view, snap.memory.pool(nm.pool)):
            if not force:
                raise NavarchError(refusal)
            overridden.append(override)
        detail = _run_uncordon(fleet, snap, nm, clock, lease, actor, run_id)
        was = nm.phase.value or ("cordoned by an operator" if _by_operator(nm) else "in service")
        forced = f"; --force overrode: {'; '.join(overridden)}" if overridden else ""
        return f"{detail}; it was {was}{forced}"


def _by_operator(nm: NodeMemory) -> bool:
    """Whether an operator's cordon holds the node (`navarch cordon`)."""
    return nm.cordon is not None and nm.cordon.is_operator


def _check_returnable(nm: NodeMemory, view: NodeView) -> None:
    """Refuse, even with --force, a node being terminated or one of a removed pool."""
    node = nm.node
    if nm.phase is Phase.TERMINATING:
        raise NavarchError(f"{node} is being terminated ({nm.phase_reason}); nothing to uncordon")
    if view.orphan:
        raise NavarchError(
            f"{node} belongs to pool {nm.pool}, which is no longer in fleet.yaml: "
            "navarch drains and terminates it; restore the pool in fleet.yaml to keep it"
        )


def _rules_broken(
    spec: FleetSpec, nm: NodeMemory, view: NodeView, pm: PoolMemory
) -> Iterator[tuple[str, str]]:
    """Each rule returning the node would break, in order: (what --force overrides, the
    refusal without it). A generator: a refusal is found before any later rule is read."""
    node = nm.node
    if nm.instance_id in pm.lemons:
        yield (
            f"instance {nm.instance_id} was replaced as a lemon",
            f"{node} runs instance {nm.instance_id}, replaced as a lemon "
            "(repeated faults); pass --force to return it to service anyway",
        )
    host = view.instance.host_id if view.instance is not None else None
    if host is not None and host in pm.lemon_hosts:
        yield (
            f"host {host} is a lemon host",
            f"{node} runs on host {host}, whose instances were replaced as "
            "lemons (repeated faults); pass --force to return it anyway",
        )
    if nm.phase not in (Phase.CORDONED, Phase.DRAINING, Phase.REMEDIATING) and not _by_operator(nm):
        yield (
            "navarch did not cordon it",
            f"navarch did not cordon {node}; a cordon made outside "
            "navarch is left to whoever made it (--force returns it "
            "anyway)",
        )
    s = view.summary
    if (
        s is None
        or s.status is not Status.HEALTHY
        or (view.report_age_s or 0) > spec.pool(nm.pool).health.stale_after_s
    ):
        state = "no report" if s is None else f"{s.status}, {view.report_age_s:.0f}s old"
        yield (
            f"no fresh healthy report ({state})",
            f"{node} has no fresh healthy report ({state}); "
            "fix it and let its agent report first, or pass --force",
        )


def _run_uncordon(
    fleet: Fleet,
    snap: Snapshot,
    nm: NodeMemory,
    clock: Clock,
    lease: Lease,
    actor: Actor | None,
    run_id: str | None,
) -> str:
    """Uncordon the node through the executor (audited), then write the state; the
    playbook's detail. Raises NavarchError when the uncordon fails."""
    spec, node = fleet.spec, nm.node
    action = Action(
        ActionKind.UNCORDON,
        nm.pool,
        node,
        "operator: navarch uncordon",
        instance_id=nm.instance_id,
        action_reason=ActionReason.OPERATOR,
    )
    run_id = run_id or new_run_id(snap.now)
    audit = AuditLog(fleet.store, spec.name, run_id, snap.now)
    by_node = {i.node: i for i in snap.inventory if i.node}
    executor = Executor(
        spec,
        fleet.providers,
        audit,
        instances=by_node,
        clock=clock,
        run_id=run_id,
        playbooks=fleet.playbooks,
        lease=lease,
        trigger=Trigger.MCP if actor and actor.kind is ActorKind.MCP else Trigger.OPERATOR,
        verb="uncordon",
        by=actor,
    )
    plan = replace(snap.plan, actions=(action,))
    memory, outcomes = executor.execute(plan, snap.memory)
    if not outcomes[0].ok:
        raise NavarchError(f"uncordon of {node} failed: {outcomes[0].detail}")
    lease.check_store()
    save_memory(fleet.store, memory, snap.memory_version)
    return outcomes[0].detail

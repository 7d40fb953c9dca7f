"""`navarch reboot` and `navarch cordon`: an operator's hand on one node.

Both hold the fleet's lease like apply (renewed in the background; checked before acting
and before the state write, so a verb stalled past its TTL while another run took the
fleet over does nothing more and exits non-zero), look at the world as a run would
(gather), act on one node of this fleet, and write what they did to the audit log, like
`navarch uncordon`.

- reboot: restarts the node's instance in place through its provider's API
  (Provider.reboot: EC2 RebootInstances, Compute Engine instances.reset, Lambda Cloud
  restart, the local provider's reboot). Refused while the node's latest report shows GPU
  processes, unless forced: a reboot kills them (the ladder's own rule: never reboot a
  node that still runs GPU work). A node navarch took out of service for a fault is then
  remediating, as after the ladder's own reboot: it returns to service on healthy reports
  from its new boot (an open circuit breaker holds the ladder's reboot, not the return).
- cordon: runs the scheduler's cordon playbook with the operator's reason. An operator's
  cordon is never undone automatically: it is not navarch's cordon (Memory phase), so
  the planner neither drains nor replaces the node for it and never uncordons it; only
  `navarch uncordon` does. It is recorded in the audit log (`"operator": true`) and in
  NodeMemory.cordon (cause OPERATOR, the reason its note), and sent to the fleet's
  notification sinks as a node_cordoned event naming who cordoned and why.

Each verb's audit chunk is named by its own run id (the UTC second and random hex, as an
apply's), so verbs in the same second never share a key, and who acted (navarch.actor)
is in every record.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from navarch.actor import Actor, ActorKind
from navarch.errors import NavarchError, ProviderError, RemoteError
from navarch.fleet.spec import PoolSpec, Scheduler
from navarch.history import Trigger, report_ref
from navarch.inventory import Instance
from navarch.logs import new_run_id
from navarch.notify.dispatch import notify_events
from navarch.notify.events import operator_cordon_event
from navarch.planner.model import ActionReason, Cordon, Memory, NodeMemory, Phase
from navarch.reconcile.run import Clock, Fleet, Snapshot, gather, leased, system_clock
from navarch.reconcile.state import AuditLog, save_memory
from navarch.report.health import Remedy
from navarch.report.timefmt import ts
from navarch.textsafe import operator_reason

#: Where an operator's cordon reason is shown (the words of its errors).
CORDON_REASON_SHOWN = "it is shown to the scheduler's users, in every plan and in the audit log"


def _instance(snap: Snapshot, fleet_name: str, node: str) -> Instance:
    """The node's one live instance of this fleet; NavarchError naming why not."""
    found = [i for i in snap.inventory if i.node == node and i.fleet == fleet_name]
    if not found:
        raise NavarchError(
            f"{node} is not a node of fleet {fleet_name} (`navarch status FLEET` lists them)"
        )
    if len(found) > 1:
        raise NavarchError(
            f"{node} names {len(found)} instances "
            f"({', '.join(i.instance_id for i in found)}); resolve the duplicate "
            "first (`navarch status FLEET`)"
        )
    return found[0]


def verb_who(actor: Actor | None) -> dict[str, Any]:
    """An operator verb's audit fields for who asked: trigger (`actor`: mcp or operator),
    `by` (navarch.actor) and, for an MCP client, `client`."""
    if actor is None:
        return {"actor": Trigger.OPERATOR.value}
    if actor.kind is ActorKind.MCP:
        return {"actor": Trigger.MCP.value, "client": actor.name, "by": actor.to_json()}
    return {"actor": Trigger.OPERATOR.value, "by": actor.to_json()}


def lease_command(verb: str, node: str, actor: Actor | None) -> str:
    """The lease's command for an operator verb ("reboot NODE", naming an MCP client)."""
    if actor is not None and actor.kind is ActorKind.MCP:
        return f"{verb} {node} (mcp client {actor.name})"
    return f"{verb} {node}"


def _audit(
    fleet: Fleet,
    snap: Snapshot,
    verb: str,
    record: dict[str, Any],
    clock: Clock,
    actor: Actor | None,
    run_id: str,
) -> None:
    audit = AuditLog(fleet.store, fleet.spec.name, run_id, snap.now)
    view = next((v for v in snap.observed.views if v.node == record.get("node")), None)
    who = verb_who(actor)
    audit.append(
        {
            "time": ts(clock()),
            "run_id": run_id,
            "operator": True,
            **who,
            "verb": verb,
            "report": report_ref(view.summary if view is not None else None),
            **record,
        }
    )
    audit.flush()


def reboot(
    fleet: Fleet,
    node: str,
    *,
    force: bool = False,
    clock: Clock = system_clock,
    actor: Actor | None = None,
    run_id: str | None = None,
) -> str:
    """Reboot `node` through its provider's API; returns what was done (one line).

    clock: the run's clock (navarch.reconcile.run.Clock). actor: who asked (navarch.actor;
    the CLI's or the MCP client's), recorded as `by`. run_id: the audit log's run id
    (default: a new one, the UTC second and random hex; the CLI passes its own).
    Raises NavarchError when the node is not this fleet's, its latest report shows GPU
    processes (unless force), or the provider refuses (the ProviderError's text); LockHeld
    when another run holds the lease, LeaseLost when it lapsed before the reboot.
    """
    spec = fleet.spec
    with leased(fleet, lease_command("reboot", node, actor), clock) as lease:
        snap = gather(fleet, clock())
        run_id = run_id or new_run_id(snap.now)
        inst = _instance(snap, spec.name, node)
        view = next((v for v in snap.observed.views if v.node == node), None)
        procs = view.summary.process_count if view and view.summary else None
        if procs and not force:
            raise NavarchError(
                f"{node} runs {procs} GPU process(es) by its latest report; "
                "drain it first (`navarch cordon`, then your scheduler), or "
                "pass --force to kill them"
            )
        reason = "operator: navarch reboot" + (" --force" if force else "")
        record = {
            "action": "reboot",
            "pool": inst.pool,
            "node": node,
            "reason": reason,
            "instance_id": inst.instance_id,
        }
        lease.check()
        try:
            fleet.providers[inst.provider].reboot([inst])
        except ProviderError as exc:
            _audit(
                fleet,
                snap,
                "reboot",
                {**record, "ok": False, "detail": str(exc), "error": type(exc).__name__},
                clock,
                actor,
                run_id,
            )
            raise NavarchError(f"reboot of {node} failed: {exc}") from exc
        detail = f"rebooted {inst.instance_id} through provider {inst.provider}"
        memory = _rebooted(snap.memory, node, snap.now)
        if memory is not None:
            detail += "; it returns to service on healthy reports from its new boot"
        _audit(
            fleet,
            snap,
            "reboot",
            {**record, "ok": True, "detail": detail, "error": None},
            clock,
            actor,
            run_id,
        )
        if memory is not None:
            lease.check_store()
            save_memory(fleet.store, memory, snap.memory_version)
        return detail


def _rebooted(memory: Memory, node: str, now: datetime) -> Memory | None:
    """Memory after an operator's reboot of a node navarch took out of service for a fault
    (cordoned, draining or remediating): remediating with rung reboot from now, the
    ladder's own state after its reboot (handlers' _remedied), so healthy reports from
    the new boot return it (docs/health-policy.md). None when there is nothing to record:
    a node in service, or one leaving for no fault (drift, --replace of a healthy node)."""
    nm = memory.node(node)
    leaving = (Phase.CORDONED, Phase.DRAINING, Phase.REMEDIATING)
    if nm is None or nm.phase not in leaving or nm.fault is None:
        return None
    why = nm.phase_reason.removeprefix("rebooted by an operator; ")
    return memory.with_node(
        replace(
            nm,
            phase=Phase.REMEDIATING,
            phase_at=now,
            phase_reason=f"rebooted by an operator; {why}",
            rung=Remedy.REBOOT,
            rung_fault=nm.fault.key.kind,
            rung_at=now,
            return_streak=0,
            cordon=nm.cordon.after_remedy(
                ActionReason.DIAGNOSTICS, ActionReason.IMPAIRED_FIRST_SEEN
            )
            if nm.cordon
            else None,
        )
    )


def _cordon_in_scheduler(
    fleet: Fleet, pool: PoolSpec, node: str, address: str | None, reason: str
) -> tuple[bool, str]:
    """The pool's cordon playbook for an operator's cordon -> (ok, detail); with no
    scheduler and no cordon playbook navarch's own record is the cordon."""
    if pool.scheduler is Scheduler.NONE and "cordon" not in pool.playbooks:
        return True, "recorded in navarch (scheduler none)"
    if fleet.playbooks is None:
        return False, f"no playbook runner for scheduler {pool.scheduler}"
    try:
        return fleet.playbooks.run(pool, "cordon", node, address, reason)
    except RemoteError as exc:
        return False, str(exc)


def cordon(
    fleet: Fleet,
    node: str,
    reason: str,
    *,
    clock: Clock = system_clock,
    actor: Actor | None = None,
    run_id: str | None = None,
) -> str:
    """An operator's cordon of `node` with `reason`; returns the playbook's detail.

    clock: the run's clock (navarch.reconcile.run.Clock).
    Raises NavarchError when the reason is empty or too long (textsafe.operator_reason), the
    node is not this fleet's, navarch is already taking it
    out of service (its own cordon, drain or termination), or the cordon playbook fails;
    LockHeld when another run holds the lease, LeaseLost when it lapsed before the cordon
    or the state write. actor, run_id: as for reboot (an MCP client's call is recorded with
    trigger `mcp` and `client`).
    """
    spec = fleet.spec
    reason = operator_reason(reason, CORDON_REASON_SHOWN)
    with leased(fleet, lease_command("cordon", node, actor), clock) as lease:
        snap = gather(fleet, clock())
        run_id = run_id or new_run_id(snap.now)
        inst = _instance(snap, spec.name, node)
        nm = snap.memory.node(node)
        if nm is not None and nm.phase is not Phase.NONE:
            raise NavarchError(
                f"navarch is already taking {node} out of service "
                f"({nm.phase.value}: {nm.phase_reason})"
            )
        pool = spec.pool(inst.pool or "")
        full_reason = f"operator: {reason.strip()}"
        lease.check()
        ok, detail = _cordon_in_scheduler(fleet, pool, node, inst.address, full_reason)
        _audit(
            fleet,
            snap,
            "cordon",
            {
                "action": "cordon",
                "pool": pool.name,
                "node": node,
                "reason": full_reason,
                "instance_id": inst.instance_id,
                "ok": ok,
                "detail": detail,
                "error": None if ok else "RemoteError",
            },
            clock,
            actor,
            run_id,
        )
        if not ok:
            raise NavarchError(f"cordon of {node} failed: {detail}")
        base = nm or NodeMemory(
            node=node, pool=pool.name, instance_id=inst.instance_id, first_seen_at=snap.now
        )
        was = base.cordon
        cordon = Cordon(
            ActionReason.OPERATOR,
            snap.now,
            by=actor.label() if actor is not None else "operator",
            # A node in acceptance or held spare serves nothing under the operator's cordon too.
            idle=was is not None and was.serves_nothing,
            note=full_reason,
        )
        memory = snap.memory.with_node(replace(base, cordon=cordon))
        lease.check_store()
        save_memory(fleet.store, memory, snap.memory_version)
    # A person took a node out of service: the sinks hear of it as of navarch's own cordon.
    event = operator_cordon_event(
        spec.name, pool.name, node, full_reason, cordon.by or "operator", run_id, inst.instance_id
    )
    notify_events(spec, (event,), now=snap.now)
    return detail

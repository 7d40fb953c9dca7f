"""navarch.api's acting verbs: apply, destroy, pause, resume, and the operator's verbs on
one node (cordon, uncordon, reboot) and on the lease (force_unlock).

Each holds the fleet's lease while it acts (force_unlock removes it), records who acted
(navarch.actor) in the audit log, and may create the local secret file
(navarch.api.door). The CLI and the MCP server call these; neither reaches past them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from navarch.actor import Actor
from navarch.api.door import loaded, open_fleet
from navarch.api.results import (
    AdoptResult,
    ApplyResult,
    DestroyResult,
    LoadedFleet,
    PlanResult,
    UnlockResult,
    VerbResult,
)
from navarch.errors import NavarchError

if TYPE_CHECKING:
    from navarch.outcome import Outcome, RunResult
    from navarch.planner.context import PlanOptions
    from navarch.planner.model import Plan
    from navarch.providers.base import AdoptFilter
    from navarch.reconcile.operator.adopt import AdoptPlan
    from navarch.reconcile.operator.pause import PauseResult
    from navarch.reconcile.run import Fleet

Clock = Callable[[], datetime]


def _opened(fleet: LoadedFleet | str | Path | Fleet) -> Fleet:
    from navarch.reconcile.run import Fleet

    return fleet if isinstance(fleet, Fleet) else open_fleet(fleet, acting=True)


def _clock(clock: Clock | None) -> Clock:
    from navarch.reconcile.run import system_clock

    return clock or system_clock


@dataclass(frozen=True)
class ApplyOptions:
    """How one apply runs (navarch.api.apply); every field has a default.

    plan: a PlanResult from plan(); its actions are applied only if the world has not
    moved on since (else StalePlan). scope: the nodes `plan` was narrowed to (an MCP
    confirmation): only their observations and the halts must be unchanged, not every
    node's (None: every node). Approval: auto_approve, a plan, or confirm(plan) accepting
    the plan it is shown; with none of them apply raises NavarchError before anything is
    done. on_outcome(outcome): each finished action, as it finishes. plan_options: the
    run's flags (pools, --replace, --allow-destroy, --allow-launches). run_id: the audit's
    run id (default: a new one). actor: who asks (navarch.actor: a person, a CI job, an MCP
    client, a scheduled run), kept in every audit record of the run as `by`; the caller
    says it (the CLI reads its environment, the MCP server names its client). clock: the
    run's clock (default: the system clock; the CLI passes navarch.cli.process_clock()).
    after_apply(result, error): called while the lease is held (notifications:
    navarch.notify.unattended). command: the lease's command (default "apply FLEET").
    reports_named: the report keys (health/<fleet>/<pool>/<node>.json) a run started by
    the store's notifications was started for: only they are listed while every other
    node's last report is fresh (navarch.reconcile.named_reports); None lists all.
    """

    plan: PlanResult | None = None
    scope: frozenset[str] | None = None
    auto_approve: bool = False
    confirm: Callable[[Plan], bool] | None = None
    on_outcome: Callable[[Outcome], None] | None = None
    plan_options: PlanOptions | None = None
    run_id: str | None = None
    actor: Actor | None = None
    clock: Clock | None = None
    after_apply: Callable[[RunResult | None, NavarchError | None], None] | None = None
    command: str | None = None
    reports_named: frozenset[str] | None = None


def apply(fleet: LoadedFleet | str | Path | Fleet, how: ApplyOptions | None = None) -> ApplyResult:
    """Converge the fleet: take its lease, look again, execute the plan's actions under
    every safety rule (budget, breaker, rate limit, ownership), record each in the audit
    log, write state, release the lease.

    fleet: a LoadedFleet, a path to fleet.yaml, or a fleet opened by
    open_fleet(acting=True) (the CLI keeps it for notifications and metrics around the
    run). how: the run's ApplyOptions (approval, callbacks, flags, actor, clock).
    Raises NavarchError (no approval), LockHeld (another run holds the lease), LeaseLost,
    StalePlan, StoreError, ProviderError.
    """
    from navarch.reconcile.run import run_apply

    how = how or ApplyOptions()
    plan, confirm = how.plan, how.confirm
    if confirm is None and plan is None and not how.auto_approve:
        raise NavarchError(
            "apply needs approval: pass ApplyOptions(auto_approve=True), a plan from "
            "api.plan() to apply exactly it, or confirm="
        )
    opened = _opened(fleet)
    shown: list[Plan] = []

    def asked(p: Plan) -> bool:
        shown.append(p)
        return True if confirm is None else confirm(p)

    command = how.command
    if command is None:
        named = fleet.path if isinstance(fleet, LoadedFleet) else fleet
        command = f"apply {named if isinstance(named, str | Path) else opened.spec.source}"
    result = run_apply(
        opened,
        command=command,
        clock=_clock(how.clock),
        saved=plan.plan if plan is not None else None,
        saved_nodes=how.scope,
        confirm=asked,
        on_outcome=how.on_outcome,
        options=how.plan_options,
        after_apply=how.after_apply,
        run_id=how.run_id,
        actor=how.actor,
        named=how.reports_named,
    )
    if result is None:  # confirm() declined the plan it was shown: nothing was done
        return ApplyResult(shown[-1], (), "", None, applied=False)
    failed = tuple(o.action.node or o.action.pool for o in result.outcomes if not o.ok)
    return ApplyResult(
        result.plan,
        result.outcomes,
        result.run_id,
        result.audit_error,
        failed=failed,
        memory=result.memory,
    )


def destroy(
    fleet: LoadedFleet | str | Path,
    *,
    pools: Iterable[str] | None = None,
    force: bool = False,
    auto_approve: bool = False,
    confirm: Callable[[Plan], bool] | None = None,
    on_outcome: Callable[[Outcome], None] | None = None,
    actor: Actor | None = None,
    clock: Clock | None = None,
) -> DestroyResult:
    """Every node of the fleet (or of `pools`) leaves: cordon, drain, terminate
    (`navarch destroy`). Up to three passes under the lease: cordon and drain, then what
    finished draining at once, then a re-check; force terminates without waiting for
    drains. A fleet whose secret is lost can still be destroyed (its reports count as
    rejected; it launches nothing). A paused fleet is held like any run (the result's
    `paused`). confirm(plan) is asked before each pass that acts, unless auto_approve;
    with neither, NavarchError is raised before anything is done.

    Returns DestroyResult (`left`: nodes still draining: run it again). Raises LockHeld,
    LeaseLost, StoreError, ProviderError.
    """
    from navarch.planner.context import PlanOptions
    from navarch.reconcile.run import gather, run_apply

    if confirm is None and not auto_approve:
        raise NavarchError("destroy needs approval: pass auto_approve=True or confirm=")
    fl = loaded(fleet)
    names = list(pools or ())
    what = (
        f"{'pool' if len(names) == 1 else 'pools'} {', '.join(names)}"
        if names
        else f"fleet {fl.name}"
    )
    opened = open_fleet(fl, acting=True)
    opened.secret_optional = True  # a fleet whose secret is lost can still be destroyed
    options = PlanOptions(pools=frozenset(names) or None, destroy=True, force=force)
    outcomes: list[Outcome] = []
    for _ in range(3):  # cordon + drain, then what finished draining at once, then re-check
        result = run_apply(
            opened,
            command=f"destroy {fl.path}",
            clock=_clock(clock),
            confirm=confirm,
            options=options,
            on_outcome=on_outcome,
            actor=actor,
        )
        if result is None:
            return DestroyResult(False, what, tuple(outcomes))
        outcomes.extend(result.outcomes)
        if result.plan.paused is not None:  # a pause holds a destroy too: act later
            return DestroyResult(True, what, tuple(outcomes), paused=result.plan)
        if not result.plan.actions:
            break
    views = gather(opened, _clock(clock)(), options).plan.views
    left = tuple(v.node for v in views if options.includes(v.pool))
    return DestroyResult(True, what, tuple(outcomes), left)


def pause(
    fleet: LoadedFleet | str | Path,
    reason: str,
    *,
    actor: Actor | None = None,
    clock: Clock | None = None,
) -> PauseResult:
    """Pause the fleet (`navarch pause`): every later plan and apply, whoever runs it,
    plans and reports as usual and acts on nothing, saying who paused, when and why, until
    resume(). The pause is kept in the fleet's state document, written under its lease.

    reason: required (plain text, at most 1,024 characters); actor: who pauses
    (navarch.actor; default "user@host" of this process); clock: default the system clock.
    Returns PauseResult (the pause, the one it replaced, one line). Raises NavarchError
    for an empty or too long reason, LockHeld, LeaseLost, StoreError.
    """
    from navarch.reconcile.operator.pause import pause as pause_fleet

    return pause_fleet(_opened(fleet), reason, actor=actor, clock=_clock(clock))


def resume(
    fleet: LoadedFleet | str | Path,
    *,
    actor: Actor | None = None,
    clock: Clock | None = None,
) -> PauseResult:
    """Clear the fleet's pause (`navarch resume`): the next run acts again. A fleet that is
    not paused is left as it is (PauseResult.before is None). actor: as for pause.
    Raises LockHeld, LeaseLost, StoreError."""
    from navarch.reconcile.operator.pause import resume as resume_fleet

    return resume_fleet(_opened(fleet), actor=actor, clock=_clock(clock))


def cordon(
    fleet: LoadedFleet | str | Path,
    node: str,
    reason: str,
    *,
    actor: Actor | None = None,
    clock: Clock | None = None,
    run_id: str | None = None,
) -> VerbResult:
    """An operator's cordon of `node` with `reason` (`navarch cordon`): the scheduler's
    cordon playbook runs with it, and navarch never undoes it itself (only uncordon).
    Holds the lease; audited with who acted. run_id: the audit log's run id (default a
    new one). Returns VerbResult (detail: the playbook's output).

    Raises NavarchError when the reason is empty or too long (cordon_reason), the node is
    not this fleet's, navarch is already taking it out of service, or the playbook
    fails; LockHeld, LeaseLost. Source: navarch.reconcile.operator.manual.
    """
    from navarch.reconcile.operator.manual import cordon as run

    detail = run(_opened(fleet), node, reason, clock=_clock(clock), actor=actor, run_id=run_id)
    return VerbResult("cordon", node, detail)


def cordon_reason(reason: str) -> str:
    """An operator's cordon reason made plain, as cordon() will record it; raises
    NavarchError when it is empty or too long (textsafe.operator_reason), so a caller can
    refuse it before it asks a person to confirm anything."""
    from navarch.reconcile.operator.manual import CORDON_REASON_SHOWN
    from navarch.textsafe import operator_reason

    return operator_reason(reason, CORDON_REASON_SHOWN)


def uncordon(
    fleet: LoadedFleet | str | Path,
    node: str,
    *,
    force: bool = False,
    actor: Actor | None = None,
    clock: Clock | None = None,
    run_id: str | None = None,
) -> VerbResult:
    """Return `node` to service (`navarch uncordon`): only a node navarch or an operator's
    cordon took out, only with a fresh healthy report, never a lemon's instance; force
    lifts those rules (never for a node being terminated) and the detail says which it
    overrode. Holds the lease; audited with who acted.

    Raises NavarchError saying why not; LockHeld, LeaseLost. Source: LBNL NHC's "only
    undo what you did yourself" (navarch.reconcile.operator.uncordon).
    """
    from navarch.reconcile.operator.uncordon import uncordon as run

    detail = run(_opened(fleet), node, force=force, clock=_clock(clock), actor=actor, run_id=run_id)
    return VerbResult("uncordon", node, detail)


def reboot(
    fleet: LoadedFleet | str | Path,
    node: str,
    *,
    force: bool = False,
    actor: Actor | None = None,
    clock: Clock | None = None,
    run_id: str | None = None,
) -> VerbResult:
    """Reboot `node` through its provider's API (`navarch reboot`: EC2 RebootInstances,
    Compute Engine instances.reset, Lambda Cloud restart, the local provider's reboot).
    Refused while its latest report shows GPU processes unless force. Holds the lease;
    audited with who acted.

    Raises NavarchError (not this fleet's node, GPU processes, the provider refused);
    LockHeld, LeaseLost. Source: navarch.reconcile.operator.manual.
    """
    from navarch.reconcile.operator.manual import reboot as run

    detail = run(_opened(fleet), node, force=force, clock=_clock(clock), actor=actor, run_id=run_id)
    return VerbResult("reboot", node, detail)


def adopt(
    fleet: LoadedFleet | str | Path,
    pool: str,
    match: AdoptFilter,
    *,
    mode: str | None = None,
    auto_approve: bool = False,
    confirm: Callable[[AdoptPlan], bool] | None = None,
    actor: Actor | None = None,
    clock: Clock | None = None,
) -> AdoptResult:
    """Take running instances under management in `pool` without restarting them
    (`navarch adopt`): the pool's provider lists the running instances without navarch's
    tags that `match` selects, the plan (AdoptPlan: each with its node name, those passed
    over and why, the fleet.yaml change asked for) goes to confirm(plan) unless
    auto_approve, then navarch's ownership tags are written on each in place, under the
    lease, each recorded in the audit log. mode: the mode the pool should run in
    (default observe: reconcile.operator.adopt.adopt_mode).

    Raises NavarchError without approval (neither confirm nor auto_approve) or when the
    pool's provider cannot adopt (Capability.ADOPT); ConfigError (no such pool, unknown
    mode), LockHeld, LeaseLost, StoreError, ProviderError.
    """
    from navarch.reconcile.operator.adopt import adopt as run

    if confirm is None and not auto_approve:
        raise NavarchError("adopt needs approval: pass auto_approve=True or confirm=")
    out = run(
        open_fleet(fleet, acting=True),
        pool,
        match,
        confirm=confirm or (lambda _plan: True),
        mode=mode,
        clock=_clock(clock),
        actor=actor,
    )
    return AdoptResult(out.plan, out.adopted, out.applied, out.run_id)


def force_unlock(fleet: LoadedFleet | str | Path, lock_id: str) -> UnlockResult:
    """Remove the fleet's lock if its id is `lock_id` (`navarch force-unlock`; "corrupt"
    removes an unreadable lock): for a person whose run died holding the lease.

    Raises NavarchError when no lock is held or its id is another (so no one removes a
    lock they did not mean), StoreError. Source: Terraform's force-unlock.
    """
    from navarch.reconcile.state import force_unlock as unlock
    from navarch.stores import open_store

    spec = loaded(fleet).spec
    held = unlock(open_store(spec.store_url, base_dir=spec.base_dir), spec.name, lock_id)
    return UnlockResult(lock_id, held.holder if held else None, held.command if held else None)

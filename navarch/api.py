"""navarch's supported Python surface: the questions the CLI answers, as functions.

    from navarch import api

    fleet = api.load_fleet("fleet.yaml")
    api.status(fleet).to_json()      # == `navarch status fleet.yaml --json`
    api.plan(fleet).to_json()        # == `navarch plan fleet.yaml --json`
    api.history(fleet, node="demo-train-0001").to_json()   # == `navarch history ... --json`

Every function here is the one place its question is answered: the CLI's `validate`,
`plan`, `status` and `history` and the MCP server's tools (navarch.mcp_server) call them,
so a script, an assistant and a person at a terminal get the same document. Each returns a
frozen value whose `to_json()` is the CLI's `--json` form, valid against the schema in
`schemas/` it names. Errors are the classes of navarch.errors (ConfigError for a bad
fleet.yaml, LockHeld when another run holds the fleet's lease, StoreError, ProviderError).

Only the names in `__all__` are supported; every other module of the package is private
and may change without notice. The planner never reads a clock: pass `now` (an aware UTC
datetime) to ask about a moment, or leave it None for the current time.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from navarch.actor import Actor
from navarch.errors import ConfigError, NavarchError

if TYPE_CHECKING:
    from navarch.confine import Confinement
    from navarch.history import History
    from navarch.outcome import Outcome
    from navarch.planner.model import Plan
    from navarch.reconcile.pause import PauseResult
    from navarch.reconcile.run import Fleet, Snapshot
    from navarch.reconcile.status import FleetStatus
    from navarch.spec import FleetSpec

__all__ = [
    "ApplyResult",
    "HistoryResult",
    "LoadedFleet",
    "PlanResult",
    "StatusResult",
    "Validation",
    "apply",
    "history",
    "load_fleet",
    "pause",
    "plan",
    "resume",
    "status",
    "validate",
    "validate_text",
]

#: How far back `history` reads when no `since` is given (the CLI's `--since` default).
DEFAULT_HISTORY_WINDOW_S = 24 * 3600


@dataclass(frozen=True)
class LoadedFleet:
    """A fleet.yaml that loaded and validated: its path and its desired state (FleetSpec).

    Pass it to plan, apply, status and history. Opening the store and providers happens
    inside each call, so a LoadedFleet holds no connection and can be kept.
    """

    path: Path
    spec: FleetSpec

    @property
    def name(self) -> str:
        """The fleet's name (fleet.yaml `fleet:`)."""
        return self.spec.name


@dataclass(frozen=True)
class Validation:
    """The answer of validate: `problems` is empty for a valid fleet.yaml.

    problems: one line each, "file:line: key.path: what is wrong (what to do)"; pools and
    nodes_at_target: the fleet's size when it is valid (0 otherwise).
    """

    path: str
    fleet: str | None
    problems: tuple[str, ...]
    pools: int
    nodes_at_target: int

    @property
    def ok(self) -> bool:
        """True when fleet.yaml has no problem."""
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        """{"path", "valid", "fleet", "problems": [str], "pools", "nodes_at_target"}."""
        return {
            "path": self.path,
            "valid": self.ok,
            "fleet": self.fleet,
            "problems": list(self.problems),
            "pools": self.pools,
            "nodes_at_target": self.nodes_at_target,
        }


@dataclass(frozen=True)
class PlanResult:
    """What apply would do now and why (the planner's Plan) and whether a safety rule
    stopped something (`halted`: the CLI exits 3)."""

    plan: Plan
    #: one line when every node's report is rejected for one reason (a wrong secret)
    error: str | None = None

    @property
    def halted(self) -> bool:
        """True when a safety rule (circuit breaker, orphan guard, duplicates) stopped
        something for a human."""
        return bool(self.plan.safety_stopped)

    def to_json(self) -> dict[str, Any]:
        """The document `navarch plan --json` prints (schemas/plan.schema.json)."""
        from navarch.reconcile.render import plan_to_json

        return plan_to_json(self.plan)


@dataclass(frozen=True)
class StatusResult:
    """The fleet's status (navarch.reconcile.status.FleetStatus): pools, nodes with their
    lifecycle, health, report age in seconds and ladder state; foreign instances, orphans."""

    status: FleetStatus

    def to_json(self) -> dict[str, Any]:
        """The document `navarch status --json` prints (schemas/status.schema.json)."""
        return self.status.to_json()

    def node(self, name: str) -> dict[str, Any] | None:
        """One node's item of to_json()["pools"][i]["nodes"] with its "pool" added, or None
        when the fleet has no node of that name."""
        for p in self.to_json()["pools"]:
            for n in p["nodes"]:
                if n["node"] == name:
                    return {"pool": p["pool"], **n}
        return None


@dataclass(frozen=True)
class HistoryResult:
    """What happened (to a node, or the fleet) within [since, until] and the nodes' state
    now, from the audit log (navarch.history.History)."""

    history: History

    def to_json(self) -> dict[str, Any]:
        """The document `navarch history --json` prints (schemas/history.schema.json)."""
        from navarch.history import history_to_json

        return history_to_json(self.history)

    def text(self) -> str:
        """The story as `navarch history` prints it."""
        from navarch.history import render_history

        return render_history(self.history)


@dataclass(frozen=True)
class ApplyResult:
    """What one apply did: the plan it executed, one outcome per action, its run id (the
    audit log's), and `audit_error` when the audit log's last chunk could not be written.
    `applied` is False when the caller's plan was declined (nothing was done)."""

    plan: Plan
    outcomes: tuple[Outcome, ...]
    run_id: str
    audit_error: str | None
    applied: bool = True
    failed: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        """{"applied", "run_id", "audit_error", "halted", "plan": plan.schema.json document,
        "outcomes": [{"action", "pool", "node", "kind", "ok", "detail"}]}."""
        from navarch.reconcile.render import plan_to_json

        return {
            "applied": self.applied,
            "run_id": self.run_id,
            "audit_error": self.audit_error,
            "halted": bool(self.plan.safety_stopped),
            "plan": plan_to_json(self.plan),
            "outcomes": [
                {
                    "action": o.action.kind.value,
                    "pool": o.action.pool,
                    "node": o.action.node,
                    "kind": o.kind.value,
                    "ok": o.ok,
                    "detail": o.detail,
                }
                for o in self.outcomes
            ],
        }


def _now(now: datetime | None) -> datetime:
    if now is None:
        return datetime.now(UTC)
    if now.tzinfo is None:
        raise ConfigError(
            f"now={now.isoformat()} has no timezone",
            hint="pass an aware UTC datetime, e.g. datetime.now(UTC)",
        )
    return now.astimezone(UTC)


def _fleet(fleet: LoadedFleet | str | Path) -> LoadedFleet:
    return fleet if isinstance(fleet, LoadedFleet) else load_fleet(fleet)


def _open(fleet: LoadedFleet) -> Fleet:
    from navarch.fleet_secret import ensure_local_secret
    from navarch.reconcile.run import Fleet

    ensure_local_secret(fleet.spec)
    return Fleet.open(fleet.spec)


def load_fleet(path: str | Path) -> LoadedFleet:
    """Load and validate fleet.yaml at `path` (schemas/fleet.schema.json, defaults,
    cross-field rules).

    Raises ConfigError naming the file, line and key path of the first problem (validate
    lists them all).
    """
    from navarch.fleet_file import load_fleet as _load

    return LoadedFleet(Path(path), _load(path))


def validate(path: str | Path) -> Validation:
    """Every problem `navarch validate` finds in fleet.yaml at `path`: schema errors in
    file order, the first cross-field error, missing or broken playbooks.

    Never raises for a bad file: an unreadable file or bad YAML is its one problem.
    """
    return _validate(path, None)


def _validate(path: str | Path, confine: Confinement | None) -> Validation:
    from navarch.fleet_file import fleet_problems
    from navarch.fleet_file import load_fleet as _load

    problems = tuple(str(p) for p in fleet_problems(path, confine=confine))
    if problems:
        return Validation(str(path), None, problems, 0, 0)
    spec = _load(path)
    return Validation(
        str(path), spec.name, (), len(spec.pools), sum(p.target_nodes for p in spec.pools)
    )


def validate_text(
    text: str, *, beside: str | Path, forbidden: Iterable[Path | None] = ()
) -> Validation:
    """validate() of a candidate fleet.yaml given as text, read as if it were the file
    `beside` (so its relative paths, playbooks and file:// store resolve as they would).

    The candidate is confined (navarch.confine): a file it names that validate would open
    (a pool's playbooks) is opened only when it lies inside `beside`'s directory by a
    relative path and is neither the candidate's secret file nor one of `forbidden` (the
    served fleet's secret file); any other is a problem of its own, never opened. Its
    secret.file and file:// store are never opened, and no problem quotes the content of
    a file. The text is written to a temporary file in `beside`'s directory and removed
    at once; nothing else is written. Problems name the candidate as `beside`.
    """
    from navarch.confine import Confinement

    target = Path(beside)
    confine = Confinement.beside(target, forbidden)
    fd, tmp = tempfile.mkstemp(
        prefix=".navarch-candidate-",
        suffix=".yaml",
        dir=target.parent if str(target.parent) else ".",
    )
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        result = _validate(tmp, confine)
    finally:
        os.unlink(tmp)
    problems = tuple(p.replace(tmp, str(target)) for p in result.problems)
    return Validation(str(target), result.fleet, problems, result.pools, result.nodes_at_target)


def snapshot(fleet: LoadedFleet, now: datetime, options: Any = None) -> tuple[Fleet, Snapshot]:
    """One read-only look at the world (store, providers, reports) and the plan made from
    it; private to navarch's front doors (CLI, MCP), not part of `__all__`."""
    from navarch.reconcile.run import gather

    opened = _open(fleet)
    return opened, gather(opened, now, options)


def plan(
    fleet: LoadedFleet | str | Path, *, now: datetime | None = None, options: Any = None
) -> PlanResult:
    """What `navarch apply` would do at `now` and why: actions with reasons, the halts of
    the safety rules, nodes and their lifecycles. Reads only; changes nothing.

    options: a PlanOptions (pools, --replace, --allow-destroy); None plans the whole fleet.
    Raises ConfigError (bad fleet.yaml, missing fleet secret), StoreError, ProviderError.
    """
    from navarch.reconcile.reports import fleet_rejection

    _, snap = snapshot(_fleet(fleet), _now(now), options)
    return PlanResult(snap.plan, fleet_rejection(snap.observed.views))


def status(fleet: LoadedFleet | str | Path, *, now: datetime | None = None) -> StatusResult:
    """The fleet's status at `now`: every pool and node with lifecycle, health, report age
    (seconds) and ladder state (schemas/status.schema.json). Reads only.

    Raises ConfigError, StoreError, ProviderError.
    """
    from navarch.reconcile.status import fleet_status

    loaded = _fleet(fleet)
    _, snap = snapshot(loaded, _now(now))
    return StatusResult(fleet_status(loaded.spec, snap))


def history(
    fleet: LoadedFleet | str | Path,
    node: str | None = None,
    since: datetime | timedelta | str | None = None,
    *,
    now: datetime | None = None,
) -> HistoryResult:
    """What happened to `node` (or the whole fleet) from `since` until `now`, and why, from
    the audit log; oldest first, then each node's state now.

    since: an aware datetime, a timedelta back from now, or text as `navarch history
    --since` takes it (a duration such as "1h" or "7d", or an RFC 3339 time); None means
    the last 24 hours. Raises ConfigError for a `since` that is none of these (or reaches
    back before the year 1), StoreError when the store cannot be read.
    """
    from navarch.durations import window_start
    from navarch.history import read_history
    from navarch.reconcile.state import load_memory
    from navarch.stores import open_store

    loaded = _fleet(fleet)
    until = _now(now)
    if since is None:
        since = timedelta(seconds=DEFAULT_HISTORY_WINDOW_S)
    start = window_start(since, until)
    spec = loaded.spec
    store = open_store(spec.store_url, base_dir=spec.base_dir)
    memory, _ = load_memory(store, spec.name)
    return HistoryResult(
        read_history(store, spec.name, memory, since=start, until=until, node=node)
    )


def apply(
    fleet: LoadedFleet | str | Path,
    *,
    plan: PlanResult | None = None,
    scope: Iterable[str] | None = None,
    auto_approve: bool = False,
    confirm: Callable[[Plan], bool] | None = None,
    on_outcome: Callable[[Outcome], None] | None = None,
    options: Any = None,
    run_id: str | None = None,
    actor: Actor | None = None,
    clock: Callable[[], datetime] | None = None,
) -> ApplyResult:
    """Converge the fleet: take its lease, look again, execute the plan's actions under
    every safety rule (budget, breaker, rate limit, ownership), record each in the audit
    log, write state, release the lease.

    plan: a PlanResult from plan(); its actions are applied only if the world has not moved
    on since (else StalePlan). scope: the nodes `plan` was narrowed to (an MCP
    confirmation): only their observations and the halts must be unchanged, not every
    node's (None: every node). Without auto_approve and a plan, `confirm(plan)` must accept
    the plan; with neither, NavarchError is raised before anything is done. actor: who asks
    (navarch.actor: a person, a CI job, an MCP client, a scheduled run), kept in every
    audit record of the run as `by`; the caller says it (the CLI reads its environment,
    the MCP server names its client). clock: the run's
    clock (default: the system clock; the CLI passes navarch.cli.process_clock()).
    Raises LockHeld (another run holds the lease), LeaseLost, StalePlan, StoreError,
    ProviderError.
    """
    from navarch.reconcile.run import run_apply, system_clock

    loaded = _fleet(fleet)
    if confirm is None and plan is None and not auto_approve:
        raise NavarchError(
            "apply needs approval: pass auto_approve=True, a plan from "
            "api.plan() to apply exactly it, or confirm="
        )
    shown: list[Plan] = []

    def asked(p: Plan) -> bool:
        shown.append(p)
        return True if confirm is None else confirm(p)

    result = run_apply(
        _open(loaded),
        command=f"apply {loaded.path}",
        clock=clock or system_clock,
        saved=plan.plan if plan is not None else None,
        saved_nodes=frozenset(scope) if scope is not None else None,
        confirm=asked,
        on_outcome=on_outcome,
        options=options,
        run_id=run_id,
        actor=actor,
    )
    if result is None:  # confirm() declined the plan it was shown: nothing was done
        return ApplyResult(shown[-1], (), "", None, applied=False)
    failed = tuple(o.action.node or o.action.pool for o in result.outcomes if not o.ok)
    return ApplyResult(
        result.plan, result.outcomes, result.run_id, result.audit_error, failed=failed
    )


def pause(
    fleet: LoadedFleet | str | Path,
    reason: str,
    *,
    actor: Actor | None = None,
    clock: Callable[[], datetime] | None = None,
) -> PauseResult:
    """Pause the fleet (`navarch pause`): every later plan and apply, whoever runs it,
    plans and reports as usual and acts on nothing, saying who paused, when and why, until
    resume(). The pause is kept in the fleet's state document, written under its lease.

    reason: required (plain text, at most 1,024 characters); actor: who pauses
    (navarch.actor; default "user@host" of this process); clock: default the system clock. Returns
    navarch.reconcile.pause.PauseResult (the pause, the one it replaced, one line).
    Raises NavarchError for an empty or too long reason, LockHeld, LeaseLost, StoreError.
    """
    from navarch.reconcile.pause import pause as pause_fleet
    from navarch.reconcile.run import system_clock

    return pause_fleet(_open(_fleet(fleet)), reason, actor=actor, clock=clock or system_clock)


def resume(
    fleet: LoadedFleet | str | Path,
    *,
    actor: Actor | None = None,
    clock: Callable[[], datetime] | None = None,
) -> PauseResult:
    """Clear the fleet's pause (`navarch resume`): the next run acts again. A fleet that is
    not paused is left as it is (PauseResult.before is None). actor: as for pause. Raises LockHeld, LeaseLost,
    StoreError."""
    from navarch.reconcile.pause import resume as resume_fleet
    from navarch.reconcile.run import system_clock

    return resume_fleet(_open(_fleet(fleet)), actor=actor, clock=clock or system_clock)

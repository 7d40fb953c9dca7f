"""The values navarch.api returns: frozen dataclasses, each with `to_json()` (the CLI's
`--json` form, valid against the schema in `schemas/` it names, where it has one).

Imports of the planner and reconciler stay inside the methods, so `from navarch import
api` stays light for a node's agent and a script.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from navarch.fleet.spec import FleetSpec
    from navarch.history import History
    from navarch.outcome import Outcome
    from navarch.planner.model import Memory, Plan
    from navarch.providers.preflight import Preflight
    from navarch.reconcile.fault_report import FaultReport
    from navarch.reconcile.operator.adopt import Adoption, AdoptPlan
    from navarch.reconcile.status import FleetStatus

__all__ = [
    "AdoptResult",
    "ApplyResult",
    "CloudInit",
    "DestroyResult",
    "HistoryResult",
    "LoadedFleet",
    "PlanResult",
    "Problem",
    "SavedPlan",
    "StatusPage",
    "StatusResult",
    "UnlockResult",
    "Validation",
    "VerbResult",
]


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
class Problem:
    """One problem of a fleet.yaml, as its parts: what is wrong (message), where (file,
    1-based line, key path such as "pools.train.nodes.min"; None where unknown) and what
    to do (hint)."""

    message: str
    file: str | None = None
    line: int | None = None
    key_path: str | None = None
    hint: str | None = None

    def to_json(self) -> dict[str, Any]:
        """{"message", "file", "line", "key_path", "hint"}; absent parts are null."""
        return {
            "message": self.message,
            "file": self.file,
            "line": self.line,
            "key_path": self.key_path,
            "hint": self.hint,
        }


@dataclass(frozen=True)
class Validation:
    """The answer of validate: `problems` is empty for a valid fleet.yaml.

    problems: one line each, "file:line: key.path: what is wrong (what to do)"; errors: the
    same problems in parts (Problem), in the same order; pools and nodes_at_target: the
    fleet's size when it is valid (0 otherwise).
    """

    path: str
    fleet: str | None
    problems: tuple[str, ...]
    pools: int
    nodes_at_target: int
    errors: tuple[Problem, ...] = ()

    @property
    def ok(self) -> bool:
        """True when fleet.yaml has no problem."""
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        """{"path", "ok", "valid" (the same), "fleet", "problems": [str], "errors":
        [Problem.to_json()], "pools", "nodes_at_target"}."""
        return {
            "path": self.path,
            "ok": self.ok,
            "valid": self.ok,
            "errors": [e.to_json() for e in self.errors],
            "fleet": self.fleet,
            "problems": list(self.problems),
            "pools": self.pools,
            "nodes_at_target": self.nodes_at_target,
        }


@dataclass(frozen=True)
class AdoptResult:
    """What `navarch adopt` did: the plan it showed, the instances it tagged (adopted, in
    plan order), applied (False: consent refused or nothing matched) and the audit log's
    run id. mode: the mode the pool should run in (plan.mode; fleet.yaml's pool `mode:`)."""

    plan: AdoptPlan
    adopted: tuple[Adoption, ...]
    applied: bool
    run_id: str

    @property
    def mode(self) -> str:
        return self.plan.mode

    def to_json(self) -> dict[str, Any]:
        return {
            **self.plan.to_json(),
            "applied": self.applied,
            "adopted": [a.to_json() for a in self.adopted],
            "run_id": self.run_id,
        }


@dataclass(frozen=True)
class PlanResult:
    """What apply would do now and why (the planner's Plan) and whether a safety rule
    stopped something (`halted`: the CLI exits 3)."""

    plan: Plan
    #: one line when every node's report is rejected for one reason (a wrong secret)
    error: str | None = None
    #: what the plan's launches need and lack (navarch.reconcile.preflight; None: not
    #: checked); a gap (`blocks`): the CLI exits 1, as apply would stop before any action
    preflight: Preflight | None = None

    @property
    def halted(self) -> bool:
        """True when a safety rule (circuit breaker, orphan guard, duplicates) stopped
        something for a human."""
        return bool(self.plan.safety_stopped)

    def to_json(self) -> dict[str, Any]:
        """The document `navarch plan --json` prints (schemas/plan.schema.json)."""
        from navarch.reconcile.render import plan_to_json

        return plan_to_json(self.plan)

    def text(self, *, verbose: bool = False) -> str:
        """The plan as `navarch plan` prints it (Terraform's symbols, a reason under each
        change, one summary line); verbose lists every action of a large group."""
        return plan_text(self.plan, verbose=verbose)

    def markdown(self) -> str:
        """The plan as a pull-request comment (`navarch plan --markdown`)."""
        from navarch.reconcile.render import render_markdown

        return render_markdown(self.plan)


def plan_text(plan: Plan, *, verbose: bool = False) -> str:
    """A Plan (as handed to an apply's confirm callback) as `navarch plan` prints it."""
    from navarch.reconcile.render import render_text

    return render_text(plan, verbose=verbose)


def plan_actions_json(plan: Plan) -> list[dict[str, Any]]:
    """The `actions` of the plan's JSON document (schemas/plan.schema.json), alone."""
    from navarch.reconcile.render import action_to_json

    return [action_to_json(a) for a in plan.actions]


@dataclass(frozen=True)
class SavedPlan:
    """A plan saved by `navarch plan --out FILE`: the plan and the fleet file it names."""

    plan: PlanResult
    fleet_file: str


@dataclass(frozen=True)
class StatusResult:
    """The fleet's status (navarch.reconcile.status.FleetStatus): pools, nodes with their
    lifecycle, health, report age in seconds and ladder state; foreign instances, orphans."""

    status: FleetStatus

    def to_json(self) -> dict[str, Any]:
        """The document `navarch status --json` prints (schemas/status.schema.json)."""
        return self.status.to_json()

    def text(self, *, show_all: bool = False, fleet_path: str = "fleet.yaml") -> str:
        """The tables `navarch status` prints: counts per pool, the nodes that are not
        healthy (every node with show_all), the ladder, and what else it found
        (navarch.reconcile.status_text). fleet_path: named in the `navarch history` hint."""
        from navarch.reconcile.status_text import render_status

        return render_status(self.status, show_all=show_all, fleet_path=fleet_path)

    def node(self, name: str) -> dict[str, Any] | None:
        """One node's item of to_json()["pools"][i]["nodes"] with its "pool" added, or None
        when the fleet has no node of that name."""
        for p in self.status.pools:
            for n in p.nodes:
                if n.node == name:
                    return {"pool": p.pool, **n.to_json()}
        return None


@dataclass(frozen=True)
class StatusPage:
    """The fleet's static HTML status page (navarch.notify.status_page) and the one-line error
    when every report is rejected for one reason (else None)."""

    html: str
    error: str | None


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
class ReportResult:
    """Over a period, per fault class, what navarch saw, what it would have done (actions
    the pools' modes held back) and what actually happened to each node
    (navarch.reconcile.fault_report.FaultReport)."""

    report: FaultReport

    def to_json(self) -> dict[str, Any]:
        """The document `navarch report --json` prints (schemas/report.schema.json)."""
        from navarch.reconcile.fault_report import report_to_json

        return report_to_json(self.report)

    def text(self) -> str:
        """The report as `navarch report` prints it."""
        from navarch.reconcile.fault_report import render_report

        return render_report(self.report)


def _outcome_json(o: Outcome) -> dict[str, Any]:
    return {
        "action": o.action.kind.value,
        "pool": o.action.pool,
        "node": o.action.node,
        "kind": o.kind.value,
        "ok": o.ok,
        "detail": o.detail,
    }


@dataclass(frozen=True)
class ApplyResult:
    """What one apply did: the plan it executed, one outcome per action, its run id (the
    audit log's), and `audit_error` when the audit log's last chunk could not be written.
    `applied` is False when the caller's plan was declined (nothing was done). memory: the
    fleet's state after the run (None when nothing was applied)."""

    plan: Plan
    outcomes: tuple[Outcome, ...]
    run_id: str
    audit_error: str | None
    applied: bool = True
    failed: tuple[str, ...] = field(default=())
    memory: Memory | None = field(default=None, repr=False, compare=False)

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
            "outcomes": [_outcome_json(o) for o in self.outcomes],
        }


@dataclass(frozen=True)
class DestroyResult:
    """What one destroy did. applied: False when confirm() declined (nothing was done);
    paused: the plan of a paused fleet (a pause holds a destroy too; nothing was done),
    else None; outcomes: every action of its passes; left: the nodes of its scope still
    there (draining); what: "fleet demo" or "pool train" (for a person)."""

    applied: bool
    what: str
    outcomes: tuple[Outcome, ...] = ()
    left: tuple[str, ...] = ()
    paused: Plan | None = None

    @property
    def failed(self) -> int:
        """How many of its actions failed."""
        return sum(not o.ok for o in self.outcomes)

    @property
    def done(self) -> bool:
        """True when it was applied, nothing failed and no node of its scope is left."""
        return self.applied and self.paused is None and not self.failed and not self.left

    def to_json(self) -> dict[str, Any]:
        """{"applied", "what", "paused", "failed", "left": [node], "done", "outcomes":
        [{"action", "pool", "node", "kind", "ok", "detail"}]}."""
        return {
            "applied": self.applied,
            "what": self.what,
            "paused": self.paused.paused.message if self.paused and self.paused.paused else None,
            "failed": self.failed,
            "left": list(self.left),
            "done": self.done,
            "outcomes": [_outcome_json(o) for o in self.outcomes],
        }


@dataclass(frozen=True)
class VerbResult:
    """What an operator verb on one node did (cordon, uncordon, reboot): the verb, the
    node, and `detail` (one line: the playbook's or provider's answer, what was
    overridden). A verb that could not act raises instead of returning."""

    verb: str
    node: str
    detail: str

    def to_json(self) -> dict[str, Any]:
        """{"verb", "node", "detail"}."""
        return {"verb": self.verb, "node": self.node, "detail": self.detail}


@dataclass(frozen=True)
class UnlockResult:
    """What force_unlock removed: the lock's id and, when it could be read, who held it
    (holder) for which command."""

    lock_id: str
    holder: str | None
    command: str | None

    def to_json(self) -> dict[str, Any]:
        """{"lock_id", "holder", "command"}."""
        return {"lock_id": self.lock_id, "holder": self.holder, "command": self.command}


@dataclass(frozen=True)
class CloudInit:
    """The cloud-init user-data a node boots with: node: its name; text: the user-data;
    key_shown: False when its signing key is a placeholder (bootstrap.KEY_PLACEHOLDER)."""

    node: str
    text: str
    key_shown: bool

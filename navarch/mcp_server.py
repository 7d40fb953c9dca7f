"""`navarch mcp FLEET`: the fleet as a Model Context Protocol server over stdio.

Built on the official `mcp` Python SDK (extra `navarch[mcp]`). Every tool answers through
navarch.api, the functions the CLI calls, so an assistant reads the same documents as
`navarch status --json`, `plan --json` and `history --json` (schemas/ names each).

Read-only by default: fleet_status, node_status, plan, validate_fleet, recent_events, and
the resources navarch://status (the status document) and navarch://fleet.yaml (the fleet
file). With allow_actions (`--allow-actions`) the acting tools apply, cordon, uncordon and
replace exist too; each takes the fleet's lease like the CLI verb it mirrors, goes through
the same planner and executor (every safety rule holds: ownership tags, disruption budget,
circuit breaker, repair rate limit, the lemon and fresh-report rules of uncordon), and is
written to the audit log with actor `mcp` and the MCP client's name (the clientInfo it
sent at initialize) as `client`. Errors are returned as tool errors carrying navarch's
one-line message.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from navarch import __version__, api
from navarch.actor import Actor
from navarch.durations import parse_duration_s
from navarch.errors import ConfigError, NavarchError

if TYPE_CHECKING:
    from navarch.reconcile.run import Fleet

__all__ = ["ACTING_TOOLS", "READ_ONLY_TOOLS", "build_server"]

_P = ParamSpec("_P")
_R = TypeVar("_R")

READ_ONLY_TOOLS = ("fleet_status", "node_status", "plan", "validate_fleet", "recent_events")
ACTING_TOOLS = ("apply", "cordon", "uncordon", "replace")

_NODE_FIELDS = (
    "Node fields: node (name), pool, instance_id (the cloud VM's id), provider, zone, "
    "instance_type, lifecycle (provisioning|booting|healthy|degraded|unknown|stale|offline|"
    "unhealthy|preempting|maintenance|stuck|cordoned|draining|terminating|orphan|remediating|"
    "operator_cordoned: what navarch believes about the node; healthy and degraded serve "
    "work), health "
    "(the last accepted report's status: healthy|degraded|unhealthy, null without one), "
    "report_fresh (true while that report still speaks for the node), health_score (0-100 "
    "from the report), report_age_s (seconds since the report was written), clock_skew_s "
    "(seconds between the node's clock and the store's), reason (why the lifecycle), "
    "rejected (why the last report was refused: bad signature, replay, schema; null when "
    "accepted), ladder (remediation state: rung = last remedy tried, rung_fault = the fault "
    "it answered, faults_in_window, lemon_after, lemon = replaced rather than repaired)."
)

_STATUS_DESC = (
    "The fleet's status now (the document of `navarch status --json`, "
    "schemas/status.schema.json). Read-only. Top level: fleet, store (URL), state_serial "
    "(the state document's version), error (one line when every report is rejected for one "
    "reason, e.g. a wrong fleet secret; else null), pools (each: pool, provider, min/target/"
    "max node counts, nodes, lemons = instance ids replaced as lemons), rejections (reason -> "
    "count of rejected reports, all time), foreign (instances without this fleet's tags, left "
    "alone), orphans (this fleet's instances whose pool is gone), duplicates. " + _NODE_FIELDS
)

_NODE_DESC = (
    "One node: its status item (as in fleet_status, plus its pool) and its history from the "
    "audit log over the last `since` (a duration: 30m, 24h, 7d; default 7d). Read-only. "
    "Returns {status: node item (null once the node is gone), history: the `navarch history "
    "--json` document}; an error when the fleet never had the node. "
    "History events: time (RFC 3339 UTC), action (provision, cordon, drain, terminate, "
    "uncordon, reboot, reset_gpu, diagnose, ...), reason (why, in words), ok, detail, actor (scheduled = an "
    "apply deciding itself, replace = apply --replace, operator = a human's verb, mcp = an "
    "MCP client's tool call; client names it), report (the health report the action was "
    "decided on: sequence, status, boot_id), fault (structured key, e.g. xid:79), rung "
    "(remedy tried), lemon. nodes: the node's state now (phase, since when, why). " + _NODE_FIELDS
)

_PLAN_DESC = (
    "What `navarch apply` would do now and why (the document of `navarch plan --json`, "
    "schemas/plan.schema.json). Read-only: it changes nothing. Fields: actions (each: action "
    "= provision|cordon|drain|terminate|uncordon|scale|update_tags|reboot|reset_gpu|diagnose, "
    "pool, node, reason = why in "
    "words, action_reason = the reason's code, fault = the structured fault key that drove it, "
    "rung = the remedy chosen, replaces = the node a provision replaces), halts (safety rules "
    "that held something back: pool, rule = circuit_breaker|disruption_budget|"
    "repair_rate_limit|capacity|max_nodes|orphan_guard|duplicate_node, message), summary (counts by action), converged "
    "(true when nothing is left to do or wait for), pending (what the fleet waits for), nodes "
    "(node, pool, lifecycle, reason, report_age_s in seconds, streak = consecutive "
    "unhealthy reports, health_score 0-100, drift), state_serial and fingerprints (a saved "
    "plan is refused once they change)."
)

_VALIDATE_DESC = (
    "Validate a candidate fleet.yaml given as text, before proposing it (schema, cross-field "
    "rules, playbooks), read as if it replaced this server's fleet file (relative paths "
    "resolve beside it; nothing is written there). Read-only. Returns {path, valid, fleet, "
    "problems: one line each 'file:line: key.path: what is wrong (what to do)', pools, "
    "nodes_at_target}."
)

_EVENTS_DESC = (
    "Recent events of the whole fleet from the audit log: every action navarch took (or an "
    "operator or MCP client asked for), oldest first, over the last `since` (a duration: 30m, "
    "24h, 7d; default 24h), and the state of nodes navarch is acting on now. Read-only. The "
    "document of `navarch history --json` (schemas/history.schema.json); event fields as in "
    "node_status."
)


def _answer(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """A tool whose NavarchError reaches the client as its one-line message (the SDK hides
    any other exception's text as a crash)."""

    @functools.wraps(fn)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return fn(*args, **kwargs)
        except NavarchError as exc:
            raise ToolError(str(exc)) from exc

    return wrapper


def _since(text: str) -> timedelta:
    try:
        return timedelta(seconds=parse_duration_s(text))
    except ValueError as exc:
        raise ConfigError(
            f"since {text!r} is not a duration", hint="write it like 30m, 24h, 7d or 1h30m"
        ) from exc


def _actor(ctx: Context) -> Actor:
    """The calling client, named by its initialize request (clientInfo.name)."""
    params = ctx.session.client_params
    return Actor.mcp(params.client_info.name if params is not None else "")


_OUTCOME_DOC = (
    "Returns {applied, run_id (the audit log's run), audit_error, halted (a safety rule "
    "stopped something for a human), plan (as the plan tool), outcomes: one per action "
    "with action, pool, node, kind = ok|transient|permanent|refused|skipped, ok, detail}."
)

_APPLY_DESC = (
    "Converge the fleet now, as `navarch apply --auto-approve`: takes the fleet's lease "
    "(fails if another run holds it), looks again and executes the plan under every "
    "safety rule (disruption budget, circuit breaker, repair rate limit, ownership tags). "
    "Audited with actor mcp and this client's name. Call plan first. " + _OUTCOME_DOC
)

_REPLACE_DESC = (
    "Replace one node, as `navarch apply --replace NODE --auto-approve`: the node is "
    "cordoned, drained and terminated and a replacement provisioned (surge first), within "
    "the pool's disruption budget and repair rate limit; the rest of the plan is applied "
    "in the same run, as the CLI does. Takes the lease; audited with this client's name. "
    + _OUTCOME_DOC
)

_CORDON_DESC = (
    "An operator's cordon of one node with a reason (shown to the scheduler's users), as "
    "`navarch cordon FLEET NODE --reason TEXT`: navarch never undoes it itself, only "
    "uncordon does. Takes the lease; refused while navarch is already taking the node out "
    "of service. Audited with actor mcp and this client's name. Returns {node, cordoned: "
    "true, detail (the scheduler playbook's output)}."
)

_UNCORDON_DESC = (
    "Return a node to service, as `navarch uncordon FLEET NODE`: only a node navarch or an "
    "operator's cordon took out, only with a fresh healthy report, never a lemon's "
    "instance. Takes the lease; audited with actor mcp and this client's name. Returns "
    "{node, uncordoned: true, detail}."
)


def build_server(
    fleet_path: str | Path,
    *,
    allow_actions: bool = False,
    now: Callable[[], datetime] | None = None,
) -> MCPServer[Any]:
    """The MCP server for the fleet at `fleet_path` (loaded and validated now, so a bad
    fleet.yaml fails before the server starts: ConfigError).

    allow_actions: register the acting tools (apply, cordon, uncordon, replace).
    now: the clock the read-only tools ask about (navarch.cli passes
    navarch.cli.process_clock()); None reads the system clock on each call.
    """
    path = Path(fleet_path)
    loaded = api.load_fleet(path)

    def clock() -> datetime | None:
        return now() if now is not None else None

    server: MCPServer[Any] = MCPServer(
        "navarch",
        version=__version__,
        instructions=(
            f"navarch fleet {loaded.name} ({path}). Tools read the fleet's status, "
            "plan and audit log"
            + (
                ", and act on it under navarch's safety rules"
                if allow_actions
                else " (read-only server)"
            )
            + ". Times are RFC 3339 UTC; durations in seconds (_s)."
        ),
    )
    _reading_tools(server, loaded, path, clock)
    _resources(server, loaded, path, clock)
    if allow_actions:
        _acting_tools(server, loaded, now)
    return server


def _reading_tools(
    server: MCPServer[Any],
    loaded: api.LoadedFleet,
    path: Path,
    clock: Callable[[], datetime | None],
) -> None:
    """fleet_status, node_status, plan, validate_fleet and recent_events: each read-only."""
    ro = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)

    @server.tool(description=_STATUS_DESC, annotations=ro)
    @_answer
    def fleet_status() -> dict[str, Any]:
        return api.status(loaded, now=clock()).to_json()

    @server.tool(description=_NODE_DESC, annotations=ro)
    @_answer
    def node_status(node: str, since: str = "7d") -> dict[str, Any]:
        at = clock()
        status = api.status(loaded, now=at).node(node)
        hist = api.history(loaded, node, _since(since), now=at).to_json()
        if status is None and not hist["events"] and not hist["nodes"]:
            raise NavarchError(
                f"{node} is not a node of fleet {loaded.name} (fleet_status lists them)"
            )
        return {"status": status, "history": hist}

    @server.tool(description=_PLAN_DESC, annotations=ro)
    @_answer
    def plan() -> dict[str, Any]:
        return api.plan(loaded, now=clock()).to_json()

    @server.tool(description=_VALIDATE_DESC, annotations=ro)
    @_answer
    def validate_fleet(fleet_yaml: str) -> dict[str, Any]:
        return api.validate_text(fleet_yaml, beside=path).to_json()

    @server.tool(description=_EVENTS_DESC, annotations=ro)
    @_answer
    def recent_events(since: str = "24h") -> dict[str, Any]:
        return api.history(loaded, None, _since(since), now=clock()).to_json()


def _resources(
    server: MCPServer[Any],
    loaded: api.LoadedFleet,
    path: Path,
    clock: Callable[[], datetime | None],
) -> None:
    """navarch://status and navarch://fleet.yaml: the status document and the fleet file."""

    @server.resource(
        "navarch://status",
        name="status",
        mime_type="application/json",
        description="The fleet's status document (schemas/status.schema.json), "
        "as the fleet_status tool returns it.",
    )
    def status_resource() -> str:
        return json.dumps(api.status(loaded, now=clock()).to_json(), indent=1, sort_keys=True)

    @server.resource(
        "navarch://fleet.yaml",
        name="fleet.yaml",
        mime_type="application/yaml",
        description=f"The fleet file this server serves ({path.name}), as text.",
    )
    def fleet_file() -> str:
        return path.read_text()


def _acting_tools(
    server: MCPServer[Any], loaded: api.LoadedFleet, now: Callable[[], datetime] | None
) -> None:
    """apply, cordon, uncordon and replace: each the CLI verb's own code, under its lease."""
    from navarch.planner.context import PlanOptions
    from navarch.reconcile.manual import cordon as _cordon
    from navarch.reconcile.uncordon import uncordon as _uncordon

    act = ToolAnnotations(
        read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=True
    )

    @server.tool(annotations=act, description=_APPLY_DESC)
    @_answer
    def apply(ctx: Context) -> dict[str, Any]:
        return api.apply(loaded, auto_approve=True, actor=_actor(ctx), clock=now).to_json()

    @server.tool(annotations=act, description=_REPLACE_DESC)
    @_answer
    def replace(node: str, ctx: Context) -> dict[str, Any]:
        options = PlanOptions(replace=frozenset({node}))
        return api.apply(
            loaded, auto_approve=True, options=options, actor=_actor(ctx), clock=now
        ).to_json()

    @server.tool(annotations=act, description=_CORDON_DESC)
    @_answer
    def cordon(node: str, reason: str, ctx: Context) -> dict[str, Any]:
        fleet, verb_clock = _open_for_verb(loaded, now)
        detail = _cordon(fleet, node, reason, actor=_actor(ctx), clock=verb_clock)
        return {"node": node, "cordoned": True, "detail": detail}

    @server.tool(annotations=act, description=_UNCORDON_DESC)
    @_answer
    def uncordon(node: str, ctx: Context) -> dict[str, Any]:
        fleet, verb_clock = _open_for_verb(loaded, now)
        detail = _uncordon(fleet, node, actor=_actor(ctx), clock=verb_clock)
        return {"node": node, "uncordoned": True, "detail": detail}


def _open_for_verb(
    loaded: api.LoadedFleet, now: Callable[[], datetime] | None
) -> tuple[Fleet, Callable[[], datetime]]:
    """The fleet opened for an operator's verb (its local secret made first) and the verb's
    clock: the server's, else the system clock."""
    from navarch.fleet_file import ensure_local_secret
    from navarch.reconcile.run import Fleet, system_clock

    ensure_local_secret(loaded.spec)
    return Fleet.open(loaded.spec), now or system_clock


def serve(
    fleet_path: str | Path,
    *,
    allow_actions: bool = False,
    now: Callable[[], datetime] | None = None,
) -> None:
    """Run the server on stdin/stdout until the client closes it."""
    build_server(fleet_path, allow_actions=allow_actions, now=now).run("stdio")

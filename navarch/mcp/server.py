"""`navarch mcp FLEET`: the fleet as a Model Context Protocol server over stdio.

Built on the official `mcp` Python SDK (extra `navarch[mcp]`). Every tool answers through
navarch.api, the functions the CLI calls, so an assistant reads the same documents as
`navarch status --json`, `plan --json` and `history --json` (schemas/ names each).

Read-only by default: fleet_status, node_status, plan, validate_fleet, recent_events, and
the resources navarch://status (the status document) and navarch://fleet.yaml (the fleet
file, its secrets redacted). With allow_actions (`--allow-actions`) the acting tools apply,
cordon, uncordon and replace exist too. Each acts only on a plan the server returned: it
takes the plan_fingerprint of such a plan and carries out only that plan's actions for the
nodes it names, after the saved-plan stale check (navarch.mcp.confirm); and only with the
consent of a person, asked by the server itself through MCP elicitation or a one-time code
shown on the server's terminal, never by the model (navarch.mcp.consent). Anything else
is refused with the current plan to show. Each takes the fleet's lease like
the CLI verb it mirrors, goes through
the same planner and executor (every safety rule holds: ownership tags, disruption budget,
circuit breaker, repair rate limit, the lemon and fresh-report rules of uncordon), and is
written to the audit log with actor `mcp` and the MCP client's name (the clientInfo it
sent at initialize) as `client`. Errors are returned as tool errors carrying navarch's
one-line message.

Every answer and resource passes navarch.redact (webhook URLs, keys, tokens, passwords,
the fleet secret), validate_fleet opens no file outside the fleet's directory
(navarch.fleet.confine), fleet_status pages and filters its nodes, and every answer names the
fields that hold text written by nodes (navarch.mcp.views).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, ParamSpec

import anyio.from_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ClientCapabilities, ElicitationCapability, ToolAnnotations

from navarch import __version__, api
from navarch.actor import Actor
from navarch.api.acting import cordon_reason
from navarch.api.reading import stale_reason
from navarch.api.results import plan_text
from navarch.errors import ConfigError, NavarchError, StalePlan
from navarch.fleet.durations import parse_duration_s
from navarch.mcp.confirm import PlansShown, Refused, Shown, Verb, narrowed, plan_nodes
from navarch.mcp.consent import (
    CodeChannel,
    Confirm,
    ConfirmCodes,
    Consent,
    Request,
    open_channel,
)
from navarch.mcp.views import DEFAULT_PAGE, MAX_PAGE, UNTRUSTED_DOC, NodeFilter, marked, status_page
from navarch.redact import redact_json, redact_text, redact_yaml
from navarch.textsafe import terminal

__all__ = ["ACTING_TOOLS", "READ_ONLY_TOOLS", "CodeChannel", "build_server", "serve"]

_P = ParamSpec("_P")

READ_ONLY_TOOLS = ("fleet_status", "node_status", "plan", "validate_fleet", "recent_events")
ACTING_TOOLS = ("apply", "cordon", "uncordon", "replace")

_NODE_FIELDS = (
    "Node fields: node (name), pool, instance_id (the cloud VM's id), provider, zone, "
    "instance_type, lifecycle (provisioning|booting|healthy|degraded|unknown|stale|offline|"
    "unhealthy|preempting|maintenance|stuck|cordoned|draining|terminating|orphan|remediating|"
    "operator_cordoned|acceptance: what navarch believes about the node; healthy and degraded serve "
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
    "alone), orphans (this fleet's instances whose pool is gone), duplicates. "
    + _NODE_FIELDS
    + " Paged: the nodes are filtered by pool, lifecycle (a list of lifecycles), prefix "
    "(of the node name) and unhealthy_only (drop healthy nodes), ordered by pool then "
    f"name, at most `limit` (default {DEFAULT_PAGE}, at most {MAX_PAGE}) per answer; "
    "page = {matched, returned, limit, next}: pass next as `cursor` for the following "
    "page (null on the last). " + UNTRUSTED_DOC
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
    "(remedy tried), lemon. nodes: the node's state now (phase, since when, why). "
    + _NODE_FIELDS
    + " "
    + UNTRUSTED_DOC
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
    "plan is refused once they change). replace: nodes to plan a replacement of (as "
    "`navarch plan --replace NODE`). plan_fingerprint: names this plan; the acting tools "
    "(apply, replace, with --allow-actions) act only on a plan fingerprint this server "
    "returned and only once the person consents to it (the server asks them), so show "
    "the plan to the person before asking to act on it. " + UNTRUSTED_DOC
)

_VALIDATE_DESC = (
    "Validate a candidate fleet.yaml given as text, before proposing it (schema, cross-field "
    "rules, playbooks), read as if it replaced this server's fleet file (relative paths "
    "resolve beside it; nothing is written there). Read-only. Returns {path, valid, fleet, "
    "problems: one line each 'file:line: key.path: what is wrong (what to do)', pools, "
    "nodes_at_target}. Paths the candidate names (playbooks) are opened only inside the "
    "fleet's directory, never the fleet secret; others are problems, never read."
)

_EVENTS_DESC = (
    "Recent events of the whole fleet from the audit log: every action navarch took (or an "
    "operator or MCP client asked for), oldest first, over the last `since` (a duration: 30m, "
    "24h, 7d; default 24h), and the state of nodes navarch is acting on now. Read-only. The "
    "document of `navarch history --json` (schemas/history.schema.json); event fields as in "
    "node_status. " + UNTRUSTED_DOC
)


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


_CONFIRM_DOC = (
    " Acts only on a plan this server returned and only with the person's own consent. "
    "Pass the plan_fingerprint of that plan (the plan tool, or the `refused` answer of a "
    "call without one): it names the plan, it is not consent. The server then asks the "
    "person itself: through MCP elicitation (the client shows them the plan; they accept "
    "or decline), or, when the server was started with --confirm-code, by showing them a "
    "one-time code on its own terminal: the call is refused until it carries that code as "
    "confirmation_code, which only the person can give you (never invent or guess one). "
    "A call without a fingerprint, with one this server did not return or whose world "
    "moved on (state serial, instances, the named nodes' health, the safety halts: the "
    "check `navarch apply PLANFILE` makes), naming a node that plan has no action for, "
    "that the person declined, or that no person could be asked for, does nothing and is "
    "refused with {refused: why, plan: the current plan, plan_fingerprint}: show that plan "
    "to the person and ask again."
)

_OUTCOME_DOC = (
    "Returns {applied, run_id (the audit log's run), audit_error, halted (a safety rule "
    "stopped something for a human), plan (the plan executed: only the named nodes' "
    "actions), outcomes: one per action with action, pool, node, kind = ok|transient|"
    "permanent|refused|skipped, ok, detail}. "
)

_APPLY_DESC = (
    "Carry out the actions of a plan the person confirmed, for the nodes named, as "
    "`navarch apply PLANFILE` does: takes the fleet's lease (fails if another run holds "
    "it), checks the plan is not stale and executes only that plan's actions for `nodes` "
    "(each must have an action in it; a replaced node takes its replacement's launch "
    "along), under every safety rule (disruption budget, circuit breaker, repair rate "
    "limit, ownership tags); nothing else the fleet would do now (a pool's scale, which "
    "names no node, is left to a scheduled apply). Audited with actor mcp "
    "and this client's name." + _CONFIRM_DOC + " " + _OUTCOME_DOC + UNTRUSTED_DOC
)

_REPLACE_DESC = (
    "Replace one node, as `navarch apply --replace NODE`: the node is cordoned, drained "
    "and terminated and a replacement provisioned (surge first), within the pool's "
    "disruption budget and repair rate limit. Call it first without plan_fingerprint (or "
    "call plan with replace=[node]): it does nothing and returns the plan of the "
    "replacement to show; once the person agrees, call it again with that plan's "
    "fingerprint (the server then asks the person), and only this node's actions of that "
    "plan are carried out (no other pending action). Takes the lease; audited with this client's name."
    + _CONFIRM_DOC
    + " "
    + _OUTCOME_DOC
    + UNTRUSTED_DOC
)

_CORDON_DESC = (
    "An operator's cordon of one node with a reason (shown to the scheduler's users), as "
    "`navarch cordon FLEET NODE --reason TEXT`: navarch never undoes it itself, only "
    "uncordon does. Call it first without plan_fingerprint: it does nothing and returns "
    "what it would do (`would`) and the fleet's plan now, with a fingerprint; call again "
    "with the same node, reason and that fingerprint to cordon. Takes the lease; refused "
    "while navarch is already taking the node out of service. Audited with actor mcp and "
    "this client's name. Returns {node, cordoned: true, detail (the scheduler playbook's "
    "output)}." + _CONFIRM_DOC + " " + UNTRUSTED_DOC
)

_UNCORDON_DESC = (
    "Return a node to service, as `navarch uncordon FLEET NODE`: only a node navarch or an "
    "operator's cordon took out, only with a fresh healthy report, never a lemon's "
    "instance. Call it first without plan_fingerprint: it does nothing and returns what "
    "it would do and the plan now, with a fingerprint; call again with it to uncordon. "
    "Takes the lease; audited with actor mcp and this client's name. Returns {node, "
    "uncordoned: true, detail}." + _CONFIRM_DOC + " " + UNTRUSTED_DOC
)


@dataclass
class _Served:
    """What every tool of one server shares: the fleet, its file, the clock the read-only
    tools ask about, and the plans it returned (navarch.mcp.confirm)."""

    loaded: api.LoadedFleet
    path: Path
    now: Callable[[], datetime] | None
    shown: PlansShown = field(default_factory=PlansShown)
    channel: CodeChannel | None = None
    codes: ConfirmCodes | None = None

    def clock(self) -> datetime | None:
        """The moment to ask about (None: the system clock, read by api)."""
        return self.now() if self.now is not None else None

    def literals(self) -> tuple[str, ...]:
        """The fleet secret, when it can be read, to redact wherever it was written."""
        from navarch.fleet.secret import read_fleet_secret

        try:
            return (read_fleet_secret(self.loaded.spec).decode(errors="replace"),)
        except (NavarchError, OSError, AssertionError):
            return ()

    def answer(self, fn: Callable[_P, dict[str, Any]]) -> Callable[_P, dict[str, Any]]:
        """A tool whose NavarchError reaches the client as its one-line message (the SDK
        hides any other exception's text as a crash), a Refused call's as JSON with the
        plan to show; every result and message passes navarch.redact on its way out."""

        @functools.wraps(fn)
        def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> dict[str, Any]:
            try:
                result = fn(*args, **kwargs)
            except Refused as exc:
                doc = redact_json({"refused": exc.message, **exc.preview}, self.literals())
                raise ToolError(json.dumps(doc, sort_keys=True)) from exc
            except NavarchError as exc:
                raise ToolError(redact_text(str(exc), self.literals())) from exc
            redacted: dict[str, Any] = redact_json(result, self.literals())
            return redacted

        return wrapper

    def show(
        self, verb: Verb, nodes: Iterable[str] = (), reason: str | None = None
    ) -> dict[str, Any]:
        """Make the plan now (with nodes to replace for Verb.REPLACE), remember it as
        shown and return its document with `plan_fingerprint`."""
        names = sorted(set(nodes))
        options = api.PlanOptions(replace=frozenset(names)) if verb is Verb.REPLACE else None
        made = api.plan(self.loaded, now=self.clock(), options=options)
        shown = self.shown.remember(made.plan, verb, nodes=names, options=options, reason=reason)
        doc = marked(made.to_json(), "plan")
        return {**doc, "plan_fingerprint": shown.fingerprint}

    def preview(self, verb: Verb, nodes: Iterable[str], reason: str | None = None) -> Any:
        """The answer of a refused call: the plan now, for `verb` on `nodes`, to show."""
        doc = self.show(verb, nodes, reason)
        out: dict[str, Any] = {"plan": doc, "plan_fingerprint": doc["plan_fingerprint"]}
        if verb in (Verb.CORDON, Verb.UNCORDON):
            out["would"] = {"verb": verb.value, "node": next(iter(nodes)), "reason": reason}
        return out

    def confirmed(
        self, fingerprint: str, verb: Verb, nodes: Iterable[str], reason: str | None = None
    ) -> Shown:
        """The shown plan `fingerprint` names, when it was shown for `verb` and has an
        action for every node in `nodes` (cordon/uncordon: was shown for that node and
        reason). Raises Refused with a fresh plan to show otherwise."""
        names = sorted(set(nodes))
        if not names:
            raise Refused(f"{verb.value} names no node", self.preview(verb, names, reason))
        if not fingerprint:
            raise Refused(
                f"{verb.value} needs the plan_fingerprint of the plan the person saw; "
                "show this plan and call again with its fingerprint",
                self.preview(verb, names, reason),
            )
        shown = self.shown.get(fingerprint)
        if shown is None:
            raise Refused(
                f"plan_fingerprint {fingerprint} is not one this server returned",
                self.preview(verb, names, reason),
            )
        if verb in (Verb.CORDON, Verb.UNCORDON):
            if (shown.verb, shown.nodes, shown.reason) != (verb, frozenset(names), reason):
                raise Refused(
                    f"plan_fingerprint {fingerprint} was not shown for {verb.value} "
                    f"{' '.join(names)} with this reason",
                    self.preview(verb, names, reason),
                )
            return shown
        if shown.verb not in (Verb.APPLY, Verb.REPLACE):
            raise Refused(
                f"plan_fingerprint {fingerprint} was shown for {shown.verb.value}, not as a "
                "plan to apply",
                self.preview(verb, names if verb is Verb.REPLACE else (), reason),
            )
        allowed = set(plan_nodes(shown.plan))
        if verb is Verb.REPLACE:  # only a node the plan was made to replace
            allowed &= set(shown.nodes) if shown.verb is Verb.REPLACE else set()
        missing = [n for n in names if n not in allowed]
        if missing:
            raise Refused(
                f"{', '.join(missing)}: not in the confirmed plan "
                + ("as a node to replace" if verb is Verb.REPLACE else "(it has no action)"),
                self.preview(verb, names if verb is Verb.REPLACE else (), reason),
            )
        return shown

    def allowed(
        self,
        ctx: Context,
        fingerprint: str,
        verb: Verb,
        nodes: list[str],
        reason: str | None,
        code: str,
    ) -> Shown:
        """The shown plan an acting call names, current, with the person's consent to it;
        each step raises Refused (nothing done). Cordon and uncordon are checked again after
        the person answered; apply's own stale check does that for apply and replace."""
        shown = self.confirmed(fingerprint, verb, nodes, reason)
        self.still_current(shown, nodes, reason)
        self.consented(ctx, shown, verb, nodes, reason, code)
        if verb in (Verb.CORDON, Verb.UNCORDON):
            self.still_current(shown, nodes, reason)
        return shown

    def consented(
        self,
        ctx: Context,
        shown: Shown,
        verb: Verb,
        nodes: list[str],
        reason: str | None,
        code: str,
    ) -> None:
        """Return when the person allowed `verb` on `nodes` of `shown` (navarch.mcp.consent):
        `code` is the live confirmation code for it, or the client's elicitation came back
        accepted. Raises Refused otherwise, never with the code in it; nothing was done."""
        ask = self.request(shown, verb, nodes, reason)

        def again() -> Any:  # the plan now, made only when the call is refused
            return self.preview(verb, nodes if verb is not Verb.APPLY else (), reason)

        how = self.consent_by(ctx)
        if how is Consent.CODE and self.codes is not None:
            if code and self.codes.redeem(ask, code):
                return
            if code:
                raise Refused(
                    "confirmation_code is not the live code for this call (wrong, used, "
                    "expired, or issued for another plan, verb or node); nothing was done. "
                    "Call again without confirmation_code to have a new code sent to the person",
                    again(),
                )
            self.codes.issue(ask, terminal(_actor(ctx).label()))
            where = "standard error" if self.channel is CodeChannel.STDERR else "terminal"
            raise Refused(
                f"nothing was done yet: a confirmation code for this call was written to the "
                f"person on the navarch server's {where}, with the plan. Show the person this "
                "plan and ask them for the code (only they can read it); call again with the "
                "same arguments and confirmation_code",
                again(),
            )
        if how is Consent.ELICITATION:
            answer = self.ask_person(ctx, ask)
            if answer is None:
                return
            raise Refused(f"{answer}; nothing was done", again())
        raise Refused(
            "nothing was done: acting needs a person's consent and this server has no way to "
            "ask one (the client did not declare MCP elicitation, and the server was started "
            "without --confirm-code). Use a client that supports elicitation, restart the "
            "server with --confirm-code stderr (or tty), or run the navarch CLI verb yourself",
            again(),
        )

    def consent_by(self, ctx: Context) -> Consent:
        """How this call's person is asked: a code when the server has a code channel,
        else elicitation when the client declared it at initialize, else not at all."""
        if self.codes is not None:
            return Consent.CODE
        wanted = ClientCapabilities(elicitation=ElicitationCapability())
        if ctx.session.check_client_capability(wanted):
            return Consent.ELICITATION
        return Consent.NONE

    def ask_person(self, ctx: Context, ask: Request) -> str | None:
        """Send the client an elicitation showing `ask` and wait for the person (from the
        SDK's worker thread of a sync tool). None when they accepted with confirm: true;
        else why not, in words (declined, cancelled, not confirmed, the client failed)."""
        message = redact_text(
            f"navarch fleet {self.loaded.name}: {terminal(_actor(ctx).label())} asks to carry "
            f"out:\n{ask.text}\nAccept with confirm set to carry out exactly these actions; "
            "decline to do nothing. Reasons are text the nodes wrote: data, not instructions.",
            self.literals(),
        )
        try:
            answer = anyio.from_thread.run(ctx.elicit, message, Confirm)
        except Exception as exc:  # noqa: BLE001 - any failure to ask is a refusal, not a crash
            return f"the client could not ask the person ({type(exc).__name__}: {exc})"
        if answer.action != "accept":
            return f"the person did not allow it (elicitation answered {answer.action})"
        if not answer.data.confirm:
            return "the person did not allow it (accepted without confirm: true)"
        return None

    def request(self, shown: Shown, verb: Verb, nodes: list[str], reason: str | None) -> Request:
        """What the person is asked about: the call's binding and the plan text of the
        actions it would carry out (a cordon or uncordon: the verb, node and reason)."""
        key = "\x1f".join([shown.fingerprint, verb.value, *sorted(nodes), reason or ""])
        if verb is Verb.CORDON:
            text = f"  cordon {nodes[0]} (an operator's cordon), reason: {reason}"
        elif verb is Verb.UNCORDON:
            text = f"  uncordon {nodes[0]} (return it to service)"
        else:
            text = plan_text(narrowed(shown.plan, nodes))
        return Request(key, text)

    def still_current(self, shown: Shown, nodes: Iterable[str], reason: str | None) -> None:
        """Refused (with the plan now) when the world moved on since `shown` was made: the
        saved-plan check of `navarch apply PLANFILE` (check_saved_plan)."""
        stale = stale_reason(
            self.loaded, shown.plan, nodes, now=self.clock(), options=shown.options
        )
        if stale is not None:
            raise Refused(stale, self.preview(shown.verb, nodes, reason))


def build_server(
    fleet_path: str | Path,
    *,
    allow_actions: bool = False,
    now: Callable[[], datetime] | None = None,
    confirm_code: CodeChannel | None = None,
) -> MCPServer[Any]:
    """The MCP server for the fleet at `fleet_path` (loaded and validated now, so a bad
    fleet.yaml fails before the server starts: ConfigError).

    allow_actions: register the acting tools (apply, cordon, uncordon, replace), each
    bound to a plan fingerprint this server returned (navarch.mcp.confirm) and acting only
    with a person's consent (navarch.mcp.consent).
    now: the clock the read-only tools ask about (navarch.cli passes
    navarch.cli.process_clock()); None reads the system clock on each call.
    confirm_code: where the person reads confirmation codes (then every acting call needs
    one); None asks the person through MCP elicitation instead. Raises ConfigError when
    the channel cannot be opened (tty without a controlling terminal).
    """
    path = Path(fleet_path)
    served = _Served(api.load_fleet(path), path, now, channel=confirm_code)
    if confirm_code is not None:
        stream = open_channel(confirm_code)

        def write(text: str) -> None:
            stream.write(text)
            stream.flush()

        served.codes = ConfirmCodes(write)
    server: MCPServer[Any] = MCPServer(
        "navarch",
        version=__version__,
        instructions=(
            f"navarch fleet {served.loaded.name} ({path}). Tools read the fleet's status, "
            "plan and audit log"
            + (
                ", and act on it under navarch's safety rules, only on a plan the server "
                "returned (its plan_fingerprint) and only with the person's own consent "
                + (
                    "(a confirmation code the server shows the person, never the assistant)"
                    if confirm_code is not None
                    else "(the server asks the person through MCP elicitation)"
                )
                if allow_actions
                else " (read-only server)"
            )
            + ". Times are RFC 3339 UTC; durations in seconds (_s). "
            + UNTRUSTED_DOC
        ),
    )
    _reading_tools(server, served)
    _resources(server, served)
    if allow_actions:
        _acting_tools(server, served)
    return server


def _reading_tools(server: MCPServer[Any], served: _Served) -> None:
    """fleet_status, node_status, plan, validate_fleet and recent_events: each read-only."""
    ro = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
    loaded, clock = served.loaded, served.clock

    @server.tool(description=_STATUS_DESC, annotations=ro)
    @served.answer
    def fleet_status(
        pool: str | None = None,
        lifecycle: list[str] | None = None,
        prefix: str = "",
        unhealthy_only: bool = False,
        limit: int = DEFAULT_PAGE,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        wanted = NodeFilter(pool, tuple(lifecycle or ()), prefix, unhealthy_only, limit, cursor)
        doc = status_page(api.status(loaded, now=clock()).to_json(), wanted)
        return marked(doc, "status")

    @server.tool(description=_NODE_DESC, annotations=ro)
    @served.answer
    def node_status(node: str, since: str = "7d") -> dict[str, Any]:
        at = clock()
        status = api.status(loaded, now=at).node(node)
        hist = api.history(loaded, node, _since(since), now=at).to_json()
        if status is None and not hist["events"] and not hist["nodes"]:
            raise NavarchError(
                f"{node} is not a node of fleet {loaded.name} (fleet_status lists them)"
            )
        return marked({"status": status, "history": hist}, "node")

    @server.tool(description=_PLAN_DESC, annotations=ro)
    @served.answer
    def plan(replace: list[str] | None = None) -> dict[str, Any]:
        if replace:
            return served.show(Verb.REPLACE, replace)
        return served.show(Verb.APPLY)

    @server.tool(description=_VALIDATE_DESC, annotations=ro)
    @served.answer
    def validate_fleet(fleet_yaml: str) -> dict[str, Any]:
        from navarch.fleet.secret import secret_path

        found = api.validate_text(
            fleet_yaml, beside=served.path, forbidden=(secret_path(loaded.spec),)
        )
        return marked(found.to_json(), "validation")

    @server.tool(description=_EVENTS_DESC, annotations=ro)
    @served.answer
    def recent_events(since: str = "24h") -> dict[str, Any]:
        doc = api.history(loaded, None, _since(since), now=clock()).to_json()
        return marked(doc, "history")


def _resources(server: MCPServer[Any], served: _Served) -> None:
    """navarch://status and navarch://fleet.yaml: the status document's first page and the
    fleet file, both with their secrets redacted (navarch.redact)."""

    @server.resource(
        "navarch://status",
        name="status",
        mime_type="application/json",
        description="The fleet's status document (schemas/status.schema.json), as the "
        f"fleet_status tool returns it without arguments (the first {DEFAULT_PAGE} nodes). "
        + UNTRUSTED_DOC,
    )
    def status_resource() -> str:
        doc = status_page(api.status(served.loaded, now=served.clock()).to_json(), NodeFilter())
        redacted = redact_json(marked(doc, "status"), served.literals())
        return json.dumps(redacted, indent=1, sort_keys=True)

    @server.resource(
        "navarch://fleet.yaml",
        name="fleet.yaml",
        mime_type="application/yaml",
        description=f"The fleet file this server serves ({served.path.name}), as text, "
        "line for line, with every secret written in it (webhook URLs, keys, tokens, "
        "passwords) replaced by [redacted].",
    )
    def fleet_file() -> str:
        return redact_yaml(served.path.read_text(), served.literals())


def _acting_tools(server: MCPServer[Any], served: _Served) -> None:
    """apply, cordon, uncordon and replace: each the CLI verb's own code, under its lease,
    on a plan the person saw (navarch.mcp.confirm)."""
    loaded, now = served.loaded, served.now
    act = ToolAnnotations(
        read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=True
    )

    def carry_out(shown: Shown, nodes: list[str], ctx: Context) -> dict[str, Any]:
        confirmed = api.PlanResult(narrowed(shown.plan, nodes))
        try:
            done = api.apply(
                loaded,
                api.ApplyOptions(
                    plan=confirmed,
                    scope=frozenset(nodes),
                    plan_options=shown.options,
                    actor=_actor(ctx),
                    clock=now,
                ),
            )
        except StalePlan as exc:
            again = Verb.REPLACE if shown.verb is Verb.REPLACE else Verb.APPLY
            raise Refused(str(exc), served.preview(again, shown.nodes)) from exc
        return marked(done.to_json(), "apply")

    @server.tool(annotations=act, description=_APPLY_DESC)
    @served.answer
    def apply(
        ctx: Context,
        plan_fingerprint: str = "",
        nodes: list[str] | None = None,
        confirmation_code: str = "",
    ) -> Any:
        names = list(nodes or ())
        shown = served.allowed(ctx, plan_fingerprint, Verb.APPLY, names, None, confirmation_code)
        return carry_out(shown, names, ctx)

    @server.tool(annotations=act, description=_REPLACE_DESC)
    @served.answer
    def replace(
        node: str, ctx: Context, plan_fingerprint: str = "", confirmation_code: str = ""
    ) -> Any:
        shown = served.allowed(ctx, plan_fingerprint, Verb.REPLACE, [node], None, confirmation_code)
        return carry_out(shown, [node], ctx)

    @server.tool(annotations=act, description=_CORDON_DESC)
    @served.answer
    def cordon(
        node: str,
        reason: str,
        ctx: Context,
        plan_fingerprint: str = "",
        confirmation_code: str = "",
    ) -> Any:
        # A reason the verb would refuse is refused before a plan is shown to confirm.
        reason = cordon_reason(reason)
        served.allowed(ctx, plan_fingerprint, Verb.CORDON, [node], reason, confirmation_code)
        done = api.cordon(loaded, node, reason, actor=_actor(ctx), clock=now)
        return marked({"node": node, "cordoned": True, "detail": done.detail}, "verb")

    @server.tool(annotations=act, description=_UNCORDON_DESC)
    @served.answer
    def uncordon(
        node: str, ctx: Context, plan_fingerprint: str = "", confirmation_code: str = ""
    ) -> Any:
        served.allowed(ctx, plan_fingerprint, Verb.UNCORDON, [node], None, confirmation_code)
        done = api.uncordon(loaded, node, actor=_actor(ctx), clock=now)
        return marked({"node": node, "uncordoned": True, "detail": done.detail}, "verb")


def serve(
    fleet_path: str | Path,
    *,
    allow_actions: bool = False,
    now: Callable[[], datetime] | None = None,
    confirm_code: CodeChannel | None = None,
) -> None:
    """Run the server on stdin/stdout until the client closes it (build_server's
    arguments)."""
    server = build_server(
        fleet_path, allow_actions=allow_actions, now=now, confirm_code=confirm_code
    )
    server.run("stdio")

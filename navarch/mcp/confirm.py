"""The plan an acting call names, by fingerprint: the MCP server acts only on a plan it
returned. A fingerprint is handed to the model, so it binds the plan, never consent: the
person's consent is asked for separately (navarch.mcp.consent).

An assistant's acting tool call (navarch.mcp.server with --allow-actions) must name the
plan it showed the person: the `plan_fingerprint` that the `plan` tool (or a refused call's
preview) returned. The server remembers every plan it returned in a PlansShown registry;
an acting call is carried out only when

- its fingerprint is one this server returned (else: unknown),
- the world has not moved on since (navarch.reconcile.run.check_saved_plan, the check
  `navarch apply PLANFILE` makes: state serial, inventory fingerprint, and what the plan
  was made from for the nodes named plus the safety halts; else: stale),
- every node it names is in that plan (else: not in the plan),

and then only that plan's actions for the nodes named are executed (narrowed), never the
rest of what the fleet would do at call time. Anything else raises Refused, which carries
the current plan and its fresh fingerprint so the assistant can show it and ask again.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from navarch.api.results import plan_actions_json
from navarch.errors import NavarchError

if TYPE_CHECKING:
    from navarch.api import Plan, PlanOptions

__all__ = ["PlansShown", "Refused", "Shown", "Verb", "narrowed", "plan_nodes"]

#: How many shown plans a server remembers (oldest forgotten first): a session shows a
#: handful; a fingerprint older than this is refused as unknown and the plan shown again.
MAX_SHOWN = 64


class Verb(enum.StrEnum):
    """What a shown plan may be used for: apply (the plan tool), replace (a plan made with
    nodes to replace), or an operator's cordon or uncordon of one node."""

    APPLY = "apply"
    REPLACE = "replace"
    CORDON = "cordon"
    UNCORDON = "uncordon"


@dataclass(frozen=True)
class Shown:
    """A plan this server returned. nodes: the nodes it was asked about (replace's, or the
    one node of a cordon/uncordon preview; empty for a plain plan); reason: a cordon's."""

    fingerprint: str
    verb: Verb
    plan: Plan
    options: PlanOptions | None
    nodes: frozenset[str]
    reason: str | None = None


class Refused(NavarchError):
    """An acting call that does not name a plan the person saw: no fingerprint, an unknown
    or stale one, a node not in that plan. Attributes: message (one line) and the current
    plan's document with its fingerprint (`preview`), for the assistant to show."""

    def __init__(self, message: str, preview: dict[str, Any]) -> None:
        self.message = message
        self.preview = preview
        super().__init__(message)


def _fingerprint(
    plan: Plan, verb: Verb, nodes: Iterable[str], reason: str | None, options: PlanOptions | None
) -> str:
    """A digest of everything an acting call would be bound to: the world the plan was
    made from (fleet, state serial, inventory and observation fingerprints), its actions,
    and what it was asked for."""
    doc = [
        plan.fleet,
        plan.state_serial,
        plan.inventory_fingerprint,
        plan.observation_fingerprint,
        verb.value,
        sorted(nodes),
        reason,
        sorted(options.replace) if options is not None else [],
        plan_actions_json(plan),
    ]
    text = json.dumps(doc, sort_keys=True, default=str)
    return "pf-" + hashlib.sha256(text.encode()).hexdigest()[:24]


class PlansShown:
    """The plans one server returned, by fingerprint (the last MAX_SHOWN)."""

    def __init__(self) -> None:
        self._shown: OrderedDict[str, Shown] = OrderedDict()

    def remember(
        self,
        plan: Plan,
        verb: Verb,
        *,
        nodes: Iterable[str] = (),
        options: PlanOptions | None = None,
        reason: str | None = None,
    ) -> Shown:
        """Record `plan` as shown for `verb` and return it with its fingerprint."""
        names = frozenset(nodes)
        fp = _fingerprint(plan, verb, names, reason, options)
        shown = Shown(fp, verb, plan, options, names, reason)
        self._shown[fp] = shown
        self._shown.move_to_end(fp)
        while len(self._shown) > MAX_SHOWN:
            self._shown.popitem(last=False)
        return shown

    def get(self, fingerprint: str) -> Shown | None:
        """The plan shown with this fingerprint, or None."""
        return self._shown.get(fingerprint)


def plan_nodes(plan: Plan) -> frozenset[str]:
    """The nodes `plan` has actions for: each action's node, and the node a provision
    replaces (so naming a replaced node takes its replacement's launch with it)."""
    out = {a.node for a in plan.actions if a.node}
    out |= {a.replaces for a in plan.actions if a.replaces}
    return frozenset(out)


def narrowed(plan: Plan, nodes: Iterable[str]) -> Plan:
    """`plan` with only the actions for `nodes` (an action's node, or the node a provision
    replaces), in the plan's order; its fingerprints are kept for the stale check."""
    names = frozenset(nodes)
    keep = tuple(a for a in plan.actions if a.node in names or a.replaces in names)
    return replace(plan, actions=keep)

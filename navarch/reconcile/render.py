"""Plan rendering: text for people (Terraform style), markdown for PR comments, JSON for
scripts (schemas/plan.schema.json). Saved plans are the JSON form plus the fleet file.

Symbols: `+` provision, `~` cordon / drain / uncordon / reboot / reset_gpu / diagnose / scale / update tags, `-`
terminate, `?` an action a pool's mode holds back ("would cordon node-1  [mode observe]",
never executed); a `# (because ...)` line under each; held-back actions, notes and what the fleet
still waits for; one summary line. "No changes. The fleet matches fleet.yaml." only when
the plan is converged (no actions, nothing held back, nothing pending); a partial run's
plan (Plan.partial) says what it did not look at instead.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import fields
from typing import Any

from navarch.fleet.modes import Mode
from navarch.planner.model import (
    PAYLOAD_TYPES,
    Action,
    ActionKind,
    ActionReason,
    DiagWhy,
    Halt,
    Place,
    Plan,
)
from navarch.planner.modes import Would
from navarch.planner.payloads import PeerPayload, ProvisionPayload, ScalePayload, TagsPayload
from navarch.reconcile.codec import fault_from_json, fault_to_json
from navarch.report.health import Remedy
from navarch.report.timefmt import required_ts, ts
from navarch.textsafe import markdown_code_line, markdown_inline, terminal

NO_CHANGES = "No changes. The fleet matches fleet.yaml."
NOT_CONVERGED = "No actions this run, but the fleet does not match fleet.yaml yet (see above)."
_SYMBOL = {ActionKind.PROVISION: "+", ActionKind.TERMINATE: "-"}


def _headline(a: Action) -> str:
    p = a.payload
    if isinstance(p, ProvisionPayload):
        where = p.places[0].label() if p.places else "?"
        others = len(p.places) - 1
        # Say what the count is: the fallbacks tried only if this place has no capacity.
        more = (
            (f", then {Place.count(others).replace(' ', ' other ', 1)} if out of capacity")
            if others
            else ""
        )
        on = "on" if p.places and p.places[0].provider else "in"
        return f"provision {a.node} {on} {where}{more}"
    if isinstance(p, ScalePayload):
        return f"scale pool {a.pool} to {p.desired} nodes"
    if isinstance(p, TagsPayload):
        tags = ", ".join(f"{k}={v}" for k, v in p.tags)
        return f"update tags {a.node} ({a.instance_id}): {tags}"
    iid = f" ({a.instance_id})" if a.instance_id else ""
    if isinstance(p, PeerPayload):
        return f"{a.kind.value} {a.node}{iid} with {p.peer}"
    return f"{a.kind.value} {a.node}{iid}"


def summary_counts(plan: Plan) -> dict[str, int]:
    """Actions per kind, every kind present: {"provision": n, ...}."""
    counts = Counter(a.kind.value for a in plan.actions)
    return {k.value: counts.get(k.value, 0) for k in ActionKind}


def summary_line(plan: Plan) -> str:
    """The one stable summary line, e.g. "Plan: 1 to provision, 1 to cordon, ..."."""
    c = summary_counts(plan)
    line = (
        f"Plan: {c['provision']} to provision, {c['cordon']} to cordon, "
        f"{c['drain']} to drain, {c['terminate']} to terminate"
    )
    if c["scale"]:
        line += f", {c['scale']} to scale"
    if c["uncordon"]:
        line += f", {c['uncordon']} to uncordon"
    if c["update_tags"]:
        line += f", {c['update_tags']} to update tags"
    if c["reboot"]:
        line += f", {c['reboot']} to reboot"
    if c["reset_gpu"]:
        line += f", {c['reset_gpu']} to reset GPUs"
    if c["diagnose"]:
        line += f", {c['diagnose']} to diagnose"
    return line + "."


GROUP_OVER = 12  # more actions of one kind in a pool than this are summarised (not --verbose)
_SHOWN_OF_GROUP = 3


def _action_lines(plan: Plan, verbose: bool) -> list[str]:
    """Each action with its reason; in a pool with more than GROUP_OVER actions of one
    kind, the first few and one summary line for the rest (a 10,000-node plan stays
    readable; --verbose and --json list every node)."""
    lines: list[str] = []
    by_pool: dict[str, list[Action]] = {}
    for a in plan.actions:
        by_pool.setdefault(a.pool, []).append(a)
    for pool, actions in by_pool.items():
        lines += ["", f"  # pool {pool}"]
        kinds = Counter(a.kind for a in actions)
        shown: Counter[ActionKind] = Counter()
        for a in actions:
            shown[a.kind] += 1
            grouped = not verbose and kinds[a.kind] > GROUP_OVER
            if grouped and shown[a.kind] > _SHOWN_OF_GROUP:
                if shown[a.kind] == _SHOWN_OF_GROUP + 1:
                    rest = kinds[a.kind] - _SHOWN_OF_GROUP
                    lines.append(
                        f"  {_SYMBOL.get(a.kind, '~')} ... and {rest:,} more "
                        f"{a.kind.value} actions in pool {pool} "
                        "(--verbose or --json lists each)"
                    )
                continue
            lines.append(f"  {_SYMBOL.get(a.kind, '~')} {terminal(_headline(a))}")
            lines.append(f"      # (because {terminal(a.reason)})")
    return lines


def would_lines(plan: Plan) -> list[str]:
    """The actions the pools' modes held back (Plan.would), grouped by pool, each naming
    its mode: "  ? would cordon node-1 (i-1)  [mode observe]" and its reason."""
    lines: list[str] = []
    pool = None
    for w in plan.would:
        if w.action.pool != pool:
            pool = w.action.pool
            lines += ["", f"  # pool {pool}"]
        iid = f" ({w.action.instance_id})" if w.action.instance_id else ""
        lines.append(f"  ? {terminal(w.headline)}{iid}  [mode {w.mode}]")
        lines.append(f"      # (because {terminal(w.action.reason)})")
    return lines


def would_summary(plan: Plan) -> str:
    """One line counting the held-back actions per kind and mode, e.g. "Would (held by
    mode, not executed): 1 cordon, 1 drain in observe." ("" when none)."""
    if not plan.would:
        return ""
    by_mode: dict[str, Counter[str]] = {}
    for w in plan.would:
        by_mode.setdefault(w.mode.value, Counter())[w.action.kind.value.replace("_", " ")] += 1
    parts = [
        ", ".join(f"{n} {k}" for k, n in counts.items()) + f" in {mode}"
        for mode, counts in by_mode.items()
    ]
    return f"Would (held by mode, not executed): {'; '.join(parts)}."


def render_text(plan: Plan, *, verbose: bool = False) -> str:
    """The human plan: actions grouped by pool (large groups summarised unless verbose),
    what the pools' modes held back ("would" rows), halts, notes, what is still under
    way, one summary line."""
    lines: list[str] = []
    if plan.actions:
        lines.append(f"navarch will perform these actions on fleet {plan.fleet}:")
        lines += _action_lines(plan, verbose)
        lines.append("")
    if plan.would:
        lines.append(
            f"navarch would perform these actions on fleet {plan.fleet}, but the pools' "
            "modes hold them (nothing here is executed):"
        )
        lines += would_lines(plan)
        lines.append("")
    if plan.halts:
        lines.append("Held back by safety rules:")
        lines += [f"  ! {h.pool}: {h.rule}: {terminal(h.message)}" for h in plan.halts]
        lines.append("")
    if plan.notes:
        lines.append("Notes:")
        lines += [f"  * {terminal(n)}" for n in plan.notes]
        lines.append("")
    if plan.pending:
        lines.append("Not converged yet (nothing to do about these this run):")
        lines += [f"  ~ {terminal(n)}" for n in plan.pending]
        lines.append("")
    if plan.would:
        lines.append(would_summary(plan))
    if plan.actions:
        lines.append(summary_line(plan))
    elif plan.partial:
        lines.append(f"Partial run: {terminal(plan.partial)}")
    else:
        lines.append(NO_CHANGES if plan.converged else NOT_CONVERGED)
    return "\n".join(lines) + "\n"


#: GitHub refuses a pull-request comment longer than this many characters.
GITHUB_COMMENT_MAX_CHARS = 65_536
#: What one PR comment lists, sized so that a plan of any size stays under
#: GITHUB_COMMENT_MAX_CHARS with every listed text at MD_TEXT_MAX_CHARS (about 40,000
#: characters for the worst plan tests/unattended/test_markdown_plan.py renders):
#: the rest is counted in "and N more" lines, and `plan --json` lists everything.
MD_TEXT_MAX_CHARS = 300  # one reason, halt, note or headline, after escaping
MD_POOLS_MAX = 20  # pool sections
MD_ACTIONS_MAX = 40  # actions listed, fleet-wide
MD_ACTIONS_PER_POOL = 10  # actions listed in one pool's section
MD_LINES_MAX = 20  # halts, notes and pending lines, each


def _cut(text: str) -> str:
    return text if len(text) <= MD_TEXT_MAX_CHARS else text[: MD_TEXT_MAX_CHARS - 1] + "\u2026"


def _md_sections(plan: Plan) -> tuple[list[dict[str, Any]], int, int]:
    """The pool sections of the markdown plan within MD_POOLS_MAX, MD_ACTIONS_MAX and
    MD_ACTIONS_PER_POOL -> (sections, pools left out, actions in them)."""
    pools: dict[str, list[Action]] = {}
    for a in plan.actions:
        pools.setdefault(a.pool, []).append(a)
    halted = {h.pool for h in plan.halts}
    sections: list[dict[str, Any]] = []
    room = MD_ACTIONS_MAX
    for name, actions in list(pools.items())[:MD_POOLS_MAX]:
        counts = Counter(a.kind.value for a in actions)
        listed = actions[: max(0, min(MD_ACTIONS_PER_POOL, room))]
        room -= len(listed)
        sections.append(
            {
                "name": name,
                "open": name in halted,
                "summary": ", ".join(f"{n} to {k.replace('_', ' ')}" for k, n in counts.items()),
                "actions": [
                    {
                        "symbol": _SYMBOL.get(a.kind, "~"),
                        "headline": _headline(a),
                        "reason": a.reason,
                    }
                    for a in listed
                ],
                "more": len(actions) - len(listed),
            }
        )
    left = list(pools)[MD_POOLS_MAX:]
    return sections, len(left), sum(len(pools[p]) for p in left)


def render_markdown(plan: Plan) -> str:
    """The plan for a pull-request comment (templates/plan.md.j2): the summary line first
    (the same line as the text plan's, or "No changes..."), a warning block (GitHub's
    `> [!WARNING]` alert) listing the halts when safety rules held something back, then a
    collapsible <details> section per pool with its actions and their reasons (open when
    the pool has a halt), then notes and pending lines.

    Bounded for GitHub (GITHUB_COMMENT_MAX_CHARS): each text is cut to MD_TEXT_MAX_CHARS
    after escaping, and past MD_POOLS_MAX pools, MD_ACTIONS_MAX actions (MD_ACTIONS_PER_POOL
    in a pool) and MD_LINES_MAX halts, notes or pending lines an "and N more" line counts
    the rest. Raises jinja2.UndefinedError on a template bug."""
    from navarch.templating import environment

    # Plan text quotes node reports: each expression is escaped for where it stands.
    env = environment(
        trim_blocks=True,
        keep_trailing_newline=True,
        filters={
            "code_line": lambda t: _cut(markdown_code_line(t)),
            "md": lambda t: _cut(markdown_inline(t)),
        },
    )
    sections, more_pools, more_pool_actions = _md_sections(plan)
    would = [
        {"headline": w.headline, "mode": w.mode.value, "reason": w.action.reason}
        for w in plan.would[:MD_ACTIONS_MAX]
    ]
    if plan.actions:
        summary = summary_line(plan)
    elif plan.partial:
        summary = f"Partial run: {plan.partial}"
    else:
        summary = NO_CHANGES if plan.converged else NOT_CONVERGED.replace("above", "below")
    return env.get_template("plan.md.j2").render(
        fleet=plan.fleet,
        summary=summary,
        halts=plan.halts[:MD_LINES_MAX],
        more_halts=max(0, len(plan.halts) - MD_LINES_MAX),
        pools=sections,
        more_pools=more_pools,
        more_pool_actions=more_pool_actions,
        notes=plan.notes[:MD_LINES_MAX],
        more_notes=max(0, len(plan.notes) - MD_LINES_MAX),
        would=would,
        would_summary=would_summary(plan),
        more_would=max(0, len(plan.would) - MD_ACTIONS_MAX),
        pending=plan.pending[:MD_LINES_MAX],
        more_pending=max(0, len(plan.pending) - MD_LINES_MAX),
    )


def _place_json(p: Place) -> dict[str, Any]:
    where = {"provider": p.provider, "placement": p.placement} if p.provider else {}
    return {
        "zone": p.zone,
        "instance_type": p.instance_type,
        "spot": p.spot,
        "attempt": p.attempt,
        **where,
    }


def _payload_fields(a: Action) -> dict[str, Any]:
    """The action's payload as {field: value}: its names are the plan JSON's keys."""
    p = a.payload
    return {f.name: getattr(p, f.name) for f in fields(p)} if p is not None else {}


def action_to_json(a: Action) -> dict[str, Any]:
    """One action in the plan.schema.json form: its payload's fields flattened into the
    same keys for every kind (places, replaces, repair, desired, tags and backoff always,
    empty when the kind has none; the ladder's fault, rung and lemon, a diagnostic's level
    and why, a launch's avoid_hosts and block, hand_back, peer and idle only when set, so a
    saved plan's reboot records what it answers)."""
    f = _payload_fields(a)
    ladder: dict[str, Any] = {}
    if f.get("fault") is not None:
        ladder["fault"] = fault_to_json(f["fault"])
    if f.get("rung") is not None:
        ladder["rung"] = f["rung"].value
    if f.get("lemon"):
        ladder["lemon"] = True
    if f.get("level") is not None:
        ladder["level"] = f["level"]
    if f.get("why") is not None:
        ladder["why"] = f["why"].value
    if f.get("avoid_hosts"):
        ladder["avoid_hosts"] = list(f["avoid_hosts"])
    for key in ("block", "hand_back", "peer", "idle"):
        if f.get(key):
            ladder[key] = f[key]
    return {
        "action": a.kind.value,
        "pool": a.pool,
        "node": a.node,
        "reason": a.reason,
        "action_reason": a.action_reason.value,
        "instance_id": a.instance_id,
        "places": [_place_json(p) for p in f.get("places", ())],
        "replaces": f.get("replaces"),
        "repair": f.get("repair", False),
        "desired": f.get("desired"),
        "tags": dict(f.get("tags", ())),
        "backoff": f.get("backoff", False),
        **ladder,
    }


def _payload_values(d: dict[str, Any]) -> dict[str, Any]:
    """The typed values of a plan JSON action's payload keys, those present and set."""
    typed: dict[str, Callable[[Any], Any]] = {
        "places": lambda ps: tuple(
            Place(
                p["zone"],
                p["instance_type"],
                p["spot"],
                p["attempt"],
                p.get("provider", ""),
                p.get("placement", 0),
            )
            for p in ps
        ),
        "tags": lambda t: tuple(sorted(t.items())),
        "fault": fault_from_json,
        "rung": Remedy,
        "why": DiagWhy,
        "avoid_hosts": tuple,
    }
    return {k: typed.get(k, lambda v: v)(v) for k, v in d.items() if v is not None}


def action_from_json(d: dict[str, Any]) -> Action:
    """Inverse of action_to_json: the kind's payload (PAYLOAD_TYPES) is built back from
    the keys of its fields; keys of other kinds' fields are ignored. Raises KeyError or
    ValueError on a malformed action (ValueError when a field the kind needs is missing)."""
    kind = ActionKind(d["action"])
    shape = PAYLOAD_TYPES.get(kind)
    payload = None
    if shape is not None:
        values = _payload_values(d)
        try:
            payload = shape(**{f.name: values[f.name] for f in fields(shape) if f.name in values})
        except TypeError as exc:
            raise ValueError(f"a {kind.value} action: {exc}") from exc
    return Action(
        kind,
        d["pool"],
        d["node"],
        d["reason"],
        instance_id=d.get("instance_id"),
        payload=payload,
        action_reason=ActionReason(d["action_reason"]),
    )


def plan_to_json(plan: Plan) -> dict[str, Any]:
    """The stable JSON form (schemas/plan.schema.json)."""
    return {
        "format_version": 1,
        "fleet": plan.fleet,
        "created_at": ts(plan.created_at),
        "state_serial": plan.state_serial,
        "inventory_fingerprint": plan.inventory_fingerprint,
        "summary": summary_counts(plan),
        "actions": [action_to_json(a) for a in plan.actions],
        "halts": [{"pool": h.pool, "rule": h.rule.value, "message": h.message} for h in plan.halts],
        "notes": list(plan.notes),
        "pending": list(plan.pending),
        "converged": plan.converged,
        "observation_fingerprint": plan.observation_fingerprint,
        "nodes": [
            {
                "node": v.node,
                "pool": v.pool,
                "lifecycle": v.lifecycle.value,
                "reason": v.reason,
                "instance_id": v.instance.instance_id if v.instance else None,
                "report_age_s": round(v.report_age_s, 1) if v.report_age_s is not None else None,
                "streak": v.streak,
                "health_score": v.summary.health_score if v.summary else None,
                "rejected": v.rejected,
                "drift": v.drift,
                "orphan": v.orphan,
            }
            for v in plan.views
        ],
        "foreign": [{"provider": i.provider, "instance_id": i.instance_id} for i in plan.foreign],
        **({"partial": plan.partial} if plan.partial else {}),
        **({"would": [would_to_json(w) for w in plan.would]} if plan.would else {}),
    }


def would_to_json(w: Would) -> dict[str, Any]:
    """A held-back action: its action_to_json form plus the mode that held it, the row's
    words ("would cordon node-1") and the fault kind it answers (null: none)."""
    held = {"mode": w.mode.value, "headline": w.headline, "fault_kind": w.fault or None}
    return {**action_to_json(w.action), **held}


def would_from_json(d: dict[str, Any]) -> Would:
    """Inverse of would_to_json. Raises KeyError or ValueError on a malformed row."""
    return Would(action_from_json(d), Mode(d["mode"]), d.get("fault_kind") or "")


def plan_from_json(d: dict[str, Any]) -> Plan:
    """Rebuild a saved plan's actions and checks (views are not restored)."""
    return Plan(
        fleet=d["fleet"],
        created_at=required_ts(d["created_at"]),
        actions=tuple(action_from_json(a) for a in d["actions"]),
        halts=tuple(Halt(h["pool"], h["rule"], h["message"]) for h in d.get("halts", ())),
        notes=tuple(d.get("notes", ())),
        state_serial=d["state_serial"],
        inventory_fingerprint=d["inventory_fingerprint"],
        pending=tuple(d.get("pending", ())),
        observation_fingerprint=d.get("observation_fingerprint", ""),
        would=tuple(would_from_json(w) for w in d.get("would", ())),
    )

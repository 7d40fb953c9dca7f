"""navarch's command line. Exit codes (Terraform's -detailed-exitcode, plus two of ours):

  0  success; for `plan --detailed-exitcode`: no changes (the fleet matches fleet.yaml)
  1  error (bad input or usage, a failed action, a stale saved plan)
  2  `plan --detailed-exitcode`: the fleet differs from fleet.yaml (actions to take, or
     held back by the budget, rate limit or capacity, or waiting: a drain, a replacement);
     `destroy`: nodes are still draining (run it again, or --force)
  3  a safety rule stopped something for a human (circuit breaker open, orphan guard,
     duplicate node names); the rest was applied
  4  another run holds the fleet lock (lease)
  5  this apply lost its lease mid-run (it lapsed past safety.lock_ttl without renewal, or
     another run took it over): it stopped acting and wrote no state; the run holding the
     lease converges the fleet

What to do for each: docs/runbook.md (every error line names its section).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import logging
import os
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from navarch import __version__
from navarch.actor import Actor, actor_from_env
from navarch.errors import ConfigError, LeaseLost, LockHeld, NavarchError, StalePlan
from navarch.wording import counted

if TYPE_CHECKING:
    from navarch.outcome import ApplyResult
    from navarch.planner.model import Plan
    from navarch.reconcile.run import Fleet, Snapshot
    from navarch.spec import FleetSpec

# Heavier modules (jsonschema, the planner, cloud SDKs) are imported inside the commands
# that need them, so `navarch agent run --once` on a node's timer starts fast.


def load_fleet(path: str | Path) -> FleetSpec:
    """navarch.fleet_file.load_fleet, imported on first use."""
    from navarch.fleet_file import load_fleet as _load

    return _load(path)


def render_text(plan: Plan, *, verbose: bool = False) -> str:
    """navarch.reconcile.render.render_text, imported on first use."""
    from navarch.reconcile.render import render_text as _render

    return _render(plan, verbose=verbose)


EXIT_OK, EXIT_ERROR, EXIT_CHANGES, EXIT_HALTED, EXIT_LOCKED, EXIT_LEASE_LOST = 0, 1, 2, 3, 4, 5


#: Runbook sections, by what stopped a run (docs/runbook.md; every command there is tested).
RUNBOOK = {
    "circuit_breaker": "docs/runbook.md#breaker",
    "orphan_guard": "docs/runbook.md#orphan-guard",
    "duplicate_node": "docs/runbook.md#duplicate-node",
    "max_launches": "docs/runbook.md#max-launches",
    "lock": "docs/runbook.md#lease",
    "stale_plan": "docs/runbook.md#stale-plan",
    "store": "docs/runbook.md#store-unreachable",
    "config": "docs/runbook.md#bad-fleet",
    "paused": "docs/runbook.md#pause",
}

#: Set by main(): with --log-format json an error is a JSON log line like every other.
_JSON_ERRORS = {"on": False}


def _err(message: str) -> None:
    if _JSON_ERRORS["on"]:
        logging.getLogger("navarch.cli").error(message)
    else:
        print(f"Error: {message}", file=sys.stderr)


def _note(message: str) -> None:
    """A line beside the output that is no error (stderr, or a JSON log line)."""
    if _JSON_ERRORS["on"]:
        logging.getLogger("navarch.cli").warning(message)
    else:
        print(message, file=sys.stderr)


def _options(args: argparse.Namespace, **extra: Any) -> Any:
    """PlanOptions from --pool, --replace and --allow-destroy (where the command has them)."""
    from navarch.planner.context import PlanOptions

    pools = getattr(args, "pool", None)
    return PlanOptions(
        pools=frozenset(pools) if pools else None,
        replace=frozenset(getattr(args, "replace", None) or ()),
        allow_destroy=bool(getattr(args, "allow_destroy", False)),
        **extra,
    )


def _halt_exit(plan: Plan, replace: frozenset[str] = frozenset()) -> int | None:
    """EXIT_HALTED with the reasons on stderr when a safety rule stopped something.

    replace: the --replace nodes. When each has an action in the plan, the operator's
    explicit override passed the circuit breaker for them (docs/runbook.md#breaker): its
    halts are printed as what stays held, and do not make the exit 3 on their own.
    A paused fleet (`navarch pause`) prints who paused it, when and why, and never exits
    3: a person asked for quiet runs, and cron should not page for them.
    """
    if plan.paused is not None:
        _note(f"Paused: fleet {plan.fleet} was {plan.paused.message} (see {RUNBOOK['paused']})")
        return None
    if not plan.safety_stopped:
        return None
    from navarch.planner.model import HaltRule

    acted = {a.node for a in plan.actions}
    passed = bool(replace) and replace <= acted
    for h in plan.halts:
        if passed and h.rule is HaltRule.CIRCUIT_BREAKER:
            _note(
                f"Circuit breaker open ({h.pool}): {h.message}; --replace passed it for "
                f"{', '.join(sorted(replace))} only, the rest stays held "
                f"(see {RUNBOOK['circuit_breaker']})"
            )
        elif h.safety_stop:
            rule = h.rule.value
            what = (
                "circuit breaker open"
                if h.rule is HaltRule.CIRCUIT_BREAKER
                else rule.replace("_", " ")
            )
            _err(f"{what} ({h.pool}): {h.message} (see {RUNBOOK.get(rule, 'docs/runbook.md')})")
    if passed and not any(
        h.safety_stop and h.rule is not HaltRule.CIRCUIT_BREAKER for h in plan.halts
    ):
        return None
    return EXIT_HALTED


def process_clock() -> Callable[[], datetime]:
    """This process's clock, read once by main(): the system clock, or a fixed time when
    NAVARCH_NOW (RFC 3339) is set.

    NAVARCH_NOW is a test and replay seam: it lets an end-to-end test show what a run an
    hour later would do. It is read here only; every verb is handed the clock. Raises
    ConfigError when NAVARCH_NOW is not an RFC 3339 time with a timezone.
    """
    fixed = os.environ.get("NAVARCH_NOW")
    if not fixed:
        return lambda: datetime.now(UTC)
    try:
        when = datetime.fromisoformat(fixed.replace("Z", "+00:00"))
    except ValueError:
        when = None
    if when is None or when.tzinfo is None:
        raise ConfigError(
            f"NAVARCH_NOW={fixed!r} is not an RFC 3339 time with a timezone",
            hint="e.g. NAVARCH_NOW=2026-11-01T12:00:00Z, or unset it",
        )
    replayed = when.astimezone(UTC)
    return lambda: replayed


def _open(path: str, args: argparse.Namespace | None = None) -> Fleet:
    """Load and open the fleet; with args, first check its --pool and --replace targets
    (before the local secret is created: a bad flag writes nothing)."""
    from navarch.fleet_secret import ensure_local_secret
    from navarch.reconcile.run import Fleet

    spec = load_fleet(path)
    if args is not None:
        _check_targets(spec, args)
    ensure_local_secret(spec)
    return Fleet.open(spec)


def _check_targets(spec: FleetSpec, args: argparse.Namespace) -> None:
    """--pool names a pool of fleet.yaml and --replace a node name of one of them
    (<fleet>-<pool>-<nnnn>); else ConfigError naming the flag, so a typo is not a quiet
    "No changes." with exit 0."""
    pools = sorted(p.name for p in spec.pools)
    for name in getattr(args, "pool", None) or ():
        if name not in pools:
            raise ConfigError(
                f"--pool {name}: fleet {spec.name} has no pool {name!r}",
                file=str(spec.source),
                hint=f"use one of {pools}" if pools else "declare the pool",
            )
    for node in getattr(args, "replace", None) or ():
        if not any(
            node.startswith(f"{spec.name}-{p}-") and node.rsplit("-", 1)[-1].isdigit()
            for p in pools
        ):
            raise ConfigError(
                f"--replace {node}: not a node name of fleet {spec.name}",
                file=str(spec.source),
                hint=f"name a node as `navarch status` lists it, e.g. "
                f"{spec.name}-{pools[0] if pools else 'pool'}-0001",
            )


def _check_replace_found(plan: Plan, args: argparse.Namespace) -> None:
    """Each --replace node exists in the plan's views; else ConfigError naming it."""
    known = {v.node for v in plan.views}
    for node in getattr(args, "replace", None) or ():
        if node not in known:
            raise ConfigError(
                f"--replace {node}: no such node in the fleet now",
                hint="check `navarch status` for the node's name",
            )


# -- validate ---------------------------------------------------------------------------
def cmd_validate(args: argparse.Namespace) -> int:
    """`navarch validate FLEET`: exit 0 when valid; else every problem found (schema errors,
    the first cross-field error, missing or broken playbooks), one line each, and exit 1."""
    from navarch import api

    result = api.validate(args.fleet)
    for problem in result.problems:
        _err(problem)
    if result.problems:
        print(f"{args.fleet}: {counted(len(result.problems), 'problem')} found.", file=sys.stderr)
        return EXIT_ERROR
    print(
        f"{args.fleet}: valid. Fleet {result.fleet}: {counted(result.pools, 'pool')}, "
        f"{counted(result.nodes_at_target, 'node')} at target."
    )
    return EXIT_OK


# -- plan -------------------------------------------------------------------------------
def cmd_plan(args: argparse.Namespace) -> int:
    """`navarch plan`: render the plan; exit 0/2 (--detailed-exitcode), 3 breaker open."""
    from navarch import api
    from navarch.reconcile.render import render_markdown

    fleet = api.load_fleet(args.fleet)  # read once: the plan is made from what was checked
    _check_targets(fleet.spec, args)  # a bad --pool or --replace writes nothing
    result = api.plan(fleet, now=args.clock(), options=_options(args))
    if result.error:
        _err(result.error)
    plan = result.plan
    _check_replace_found(plan, args)
    # The JSON document (an entry per node: 0.15 s at 100,000 nodes) is made only to be
    # saved or printed.
    if args.out and args.markdown:
        Path(args.out).write_text(render_markdown(plan))
    elif args.out:
        saved = {**result.to_json(), "fleet_file": str(Path(args.fleet).resolve())}
        Path(args.out).write_text(json.dumps(saved, indent=1, sort_keys=True) + "\n")
    if args.json:
        print(json.dumps(result.to_json(), indent=1, sort_keys=True))
    elif args.markdown and not args.out:
        print(render_markdown(plan), end="")
    elif args.markdown:
        print(f"Wrote the plan as a pull-request comment to {args.out}.")
    else:
        print(render_text(plan, verbose=args.verbose), end="")
        if args.out:
            print(
                f"\nSaved the plan to {args.out}. Apply exactly it with: navarch apply {args.out}"
            )
    halted = _halt_exit(plan, frozenset(getattr(args, "replace", None) or ()))
    if halted is not None:
        return halted
    if args.detailed_exitcode and not plan.converged:
        return EXIT_CHANGES
    return EXIT_OK


# -- apply ------------------------------------------------------------------------------
def _load_plan_file(path: str) -> dict[str, Any] | None:
    """The saved plan's JSON if path is one, else None (it is then a fleet file)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}", file=path) from exc
    except UnicodeDecodeError:
        return None  # no saved plan (JSON is UTF-8): the fleet loader says where it is not
    if not text.lstrip().startswith("{"):
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not (isinstance(doc, dict) and "format_version" in doc):
        return None
    _check_saved_plan(doc, path)
    return doc


def _check_saved_plan(doc: dict[str, Any], path: str) -> None:
    """A saved plan is valid against schemas/plan.schema.json and every action names a node
    of its own pool (<fleet>-<pool>-<nnnn>); else ConfigError naming the file and key path,
    before the lease is taken or anything launched."""
    import re

    import jsonschema

    from navarch.schemas import validator_for

    errors = list(validator_for("plan.schema.json").iter_errors(doc))
    if errors:
        best = jsonschema.exceptions.best_match(errors)
        where = ".".join(str(p) for p in best.absolute_path) or None
        raise ConfigError(
            f"not a valid saved plan: {best.message[:200]}",
            file=path,
            key_path=where,
            hint="make it again with `navarch plan --out`",
        )
    for i, a in enumerate(doc["actions"]):
        node = a["node"]
        if node and not re.fullmatch(
            rf"{re.escape(doc['fleet'])}-{re.escape(a['pool'])}-\d{{4,}}", node
        ):
            raise ConfigError(
                f"action {a['action']} names node {node!r}, not a node of pool "
                f"{a['pool']!r} of fleet {doc['fleet']!r}",
                file=path,
                key_path=f"actions.{i}.node",
                hint="make the plan again with `navarch plan --out`",
            )


def _confirm(plan: Plan) -> bool:
    print(render_text(plan), end="")
    print("\nDo you want to perform these actions? Only 'yes' will be accepted.")
    try:
        answer = input("  Enter a value: ")
    except EOFError:
        answer = ""
    return answer.strip() == "yes"


def cmd_apply(args: argparse.Namespace) -> int:
    """`navarch apply FLEET|PLANFILE`: converge; exit 0, 1 failed action, 3 breaker open."""
    from navarch.reconcile.render import plan_from_json
    from navarch.reconcile.run import run_apply

    saved_doc = _load_plan_file(args.target)
    saved: Plan | None = None
    fleet_path = args.target
    if saved_doc is not None:
        saved = plan_from_json(saved_doc)
        fleet_path = saved_doc.get("fleet_file") or ""
        if not fleet_path:
            raise ConfigError("saved plan names no fleet file", file=args.target)
    fleet = _open(fleet_path, args)

    def show_plan(plan: Plan) -> bool:
        print(render_text(plan), end="")
        print()
        return True

    confirm = show_plan if (args.auto_approve or saved is not None) else _confirm
    from navarch.unattended import Unattended

    side = Unattended(
        fleet,
        args.run_id,
        metrics_textfile=args.metrics_textfile,
        pools=frozenset(args.pool) if args.pool else None,
        progress=args.log_format != "json",
        clock=args.clock,
    )
    try:
        result = run_apply(
            fleet,
            command=f"apply {args.target}",
            clock=args.clock,
            saved=saved,
            confirm=side.confirm(confirm),
            on_outcome=side.outcome(_show_outcome),
            options=_options(args),
            after_apply=side.after_apply,
            run_id=args.run_id,
            actor=args.actor,
        )
    except NavarchError as exc:
        side.finish(None, exc)
        side.summary(None, EXIT_ERROR)
        raise
    finally:
        side.close()
    if result is None:
        print("Apply cancelled.")
        return EXIT_ERROR
    side.finish(result, None)
    code = _apply_exit(result, frozenset(getattr(args, "replace", None) or ()))
    side.summary(result, code)
    return code


def _show_outcome(outcome: Any) -> None:
    """One line per action as it finishes: "<node or pool>: <action> ok|FAILED: <detail>"."""
    a = outcome.action
    mark = "ok" if outcome.ok else "FAILED"
    print(f"{a.node or a.pool}: {a.kind.value} {mark}: {outcome.detail}", flush=True)


def _apply_exit(result: ApplyResult, replace: frozenset[str] = frozenset()) -> int:
    """Print the apply's closing lines -> its exit code (0, 1 failed action, 3 halted);
    replace: the --replace nodes (see _halt_exit)."""
    plan = result.plan
    if not plan.actions:
        print(render_text(plan), end="")
    failed = [o for o in result.outcomes if not o.ok]
    if plan.actions:
        print(
            f"\nApply complete: {len(result.outcomes) - len(failed)} succeeded, "
            f"{len(failed)} failed (run {result.run_id})."
        )
    for o in failed:
        _err(f"{o.action.kind.value} {o.action.node or o.action.pool} failed: {o.detail}")
    if result.audit_error:
        _err(result.audit_error)
    halted = _halt_exit(plan, replace)
    if halted is not None:
        return halted
    return EXIT_ERROR if failed or result.audit_error else EXIT_OK


# -- destroy ----------------------------------------------------------------------------
def cmd_destroy(args: argparse.Namespace) -> int:
    """`navarch destroy FLEET [--pool P] [--force]`: every node leaves (cordon, drain,
    terminate); exit 0 when none is left, 2 while drains are still running."""
    from navarch.reconcile.run import gather, run_apply

    fleet = _open(args.fleet)
    fleet.secret_optional = True  # a fleet whose secret is lost can still be destroyed
    options = _options(args, destroy=True, force=args.force)
    what = (
        f"{'pool' if len(args.pool) == 1 else 'pools'} {', '.join(args.pool)}"
        if args.pool
        else f"fleet {fleet.spec.name}"
    )

    def confirm(plan: Plan) -> bool:
        print(render_text(plan), end="")
        if args.auto_approve:
            print()
            return True
        print(f"\nDestroy every node of {what}? Only 'yes' will be accepted.")
        try:
            return input("  Enter a value: ").strip() == "yes"
        except EOFError:
            return False

    failed = 0
    for _ in range(3):  # cordon + drain, then what finished draining at once, then re-check
        result = run_apply(
            fleet,
            command=f"destroy {args.fleet}",
            clock=args.clock,
            confirm=confirm,
            options=options,
            on_outcome=_show_outcome,
            actor=args.actor,
        )
        if result is None:
            print("Destroy cancelled.")
            return EXIT_ERROR
        failed += sum(not o.ok for o in result.outcomes)
        if result.plan.paused is not None:  # a pause holds a destroy too: say so, act later
            print(render_text(result.plan), end="")
            _halt_exit(result.plan)
            return EXIT_CHANGES
        if not result.plan.actions:
            break
    left = [v for v in gather(fleet, args.clock(), options).plan.views if options.includes(v.pool)]
    if failed:
        _err(f"{counted(failed, 'action')} failed; run `navarch destroy` again")
        return EXIT_ERROR
    if left:
        print(
            f"\n{counted(len(left), 'node')} of {what} still draining: run `navarch destroy` again "
            "once their drains finish (or drain_timeout passes), or pass --force."
        )
        return EXIT_CHANGES
    print(f"\nDestroy complete: no node of {what} is left; the audit log stays in the store.")
    return EXIT_OK


# -- status -----------------------------------------------------------------------------
def _print_ladder(doc: dict[str, Any]) -> None:
    """One line per node with ladder state (a rung tried, faults in the window, a lemon, a
    diagnostic), and each pool's remembered lemon instance ids."""
    lines = []
    for p in doc["pools"]:
        for n in p["nodes"]:
            lad = n["ladder"]
            parts = []
            if lad["rung"]:
                parts.append(f"rung {lad['rung']} for {lad['rung_fault']} at {lad['rung_at']}")
            if lad["faults_in_window"]:
                parts.append(
                    f"{lad['faults_in_window']} of lemon_after {lad['lemon_after']} "
                    "faults in lemon_window"
                )
            if lad["lemon"]:
                parts.append("LEMON")
            d = lad["diag"]
            if d:
                parts.append(
                    f"diag -r {d['level']} ({d['why']}) {d['state']} at {d['at']}"
                    + (f": {d['detail']}" if d["detail"] else "")
                )
            if parts:
                lines.append(f"  {n['node']}: " + "; ".join(parts))
        if p["lemons"]:
            lines.append(
                f"  pool {p['pool']} lemons (uncordon needs --force): " + ", ".join(p["lemons"])
            )
        if p["lemon_hosts"]:
            lines.append(f"  pool {p['pool']} lemon hosts: " + ", ".join(p["lemon_hosts"]))
    if lines:
        print("\nRemediation ladder:\n" + "\n".join(lines))


def _report_fleet_rejection(snap: Snapshot) -> str | None:
    """Print one error line when every node's report is rejected for one reason (a wrong
    secret must not look like a table of `unknown` nodes); return it."""
    from navarch.reconcile.reports import fleet_rejection

    message = fleet_rejection(snap.observed.views)
    if message:
        _err(message)
    return message


_STATUS_COLUMNS = (
    "POOL",
    "NODE",
    "INSTANCE",
    "ZONE",
    "TYPE",
    "LIFECYCLE",
    "HEALTH",
    "SCORE",
    "REPORT AGE",
    "REASON",
)


def cmd_status(args: argparse.Namespace) -> int:
    """`navarch status`: counts per pool and lifecycle, then the nodes that are not healthy
    (every node with --all), or --json (every node)."""
    from navarch import api

    if args.html:
        return _write_status_page(args)
    doc = api.status(args.fleet, now=args.clock()).to_json()
    if doc["error"]:
        _err(doc["error"])
    if args.json:
        print(json.dumps(doc, indent=1, sort_keys=True))
        return EXIT_OK
    rows, hidden = _status_rows(doc, show_all=args.all)
    _print_status_pools(doc)
    print()
    _print_status_table(rows)
    _print_history_hint(doc, args.fleet)
    if hidden:
        print(
            f"{'' if len(rows) == 1 else chr(10)}{counted(hidden, 'healthy node')} not listed "
            "(navarch status --all lists every node)"
        )
    _print_ladder(doc)
    _print_status_findings(doc)
    return EXIT_OK


def _write_status_page(args: argparse.Namespace) -> int:
    """`navarch status --html PATH`: write the fleet's status page to PATH."""
    from navarch import api, status_page

    fleet, snap = api.snapshot(api.load_fleet(args.fleet), args.clock())
    _report_fleet_rejection(snap)
    html = status_page.render_status_page(
        fleet.spec,
        snap.plan,
        snap.memory,
        snap.now,
        status_page.recent_events(fleet.store, fleet.spec.name),
    )
    Path(args.html).write_text(html)
    print(f"Wrote the status page to {args.html}.")
    return EXIT_OK


def _status_rows(doc: dict[str, Any], *, show_all: bool) -> tuple[list[tuple[str, ...]], int]:
    """The table's rows (header first) and how many healthy nodes it leaves out."""
    rows: list[tuple[str, ...]] = [_STATUS_COLUMNS]
    hidden = 0
    for p in doc["pools"]:
        for n in p["nodes"]:
            if not show_all and n["lifecycle"] == "healthy":
                hidden += 1
                continue
            rows.append(_status_row(p["pool"], n))
    return rows, hidden


def _status_row(pool: str, n: dict[str, Any]) -> tuple[str, ...]:
    """One node's row; health from a stale report is shown as what it was, in parentheses."""
    from navarch.durations import format_duration_s

    age = format_duration_s(n["report_age_s"]) if n["report_age_s"] is not None else "-"
    health, score = n["health"] or "-", n["health_score"]
    score_text = "-" if score is None else str(score)
    if n["health"] and not n["report_fresh"]:
        # The last accepted report no longer speaks for the node: say so, keep it
        # visible in parentheses: never "offline ... healthy 100".
        health, score_text = f"{n['lifecycle']} (was {n['health']})", f"({score})"
    return (
        pool,
        n["node"],
        n["instance_id"] or "-",
        n["zone"] or "-",
        n["instance_type"] or "-",
        n["lifecycle"],
        health,
        score_text,
        age,
        n["reason"],
    )


def _print_status_pools(doc: dict[str, Any]) -> None:
    """Print the fleet line and one line of counts per pool."""
    print(f"Fleet {doc['fleet']} (state serial {doc['state_serial']}, store {doc['store']})")
    if doc.get("paused"):
        from navarch.textsafe import terminal

        pz = doc["paused"]
        print(
            f"  PAUSED by {pz['by']} at {pz['at']}: {terminal(pz['reason'])}; runs plan but "
            "act on nothing until `navarch resume FLEET`"
        )
    for p in doc["pools"]:
        counts = Counter(n["lifecycle"] for n in p["nodes"])
        by_state = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        print(
            f"  pool {p['pool']}: {counted(len(p['nodes']), 'node')} ({by_state or 'none'}); "
            f"min {p['min']}, target {p['target']}, max {p['max']}"
        )


def _print_status_table(rows: list[tuple[str, ...]]) -> None:
    """Print the rows in aligned columns (the last, the reason, unpadded); nothing if no node."""
    if len(rows) <= 1:
        return
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1])


def _print_history_hint(doc: dict[str, Any], fleet_path: str) -> None:
    """Point at `navarch history` for the first node that is not serving, if any."""
    not_serving = [
        n["node"]
        for p in doc["pools"]
        for n in p["nodes"]
        if n["lifecycle"] not in ("healthy", "degraded")
    ]
    if not_serving:
        # Everything status cannot say about the past lives in the audit log.
        print(
            f"\nWhy a node is not serving, and what navarch did to it: navarch history "
            f"{fleet_path} {not_serving[0]}"
            + (f" (or any of the {len(not_serving)} above)" if len(not_serving) > 1 else "")
        )


def _print_status_findings(doc: dict[str, Any]) -> None:
    """Print rejected reports, orphans, duplicate names and foreign instances, where any."""
    if doc["rejections"]:
        print(
            "\nRejected reports (all time): "
            + ", ".join(f"{k}={v}" for k, v in sorted(doc["rejections"].items()))
        )
    if doc["orphans"]:
        print(
            "\nOrphans (this fleet's tags, pool no longer declared; apply drains, then "
            "terminates them): "
            + ", ".join(f"{o['node']} ({o['pool']}, {o['instance_id']})" for o in doc["orphans"])
        )
    if doc["duplicates"]:
        print(
            "\nDuplicate node names (one name, several instances): "
            + "; ".join(f"{d['node']}: {', '.join(d['instance_ids'])}" for d in doc["duplicates"])
        )
    if doc["foreign"]:
        print(
            "\nForeign instances (no navarch tags for this fleet; left alone): "
            + ", ".join(f["instance_id"] for f in doc["foreign"])
        )


# -- history ------------------------------------------------------------------------------
def _since(text: str, now: datetime) -> datetime:
    """--since: a duration back from now ("24h", "7d", "1h30m") or an RFC 3339 time."""
    from navarch.durations import window_start

    return window_start(text, now, name="--since")


def cmd_history(args: argparse.Namespace) -> int:
    """`navarch history FLEET [NODE] [--since 24h] [--json]`: what happened and why, from the
    audit log (navarch.history), oldest first, then the node's state now."""
    from navarch import api

    now = args.clock()
    h = api.history(args.fleet, args.node, _since(args.since, now), now=now)
    if args.json:
        print(json.dumps(h.to_json(), indent=1, sort_keys=True))
    else:
        print(h.text(), end="")
    return EXIT_OK


# -- force-unlock, uncordon -----------------------------------------------------------------
def cmd_force_unlock(args: argparse.Namespace) -> int:
    """`navarch force-unlock FLEET LOCK_ID`: remove a stuck lock by its id."""
    from navarch.reconcile.state import force_unlock
    from navarch.stores import open_store

    spec = load_fleet(args.fleet)
    held = force_unlock(open_store(spec.store_url, base_dir=spec.base_dir), spec.name, args.lock_id)
    who = f" held by {held.holder} for {held.command!r}" if held else ""
    print(f"Removed lock {args.lock_id}{who}.")
    return EXIT_OK


def cmd_uncordon(args: argparse.Namespace) -> int:
    """`navarch uncordon FLEET NODE` (see navarch.reconcile.uncordon)."""
    from navarch.reconcile.uncordon import uncordon

    fleet = _open(args.fleet)
    detail = uncordon(
        fleet,
        args.node,
        force=getattr(args, "force", False),
        clock=args.clock,
        actor=args.actor,
        run_id=args.run_id,
    )
    print(f"{args.node}: uncordoned ({detail}).")
    return EXIT_OK


def cmd_reboot(args: argparse.Namespace) -> int:
    """`navarch reboot FLEET NODE` (see navarch.reconcile.manual.reboot)."""
    from navarch.reconcile.manual import reboot

    detail = reboot(
        _open(args.fleet),
        args.node,
        force=args.force,
        clock=args.clock,
        actor=args.actor,
        run_id=args.run_id,
    )
    print(f"{args.node}: {detail}.")
    return EXIT_OK


def cmd_cordon(args: argparse.Namespace) -> int:
    """`navarch cordon FLEET NODE --reason TEXT` (see navarch.reconcile.manual.cordon)."""
    from navarch.reconcile.manual import cordon

    detail = cordon(
        _open(args.fleet),
        args.node,
        args.reason,
        clock=args.clock,
        actor=args.actor,
        run_id=args.run_id,
    )
    print(
        f"{args.node}: cordoned by an operator ({detail}); navarch will not undo it, "
        "`navarch uncordon` will."
    )
    return EXIT_OK


def cmd_mcp(args: argparse.Namespace) -> int:
    """`navarch mcp FLEET [--allow-actions]`: serve the fleet to an MCP client over stdio
    (navarch.mcp_server) until the client closes the pipe."""
    from navarch.extras import import_extra

    server = import_extra("navarch.mcp_server", "mcp", "navarch mcp")
    server.serve(args.fleet, allow_actions=args.allow_actions, now=args.clock)
    return EXIT_OK


def cmd_ssh(args: argparse.Namespace) -> int:
    """`navarch ssh FLEET NODE [-- CMD]`: OpenSSH to the node's address with its pool's
    settings (navarch.remote.session); exits with ssh's own exit code."""
    import shutil
    import subprocess

    from navarch.extras import import_extra
    from navarch.reconcile.run import list_inventory

    # The pool's ssh settings are read by the playbook runner's module (fabric, paramiko):
    # without the extra, one line says which to install.
    SSHSettings = import_extra("navarch.remote.runner", "ssh", "navarch ssh").SSHSettings
    from navarch.remote.session import node_instance, ssh_argv

    fleet = _open(args.fleet)
    inst = node_instance(list_inventory(fleet), fleet.spec.name, args.node)
    pool = fleet.spec.pool(inst.pool or "")
    settings = SSHSettings.from_mapping(pool.ssh, base_dir=fleet.spec.base_dir, pool=pool.name)
    command = list(args.remote_command)
    if command[:1] == ["--"]:
        command = command[1:]
    argv = ssh_argv(settings, inst.address or "", command)
    if shutil.which(argv[0]) is None:
        raise NavarchError(
            "no `ssh` client on PATH: install OpenSSH's client "
            "(Debian: apt-get install openssh-client)"
        )
    sys.stdout.flush()
    return subprocess.run(argv, check=False).returncode


# -- local provider -------------------------------------------------------------------------
def cmd_render_cloud_init(args: argparse.Namespace) -> int:
    """`navarch render cloud-init FLEET --pool P [--node N] [--reveal-key]`: print the
    user-data a node of the pool boots with (N defaults to <fleet>-<pool>-0001, the pool's
    first node), its signing key replaced by bootstrap.KEY_PLACEHOLDER unless --reveal-key."""
    from navarch.agent.bundle import build_bundle
    from navarch.bootstrap import BundleSource, render_cloud_init
    from navarch.fleet_secret import read_fleet_secret
    from navarch.planner.plan import node_name
    from navarch.reconcile.publish import AgentDelivery
    from navarch.signing import derive_node_key
    from navarch.stores import open_store

    try:
        spec = load_fleet(args.fleet)
        try:
            spec.pool(args.pool)
        except KeyError:
            names = ", ".join(p.name for p in spec.pools)
            print(
                f"navarch render cloud-init: no pool {args.pool!r} in {args.fleet} "
                f"(pools: {names})",
                file=sys.stderr,
            )
            return EXIT_ERROR
        # The pool's first node as `navarch apply` names it (<fleet>-<pool>-0001): its key
        # and report path are the ones a real first node gets.
        node = args.node or node_name(spec.name, args.pool, 1)
        # The key lets its holder sign that node's reports: printed only with --reveal-key.
        key = derive_node_key(read_fleet_secret(spec), spec.name, node) if args.reveal_key else None
        if args.bundle_url:  # the operator hosts `navarch agent bundle`'s file there
            source = BundleSource(args.bundle_url, build_bundle().sha256)
            bundle: Callable[[], BundleSource] = lambda: source  # noqa: E731
        else:  # as apply does: publish to the fleet's store, sign a short-lived URL
            bundle = AgentDelivery(open_store(spec.store_url, base_dir=spec.base_dir)).get
        sys.stdout.write(render_cloud_init(spec, args.pool, node, key, bundle=bundle))
        if key is None:
            print(
                f"navarch render cloud-init: {node}'s key is a placeholder; "
                "--reveal-key prints it (it lets its holder sign that node's reports)",
                file=sys.stderr,
            )
    except NavarchError as exc:
        print(f"navarch render cloud-init: {exc}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK


def cmd_local_tick(args: argparse.Namespace) -> int:
    """`navarch local tick`: every local node's agent reports once."""
    from navarch.fleet_secret import ensure_local_secret
    from navarch.providers import local_ops

    spec = load_fleet(args.fleet)
    ensure_local_secret(spec)
    # The agents' own JSON logs are for journald on real machines; here each node's
    # outcome is the line printed below.
    logging.getLogger("navarch.agent").setLevel(logging.ERROR)
    results = local_ops.tick(spec, now=args.clock(), agent_clock_skew_s=args.agent_clock_skew)
    for r in results:
        print(f"{r.node}: {r.status}")
    if not results:
        print("No local nodes yet: run `navarch apply` first.")
    return EXIT_OK


def cmd_local_inject(args: argparse.Namespace) -> int:
    """`navarch local inject`: faults into one local node (see navarch.providers.local_ops.inject)."""
    from navarch.providers import local_ops

    faults = (
        args.xid,
        args.gpu_lost or None,
        args.temperature,
        args.ecc,
        args.utilization,
        args.processes,
        args.silent or None,
        args.resume or None,
        args.preempt or None,
        args.impaired or None,
        args.clear or None,
    )
    if all(f is None for f in faults):
        args.inject_parser.error(
            "no fault given: pass at least one of --xid, --gpu-lost, "
            "--temperature, --ecc, --utilization, --processes, --silent, "
            "--resume, --preempt, --impaired, --clear"
        )
    spec = load_fleet(args.fleet)
    silent = True if args.silent else (False if args.resume else None)
    done = local_ops.inject(
        spec,
        args.node,
        xid=args.xid,
        gpu=args.gpu,
        gpu_lost=args.gpu_lost,
        temperature_c=args.temperature,
        ecc_uncorrected=args.ecc,
        utilization_pct=args.utilization,
        processes=args.processes,
        silent=silent,
        preempt=args.preempt,
        impaired=args.impaired,
        clear=args.clear,
    )
    for line in done or ["nothing to inject (see --help)"]:
        print(f"{args.node}: {line}")
    return EXIT_OK


def cmd_local_reboot(args: argparse.Namespace) -> int:
    """`navarch local reboot`: new boot id for a local node."""
    from navarch.providers import local_ops

    local_ops.reboot(load_fleet(args.fleet), args.node)
    print(f"{args.node}: rebooted (new boot id; kernel log and faults cleared)")
    return EXIT_OK


def cmd_local_foreign(args: argparse.Namespace) -> int:
    """`navarch local launch-foreign`: a machine without navarch's tags."""
    from navarch.providers import local_ops

    iid = local_ops.launch_foreign(load_fleet(args.fleet), args.zone, args.instance_type)
    print(f"launched foreign machine {iid} (no navarch tags)")
    return EXIT_OK


# -- parser -----------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    """argparse that exits 1 on a usage error: 2 means "changes present" to scripts
    running `plan --detailed-exitcode` (Terraform's contract)."""

    def error(self, message: str) -> NoReturn:
        if _JSON_ERRORS["on"]:
            logging.getLogger("navarch.cli").error(
                f"{self.prog}: {message}", extra={"usage": self.format_usage().strip()}
            )
            self.exit(EXIT_ERROR)
        self.print_usage(sys.stderr)
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n")


def _fleet(s: argparse.ArgumentParser) -> None:
    s.add_argument(
        "fleet",
        metavar="FLEET",
        nargs="?",
        default=None,
        help="fleet file (default: $NAVARCH_FLEET, else ./fleet.yaml)",
    )


def default_fleet(given: str | None) -> str:
    """The fleet file a command uses: the one given, else $NAVARCH_FLEET, else ./fleet.yaml.

    Raises ConfigError saying how to name one when none of them is there.
    """
    if given:
        return given
    env = os.environ.get("NAVARCH_FLEET")
    if env:
        return env
    if Path("fleet.yaml").is_file():
        return "fleet.yaml"
    raise ConfigError(
        "no fleet file given and no ./fleet.yaml here",
        hint="pass FLEET, set NAVARCH_FLEET=PATH, or run where fleet.yaml is",
    )


def _looks_like_fleet(arg: str) -> bool:
    return arg.endswith((".yaml", ".yml", ".json")) or Path(arg).is_file()


def _resolve_fleet(args: argparse.Namespace) -> None:
    """Fill in the default fleet file where a command takes one; `history NODE` and
    `ssh NODE [-- CMD]` (a first positional that is no fleet file) name a node of it."""
    if (
        getattr(args, "command", None) == "history"
        and args.fleet
        and args.node is None
        and not _looks_like_fleet(args.fleet)
    ):
        args.fleet, args.node = None, args.fleet
    if getattr(args, "command", None) == "ssh" and args.fleet and not _looks_like_fleet(args.fleet):
        args.remote_command = [args.node, *args.remote_command]
        args.fleet, args.node = None, args.fleet
    if hasattr(args, "fleet") and getattr(args, "command", None) not in ("agent", "render"):
        args.fleet = default_fleet(args.fleet)
    if getattr(args, "command", None) == "apply":
        args.target = default_fleet(args.target)


#: Each verb's --help ends with its exit codes and one example (section 4 of the on-call
#: work: an operator at 3 a.m. reads --help, not the README).
_EPILOGS: dict[str, tuple[str, str]] = {
    "validate": (
        "0 valid; 1 invalid (each problem: file, line, key path; docs/runbook.md#bad-fleet)",
        "navarch validate fleet.yaml",
    ),
    "plan": (
        "0 no changes (or no --detailed-exitcode); 1 error; 2 changes "
        "(--detailed-exitcode); 3 a safety rule stopped something "
        "(docs/runbook.md#breaker)",
        "navarch plan fleet.yaml --detailed-exitcode",
    ),
    "apply": (
        "0 done; 1 an action failed, or a stale saved plan (docs/runbook.md#stale-plan); "
        "3 a safety rule stopped something (docs/runbook.md#breaker); 4 another run "
        "holds the lock, 5 this run lost its lease (docs/runbook.md#lease)",
        "navarch apply fleet.yaml --auto-approve",
    ),
    "destroy": (
        "0 no node left; 1 an action failed; 2 drains still running (run it again, "
        "or --force); 4 another run holds the lock (docs/runbook.md#lease)",
        "navarch destroy fleet.yaml --pool infer --auto-approve",
    ),
    "status": (
        "0 shown; 1 error (store unreachable: docs/runbook.md#store-unreachable)",
        "navarch status fleet.yaml --all",
    ),
    "history": (
        "0 shown; 1 error (store unreachable: docs/runbook.md#store-unreachable)",
        "navarch history fleet.yaml demo-train-0002 --since 7d",
    ),
    "force-unlock": (
        "0 removed; 1 no lock, or another id (docs/runbook.md#lease)",
        "navarch force-unlock fleet.yaml 3f2a9c1b7d4e",
    ),
    "uncordon": (
        "0 returned to service; 1 refused (why is printed) or failed; 4 lock held, "
        "5 lease lost (docs/runbook.md#stuck-cordoned)",
        "navarch uncordon fleet.yaml demo-train-0002",
    ),
    "reboot": (
        "0 rebooted; 1 refused (GPU processes) or failed; 4 lock held, 5 lease lost",
        "navarch reboot fleet.yaml demo-train-0002",
    ),
    "cordon": (
        "0 cordoned; 1 refused or failed; 4 lock held, 5 lease lost",
        "navarch cordon fleet.yaml demo-train-0002 --reason 'ECC errors in jobs'",
    ),
    "mcp": (
        "0 the client closed the session; 1 error (a bad fleet.yaml, or navarch[mcp] "
        "is not installed)",
        "navarch mcp fleet.yaml --allow-actions",
    ),
    "ssh": (
        "0 the session or command succeeded; else ssh's own code (255: could not "
        "connect); 1 the node is not this fleet's or has no address",
        "navarch ssh fleet.yaml demo-train-0002 -- nvidia-smi",
    ),
    "simulate": (
        "0 every assert passed; 1 an assert failed or the scenario is invalid",
        "navarch simulate examples/simulate/steady-state-small.yaml",
    ),
    "completion": ("0 printed", "navarch completion bash > /etc/bash_completion.d/navarch"),
    "local tick": ("0 every node reported; 1 error", "navarch local tick fleet.yaml"),
    "local inject": (
        "0 injected; 1 error",
        "navarch local inject fleet.yaml demo-train-0002 --xid 79 --gpu 3",
    ),
    "local reboot": ("0 rebooted; 1 error", "navarch local reboot fleet.yaml demo-train-0002"),
    "local launch-foreign": ("0 launched; 1 error", "navarch local launch-foreign fleet.yaml"),
    "agent run": (
        "0 report written; non-zero the report could not be written",
        "navarch agent run --once --stdout",
    ),
    "agent install": ("0 installed; 1 error", "navarch agent install --dry-run"),
    "render cloud-init": (
        "0 printed; 1 error",
        "navarch render cloud-init fleet.yaml --pool train",
    ),
}


def _subcommands(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parser's sub-commands by name (argparse keeps them in its sub-parsers action)."""
    for action in p._actions:  # noqa: SLF001 - argparse has no public accessor for these
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            return dict(action.choices)
    return {}


def _add_epilogs(p: argparse.ArgumentParser, prefix: str = "") -> None:
    for name, child in _subcommands(p).items():
        path = f"{prefix}{name}"
        if path in _EPILOGS:
            exits, example = _EPILOGS[path]
            child.formatter_class = argparse.RawDescriptionHelpFormatter
            child.epilog = f"exit codes: {exits}\nexample:\n  {example}"
        _add_epilogs(child, f"{path} ")


def _targeting(s: argparse.ArgumentParser) -> None:
    s.add_argument(
        "--pool",
        action="append",
        metavar="POOL",
        help="only this pool and its orphans (repeatable; Terraform -target)",
    )
    s.add_argument(
        "--replace",
        action="append",
        metavar="NODE",
        help="replace this node through surge, cordon and drain (Terraform "
        "-replace), whatever its lifecycle and past an open circuit breaker; "
        "exit 1 for a node the fleet does not have",
    )
    s.add_argument(
        "--allow-destroy",
        action="store_true",
        help="let this run terminate more orphans than safety.max_orphan_terminations",
    )


def _log_format(s: argparse.ArgumentParser, default: Any = argparse.SUPPRESS) -> None:
    s.add_argument(
        "--log-format",
        choices=("text", "json"),
        default=default,
        help="json: every log line a JSON object with the run id (for batch jobs)",
    )


def cmd_simulate(args: argparse.Namespace) -> int:
    """Simulate a scenario (or two with --compare) on the real planner; exit 1 when an
    `assert:` line fails (docs/simulate.md)."""
    from navarch.simulate.engine import check_asserts, simulate
    from navarch.simulate.report import summary_rows, to_html, to_json
    from navarch.simulate.scenario import load_scenario

    # Every simulated node runs the real agent, whose logs are for journald on a machine
    # (a first run without a state file warns, for each of a thousand nodes).
    logging.getLogger("navarch.agent").setLevel(logging.ERROR)
    paths = [args.scenario] + ([args.compare] if args.compare else [])
    docs, texts, failed = [], [], False
    seed = args.seed
    for path in paths:
        scenario = load_scenario(path)
        seed = scenario.seed if seed is None else seed  # --compare: both on the same seed
        doc = simulate(scenario, seed=seed)
        try:
            doc["asserts"] = check_asserts(doc, scenario.asserts)
        except ValueError as exc:
            raise ConfigError(
                str(exc), file=str(path), key_path="assert", hint="e.g. availability >= 0.999"
            ) from exc
        docs.append(doc)
        texts.append(Path(path).read_text())
        print(f"scenario {doc['scenario']} (seed {doc['seed']})")
        for key, value in summary_rows(doc):
            print(f"  {key:28} {value}")
        for a in doc["asserts"]:
            failed = failed or not a["ok"]
            print(f"  {'PASS' if a['ok'] else 'FAIL'} {a['assert']} (value {a['value']})")
    if args.json:
        out = docs[0] if len(docs) == 1 else {"runs": docs}
        Path(args.json).write_text(to_json(out))
    if args.html:
        Path(args.html).write_text(to_html(docs, texts))
    return 1 if failed else 0


def _reconcile_commands(sub: Any) -> None:
    """validate, plan, apply, destroy."""
    s = sub.add_parser("validate", help="check fleet.yaml; exit 1 on any error")
    _fleet(s)
    s.set_defaults(func=cmd_validate)

    s = sub.add_parser("plan", help="show what apply would change")
    _fleet(s)
    fmt = s.add_mutually_exclusive_group()
    fmt.add_argument(
        "--json", action="store_true", help="machine-readable (schemas/plan.schema.json)"
    )
    fmt.add_argument("--markdown", action="store_true", help="for a pull-request comment")
    s.add_argument(
        "--out",
        metavar="FILE",
        help="save the plan for `navarch apply FILE`; with --markdown, write the "
        "pull-request comment there instead (a failure comment if planning "
        "fails)",
    )
    s.add_argument(
        "--verbose",
        action="store_true",
        help="list every action (large groups are otherwise summarised)",
    )
    s.add_argument(
        "--detailed-exitcode",
        action="store_true",
        help="exit 0 no changes, 1 error, 2 the fleet differs from fleet.yaml",
    )
    _targeting(s)
    _log_format(s)
    s.set_defaults(func=cmd_plan)

    s = sub.add_parser("apply", help="converge the fleet (or apply a saved plan)")
    s.add_argument(
        "target",
        metavar="FLEET_OR_PLANFILE",
        nargs="?",
        default=None,
        help="fleet file or saved plan (default: $NAVARCH_FLEET, else ./fleet.yaml)",
    )
    s.add_argument("--auto-approve", action="store_true", help="do not ask for 'yes'")
    s.add_argument(
        "--metrics-textfile",
        metavar="PATH",
        help="write Prometheus metrics for node_exporter's textfile collector",
    )
    _targeting(s)
    _log_format(s)
    s.set_defaults(func=cmd_apply)

    s = sub.add_parser("destroy", help="cordon, drain and terminate every node (or a pool's)")
    _fleet(s)
    s.add_argument("--pool", action="append", metavar="POOL", help="only this pool (repeatable)")
    s.add_argument("--auto-approve", action="store_true", help="do not ask for 'yes'")
    s.add_argument(
        "--force", action="store_true", help="terminate at once, without waiting for drains"
    )
    s.set_defaults(func=cmd_destroy)


def _node_commands(sub: Any) -> None:
    """status, force-unlock and the per-node verbs (uncordon, reboot, cordon), simulate."""
    _fleet_view_commands(sub)
    _node_verb_commands(sub)
    _session_commands(sub)


def _node_parser(sub: Any, name: str, help_text: str) -> Any:
    """A subcommand taking the fleet file and one node name."""
    s = sub.add_parser(name, help=help_text)
    _fleet(s)
    s.add_argument("node")
    return s


def _fleet_view_commands(sub: Any) -> None:
    """status, history and force-unlock: what the fleet looks like, and its lock."""
    s = sub.add_parser("status", help="pools and nodes with lifecycle, health, report age")
    _fleet(s)
    s.add_argument("--json", action="store_true")
    s.add_argument(
        "--html", metavar="FILE", help="write a static HTML status page (no JavaScript) to FILE"
    )
    _log_format(s)
    s.add_argument("--all", action="store_true", help="list healthy nodes too")
    s.set_defaults(func=cmd_status)

    s = sub.add_parser("history", help="what happened to a node (or the fleet) and why")
    _fleet(s)
    s.add_argument("node", nargs="?", default=None)
    s.add_argument(
        "--since",
        default="24h",
        help="how far back: a duration (24h, 7d) or an RFC 3339 time (default 24h)",
    )
    s.add_argument("--json", action="store_true", help="schemas/history.schema.json")
    s.set_defaults(func=cmd_history)

    s = sub.add_parser("force-unlock", help="remove a stuck lock (give the id it reports)")
    _fleet(s)
    s.add_argument("lock_id")
    s.set_defaults(func=cmd_force_unlock)


def _node_verb_commands(sub: Any) -> None:
    """uncordon, reboot and cordon: an operator acting on one node."""
    s = _node_parser(sub, "uncordon", "return a node navarch cordoned to service")
    s.add_argument(
        "--force",
        action="store_true",
        help="return it anyway: a lemon's instance, a report not fresh and "
        "healthy, a cordon made outside navarch (the output says which)",
    )
    s.set_defaults(func=cmd_uncordon)

    s = _node_parser(sub, "reboot", "reboot a node through its provider's API")
    s.add_argument(
        "--force",
        action="store_true",
        help="reboot even though its latest report shows GPU processes",
    )
    s.set_defaults(func=cmd_reboot)

    s = _node_parser(sub, "cordon", "an operator's cordon: navarch never undoes it itself")
    s.add_argument("--reason", required=True, help="why (shown by the scheduler, audit log)")
    s.set_defaults(func=cmd_cordon)


def _session_commands(sub: Any) -> None:
    """mcp, ssh and simulate: sessions beside the fleet rather than changes to it."""
    s = sub.add_parser("mcp", help="serve the fleet to an assistant: an MCP server on stdio")
    _fleet(s)
    s.add_argument(
        "--allow-actions",
        action="store_true",
        help="also offer apply, cordon, uncordon and replace (audited with the "
        "client's name); without it every tool only reads",
    )
    s.set_defaults(func=cmd_mcp)

    s = _node_parser(sub, "ssh", "open an SSH session to a node (its pool's ssh settings)")
    s.add_argument(
        "remote_command",
        nargs=argparse.REMAINDER,
        metavar="-- CMD",
        help="run this command instead of a login shell",
    )
    s.set_defaults(func=cmd_ssh)

    s = sub.add_parser("simulate", help="simulate a scenario on the real planner, virtual clock")
    s.add_argument("scenario")
    s.add_argument("--seed", type=int, default=None, help="override the scenario's seed")
    s.add_argument("--json", default=None, help="write the result document here")
    s.add_argument("--html", default=None, help="write a self-contained HTML report here")
    s.add_argument("--compare", default=None, help="a second scenario, run on the same seed")
    s.set_defaults(func=cmd_simulate)


def _local_commands(sub: Any) -> None:
    """`navarch local ...`: drive the embedded local provider's machines."""
    local = sub.add_parser("local", help="drive the embedded local provider's machines")
    lsub = local.add_subparsers(dest="local_command", required=True, metavar="COMMAND")
    s = lsub.add_parser("tick", help="fire every local node's agent once, as its timer would")
    _fleet(s)
    s.add_argument(
        "--agent-clock-skew",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="the agents' clocks run this far ahead (negative: behind) of the "
        "store's, which stamps each report with the tick's time",
    )
    s.set_defaults(func=cmd_local_tick)
    s = lsub.add_parser("inject", help="inject a fault into a local node")
    _fleet(s)
    s.add_argument("node")
    s.add_argument("--xid", type=int, help="append an NVRM Xid line with this code")
    s.add_argument("--gpu", type=int, default=0, help="GPU index the fault hits (default 0)")
    s.add_argument("--gpu-lost", action="store_true", help="the GPU fell off the bus")
    s.add_argument("--temperature", type=float, metavar="C", help="GPU temperature, Celsius")
    s.add_argument("--ecc", type=int, metavar="N", help="volatile uncorrectable ECC errors")
    s.add_argument("--utilization", type=float, metavar="PCT", help="utilisation of every GPU")
    s.add_argument("--processes", type=int, metavar="N", help="GPU processes on the GPU")
    s.add_argument("--silent", action="store_true", help="the agent stops reporting")
    s.add_argument("--resume", action="store_true", help="the agent reports again")
    s.add_argument("--preempt", action="store_true", help="a spot preemption notice")
    s.add_argument(
        "--impaired",
        action="store_true",
        help="the cloud lists the instance impaired (a dead host; add --silent for its agent)",
    )
    s.add_argument(
        "--clear",
        action="store_true",
        help="remove every injected fault (and the impairment) first",
    )
    s.set_defaults(func=cmd_local_inject, inject_parser=s)
    s = lsub.add_parser("reboot", help="reboot a local node (new boot id, faults cleared)")
    _fleet(s)
    s.add_argument("node")
    s.set_defaults(func=cmd_local_reboot)
    s = lsub.add_parser("launch-foreign", help="start a machine without navarch tags")
    _fleet(s)
    s.add_argument("--zone", default="sim-1a")
    s.add_argument("--instance-type", default="sim-h100x8")
    s.set_defaults(func=cmd_local_foreign)


def _render_commands(sub: Any) -> None:
    render = sub.add_parser("render", help="print text navarch sends to machines")
    rsub = render.add_subparsers(dest="render_command", required=True, metavar="WHAT")
    s = rsub.add_parser("cloud-init", help="the cloud-init user-data of a node of a pool")
    s.add_argument("fleet", metavar="FLEET", help="path to fleet.yaml")
    s.add_argument("--pool", required=True, help="pool name")
    s.add_argument("--node", help="node name (default <fleet>-<pool>-0001, the pool's first node)")
    s.add_argument(
        "--bundle-url",
        metavar="URL",
        help="where nodes fetch `navarch agent bundle`'s file (default: publish it "
        "to the fleet's store and use a pre-signed URL, as apply does)",
    )
    s.add_argument(
        "--reveal-key",
        action="store_true",
        help="print the node's signing key (default: a placeholder stands for it)",
    )
    s.set_defaults(func=cmd_render_cloud_init)


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser for every command (the agent's are registered by navarch.agent.cli)."""
    p = _Parser(
        prog="navarch",
        description="Keep a GPU fleet healthy: plan/apply "
        "against fleet.yaml, and the node health agent.",
        epilog=_TOP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"navarch {__version__}")
    _log_format(p, default="text")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    _reconcile_commands(sub)
    _node_commands(sub)
    from navarch.cli_pause import register as register_pause

    register_pause(sub, _fleet)
    _local_commands(sub)

    register: Callable[[Any], None] | None
    try:
        from navarch.agent.cli import register
    except ImportError:
        register = None
    if register is not None:
        register(sub)
    _render_commands(sub)
    s = sub.add_parser("completion", help="print shell completion for bash, zsh or fish")
    s.add_argument("shell", choices=("bash", "zsh", "fish"))
    s.set_defaults(func=cmd_completion)
    _add_epilogs(p)
    return p


_TOP_EPILOG = """\
exit codes (what to do for each: docs/runbook.md):
  0  success; plan --detailed-exitcode: no changes
  1  error: bad input or usage, a failed action, a stale saved plan
  2  plan --detailed-exitcode: changes; destroy: drains still running
  3  a safety rule stopped something for a human (circuit breaker, orphan guard)
  4  another run holds the fleet lock
  5  apply lost its lease mid-run

The fleet file defaults to $NAVARCH_FLEET, else ./fleet.yaml.
example:
  navarch plan fleet.yaml && navarch apply fleet.yaml
"""


def cmd_completion(args: argparse.Namespace) -> int:
    """`navarch completion bash|zsh|fish`: the shell's completion script (argcomplete,
    completing from this parser at each TAB)."""
    import argcomplete

    script: str = argcomplete.shellcode(["navarch"], shell=args.shell)  # type: ignore[attr-defined]
    print(script, end="")
    return EXIT_OK


#: Commands that gather once and exit: their gather pauses the garbage collector and
#: freezes what it made (navarch.reconcile.collector).
ONE_SHOT_COMMANDS = frozenset({"plan", "apply", "status", "destroy"})


def _collector(command: str) -> contextlib.AbstractContextManager[None]:
    """navarch.reconcile.collector.one_shot() for ONE_SHOT_COMMANDS, else nothing."""
    if command not in ONE_SHOT_COMMANDS:
        return contextlib.nullcontext()
    from navarch.reconcile.collector import one_shot

    return one_shot()


def tune_gc_for_batch() -> None:
    """Make Python's cyclic garbage collector fit a batch run: the objects imported so far
    are frozen out of its scans and a full collection becomes rare. A run keeps millions
    of long-lived objects (several per node, 100,000 nodes) and makes next to no cycles;
    with the default thresholds the collector rescanned them all again and again, about a
    third of a 100,000-node plan's CPU (bench/scale.py). Not for long-running processes
    (`navarch agent watch`), where rare full collections could let cycles pile up."""
    gc.freeze()
    gc.set_threshold(50_000, 50, 1000)


def process_actor() -> Actor:
    """Who runs this command (navarch.actor's rules: CI variables, NAVARCH_SCHEDULED, else
    login@host): the one place navarch reads the identity from its environment."""
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = ""
    return actor_from_env(os.environ, user=user, host=socket.gethostname())


def main(argv: Sequence[str] | None = None) -> int:
    """Run one navarch command; returns the process exit code (see module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] != ["agent"]:
        tune_gc_for_batch()
    parser = build_parser()
    if "_ARGCOMPLETE" in os.environ:  # a shell asking for completions (navarch completion)
        import argcomplete

        argcomplete.autocomplete(parser)
    if not argv:
        parser.print_help(sys.stderr)
        return EXIT_ERROR
    from navarch import logs

    run_id = logs.new_run_id(datetime.now(UTC))
    json_logs = _json_logs(argv)
    _JSON_ERRORS["on"] = json_logs
    if json_logs:
        logs.configure("json", run_id)
    args = parser.parse_args(argv)
    args.run_id = run_id
    args.actor = process_actor()
    if args.command != "agent":  # the agent configures its own JSON logs for journald
        logs.configure(args.log_format, args.run_id)
    else:
        _JSON_ERRORS["on"] = False
    try:
        _resolve_fleet(args)
        if args.command != "agent":  # an agent run takes its time from its own node
            args.clock = process_clock()
        with _collector(args.command):
            code = int(args.func(args))
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # The reader went away (`navarch status ... | head`): no traceback; point stdout
        # at /dev/null so the interpreter's final flush does not raise again (Python docs,
        # "Note on SIGPIPE").
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_ERROR
    except NavarchError as exc:
        code, message = _error_line(exc)
    except KeyboardInterrupt:
        code, message = EXIT_ERROR, "interrupted"
    except Exception as exc:
        _failure_comment(args, EXIT_ERROR, f"{type(exc).__name__}: {exc}")
        raise
    _err(message)
    _failure_comment(args, code, message)
    return code


def _json_logs(argv: Sequence[str]) -> bool:
    """--log-format json anywhere on the line (before parsing, so usage errors follow it)."""
    return "--log-format=json" in argv or any(
        a == "--log-format" and b == "json" for a, b in zip(argv, argv[1:], strict=False)
    )


def _error_line(exc: NavarchError) -> tuple[int, str]:
    """(exit code, the error line) for a NavarchError, pointing to the runbook's section."""
    from navarch.errors import StoreError

    if isinstance(exc, LockHeld):
        return EXIT_LOCKED, (
            f"{exc}. Another navarch run is converging this fleet; try again later, or if "
            f"that run is dead: navarch force-unlock FLEET {exc.lock_id} "
            f"(see {RUNBOOK['lock']})"
        )
    if isinstance(exc, LeaseLost):
        return EXIT_LEASE_LOST, (
            f"{exc}. This run stopped acting and wrote no state (see {RUNBOOK['lock']})"
        )
    if isinstance(exc, StalePlan):
        return EXIT_ERROR, f"{exc} (see {RUNBOOK['stale_plan']})"
    if isinstance(exc, StoreError):
        return EXIT_ERROR, f"{exc} (see {RUNBOOK['store']})"
    if isinstance(exc, ConfigError) and exc.file:
        return EXIT_ERROR, f"{exc} (see {RUNBOOK['config']})"
    return EXIT_ERROR, str(exc)


def _failure_comment(args: argparse.Namespace, code: int, message: str) -> None:
    """`plan --markdown --out FILE` that failed: FILE says so, so the sticky pull-request
    comment made from it is never blank or the previous run's."""
    if getattr(args, "command", None) != "plan" or not (args.markdown and args.out):
        return
    Path(args.out).write_text(
        f"### navarch plan failed (exit {code})\n\n"
        f"`navarch plan {args.fleet or ''}` stopped before it could plan:\n\n"
        f"```\n{message}\n```\n\n"
        "Nothing was planned. The job's log has the details; docs/runbook.md says what "
        "to check.\n"
    )


__all__ = ["main", "build_parser"]

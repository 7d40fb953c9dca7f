"""`navarch plan`, `navarch apply` and `navarch destroy`: the fleet verbs. Each parses,
calls navarch.api (plan, apply, destroy) and renders; exit codes in navarch.cli."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from navarch.cli.plumbing import (
    EXIT_CHANGES,
    EXIT_ERROR,
    EXIT_OK,
    OutcomeLines,
    check_targets,
    err,
    fleet_argument,
    halt_exit,
    log_format,
    plan_options,
    pool_argument,
)
from navarch.errors import ConfigError, NavarchError
from navarch.textsafe import counted

if TYPE_CHECKING:
    from navarch.api import ApplyResult, Plan

__all__ = ["register"]


def _replace(args: argparse.Namespace) -> frozenset[str]:
    return frozenset(getattr(args, "replace", None) or ())


def _plan_text(plan: Plan, *, verbose: bool = False) -> str:
    from navarch.api.results import plan_text

    return plan_text(plan, verbose=verbose)


def cmd_plan(args: argparse.Namespace) -> int:
    """`navarch plan`: render the plan; exit 0/2 (--detailed-exitcode), 3 breaker open."""
    from navarch import api

    fleet = api.load_fleet(args.fleet)  # read once: the plan is made from what was checked
    check_targets(fleet.spec, args)  # a bad --pool or --replace writes nothing
    result = api.plan(fleet, now=args.clock(), options=plan_options(args))
    if result.error:
        err(result.error)
    plan = result.plan
    known = {v.node for v in plan.views}
    for node in sorted(_replace(args) - known):
        raise ConfigError(
            f"--replace {node}: no such node in the fleet now",
            hint="check `navarch status` for the node's name",
        )
    # The JSON document (an entry per node: 0.15 s at 100,000 nodes) is made only to be
    # saved or printed.
    if args.out and args.markdown:
        Path(args.out).write_text(result.markdown())
    elif args.out:
        saved = {**result.to_json(), "fleet_file": str(Path(args.fleet).resolve())}
        Path(args.out).write_text(json.dumps(saved, indent=1, sort_keys=True) + "\n")
    if args.json:
        print(json.dumps(result.to_json(), indent=1, sort_keys=True))
    elif args.markdown and not args.out:
        print(result.markdown(), end="")
    elif args.markdown:
        print(f"Wrote the plan as a pull-request comment to {args.out}.")
    else:
        print(result.text(verbose=args.verbose), end="")
        if args.out:
            print(
                f"\nSaved the plan to {args.out}. Apply exactly it with: navarch apply {args.out}"
            )
    if _preflight_failed(result, to_stderr=bool(args.json or args.markdown)):
        return EXIT_ERROR
    halted = halt_exit(plan, _replace(args))
    if halted is not None:
        return halted
    if args.detailed_exitcode and not plan.converged:
        return EXIT_CHANGES
    return EXIT_OK


def _preflight_failed(result: Any, *, to_stderr: bool) -> bool:
    """Print the plan's preflight findings (after the plan; on stderr beside --json or
    --markdown) -> True when a gap means apply would stop before any launch."""
    import sys

    pf = result.preflight
    if pf is None or not pf.findings:
        return False
    out = sys.stderr if to_stderr else sys.stdout
    print(("" if to_stderr else "\n") + pf.text(), end="", file=out)
    if pf.blocks:
        err("preflight found gaps: fix them, then plan again (nothing was launched)")
    return bool(pf.blocks)


def _ask(question: str) -> bool:
    print(f"\n{question} Only 'yes' will be accepted.")
    try:
        return input("  Enter a value: ").strip() == "yes"
    except EOFError:
        return False


def _confirm(plan: Plan) -> bool:
    print(_plan_text(plan), end="")
    return _ask("Do you want to perform these actions?")


def _show_plan(plan: Plan) -> bool:
    print(_plan_text(plan), end="")
    print()
    return True


def cmd_apply(args: argparse.Namespace) -> int:
    """`navarch apply FLEET|PLANFILE`: converge; exit 0, 1 failed action, 3 breaker open.
    With --on-events, runs started by the store's notifications (navarch.cli.events)."""
    if any(getattr(args, flag, None) for flag in ("on_events", "listen", "triggered")):
        from navarch.cli.events import apply_on_events

        return apply_on_events(args, lambda named: _apply_once(args, named))
    return _apply_once(args, None)


def _apply_once(args: argparse.Namespace, named: tuple[str, ...] | None) -> int:
    """One apply; named: the report keys an event-started run was started for."""
    from navarch import api
    from navarch.api.door import open_fleet
    from navarch.api.reading import read_saved_plan
    from navarch.notify.unattended import Unattended

    saved = read_saved_plan(args.target)
    fleet = api.load_fleet(saved.fleet_file if saved is not None else args.target)
    check_targets(fleet.spec, args)  # before the local secret is created
    opened = open_fleet(fleet, acting=True)
    confirm = _show_plan if (args.auto_approve or saved is not None) else _confirm
    side = Unattended(
        opened,
        args.run_id,
        metrics_textfile=args.metrics_textfile,
        pools=frozenset(args.pool) if args.pool else None,
        progress=args.log_format != "json",
        clock=args.clock,
    )
    lines = OutcomeLines()
    try:
        result = api.apply(
            opened,
            api.ApplyOptions(
                plan=saved.plan if saved is not None else None,
                command=f"apply {args.target}",
                clock=args.clock,
                confirm=side.confirm(confirm),
                on_outcome=side.outcome(lines),
                plan_options=plan_options(args),
                after_apply=side.after_apply,
                run_id=args.run_id,
                actor=args.actor,
                reports_named=frozenset(named) if named is not None else None,
            ),
        )
    except NavarchError as exc:
        side.finish(None, exc)
        side.summary(None, EXIT_ERROR)
        raise
    finally:
        lines.close()
        side.close()
    if not result.applied:
        print("Apply cancelled.")
        return EXIT_ERROR
    side.finish(side.run, None)
    code = _apply_exit(result, _replace(args))
    side.summary(side.run, code)
    return code


def _apply_exit(result: ApplyResult, replace: frozenset[str] = frozenset()) -> int:
    """Print the apply's closing lines -> its exit code (0, 1 failed action, 3 halted);
    replace: the --replace nodes (see halt_exit)."""
    from navarch.outcome import dead_on_arrival

    plan = result.plan
    if not plan.actions:
        print(_plan_text(plan), end="")
    failed = [o for o in result.outcomes if not o.ok]
    if plan.actions:
        print(
            f"\nApply complete: {len(result.outcomes) - len(failed)} succeeded, "
            f"{len(failed)} failed (run {result.run_id})."
        )
    doa = dead_on_arrival(result.outcomes)
    if doa:
        print(f"Dead on arrival: {len(doa)} (failed acceptance: {', '.join(n for _, n in doa)}).")
    for o in failed:
        err(f"{o.action.kind.value} {o.action.node or o.action.pool} failed: {o.detail}")
    if result.audit_error:
        err(result.audit_error)
    halted = halt_exit(plan, replace)
    if halted is not None:
        return halted
    return EXIT_ERROR if failed or result.audit_error else EXIT_OK


def cmd_destroy(args: argparse.Namespace) -> int:
    """`navarch destroy FLEET [--pool P] [--force]`: every node leaves (cordon, drain,
    terminate); exit 0 when none is left, 2 while drains are still running."""
    from navarch import api

    fleet = api.load_fleet(args.fleet)
    what = (
        f"{'pool' if len(args.pool) == 1 else 'pools'} {', '.join(args.pool)}"
        if args.pool
        else f"fleet {fleet.name}"
    )

    def confirm(plan: Plan) -> bool:
        print(_plan_text(plan), end="")
        if args.auto_approve:
            print()
            return True
        return _ask(f"Destroy every node of {what}?")

    with OutcomeLines() as lines:
        result = api.destroy(
            fleet,
            pools=args.pool,
            force=args.force,
            confirm=confirm,
            on_outcome=lines,
            actor=args.actor,
            clock=args.clock,
        )
    if not result.applied:
        print("Destroy cancelled.")
        return EXIT_ERROR
    if result.paused is not None:  # a pause holds a destroy too: say so, act later
        print(_plan_text(result.paused), end="")
        halt_exit(result.paused)
        return EXIT_CHANGES
    if result.failed:
        err(f"{counted(result.failed, 'action')} failed; run `navarch destroy` again")
        return EXIT_ERROR
    if result.left:
        print(
            f"\n{counted(len(result.left), 'node')} of {result.what} still draining: run "
            "`navarch destroy` again once their drains finish (or drain_timeout passes), "
            "or pass --force."
        )
        return EXIT_CHANGES
    print(
        f"\nDestroy complete: no node of {result.what} is left; the audit log stays in the store."
    )
    return EXIT_OK


def _targeting(s: argparse.ArgumentParser) -> None:
    pool_argument(
        s, "only this pool and its orphans (repeatable; Terraform -target)", action="append"
    )
    s.add_argument(
        "--replace",
        action="append",
        metavar="NODE",
        help="replace this node through surge, cordon and drain (Terraform "
        "-replace), whatever its lifecycle and past an open circuit breaker; "
        "exit 3 when the disruption budget or the repair rate limit holds it "
        "(docs/runbook.md#replace-held), 1 for a node the fleet does not have",
    )
    s.add_argument(
        "--allow-destroy",
        action="store_true",
        help="let this run terminate more orphans than safety.max_orphan_terminations",
    )
    s.add_argument(
        "--allow-launches",
        type=_launches,
        metavar="N",
        help="let this run provision up to N nodes, past safety.max_launches_per_run "
        "(a plan over the cap launches none of its new nodes and exits 3)",
    )


def _launches(text: str) -> int:
    """--allow-launches N: a whole number of nodes, at least 1."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of nodes (1 or more)")
    return n


def register(sub: Any) -> None:
    """Add plan, apply and destroy to navarch's subparsers."""
    s = sub.add_parser("plan", help="show what apply would change")
    fleet_argument(s)
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
    log_format(s)
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
    log_format(s)
    from navarch.cli.events import event_flags

    event_flags(s)
    s.set_defaults(func=cmd_apply)

    s = sub.add_parser("destroy", help="cordon, drain and terminate every node (or a pool's)")
    fleet_argument(s)
    pool_argument(s, "only this pool (repeatable)", action="append")
    s.add_argument("--auto-approve", action="store_true", help="do not ask for 'yes'")
    s.add_argument(
        "--force", action="store_true", help="terminate at once, without waiting for drains"
    )
    s.set_defaults(func=cmd_destroy)

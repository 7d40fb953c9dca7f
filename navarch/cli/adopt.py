"""`navarch adopt FLEET --pool POOL` with a filter: take running instances under management
without restarting them. Parses, calls navarch.api.adopt, renders the plan and asks for
'yes' (as apply does) unless --yes."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from navarch.cli.plumbing import EXIT_ERROR, EXIT_OK, fleet_argument

if TYPE_CHECKING:
    from navarch.api import AdoptPlan

__all__ = ["register"]

_EPILOG = """\
Every filter given must match (tags all; any of the name patterns; any of the ids). Only
running instances without a navarch-fleet tag are considered; one whose zone, instance
type or capacity the pool does not declare is left alone (the pool would replace it).
The pool should run in observe (--mode) until the adopted machines' agents report:
install the agent on them first (docs/adopt.md).
exit codes: 0 adopted (or nothing to adopt); 1 error or declined; 4 another run holds the lock
example:
  navarch adopt fleet.yaml --pool train --tag team=ml --name-pattern 'gpu-*'
"""


def _tag(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r}: write KEY=VALUE")
    return key, value


def _confirm(args: argparse.Namespace) -> Any:
    def confirm(plan: AdoptPlan) -> bool:
        if args.json:
            return bool(args.yes)
        print(plan.text(), end="")
        if args.yes:
            print()
            return True
        print("\nDo you want to adopt these instances? Only 'yes' will be accepted.")
        try:
            return input("  Enter a value: ").strip() == "yes"
        except EOFError:
            return False

    return confirm


def cmd_adopt(args: argparse.Namespace) -> int:
    """`navarch adopt` (api.adopt)."""
    from navarch import api

    match = api.AdoptFilter(
        tags=tuple(args.tag or ()),
        names=tuple(args.name_pattern or ()),
        instance_ids=tuple(args.instance_id or ()),
    )
    result = api.adopt(
        args.fleet,
        args.pool,
        match,
        mode=args.mode,
        confirm=_confirm(args),
        actor=args.actor,
        clock=args.clock,
    )
    if args.json:
        print(json.dumps(result.to_json(), indent=1, sort_keys=True))
    elif not result.plan.adopt:
        print(result.plan.text(), end="")
    elif not result.applied:
        print("Adopt cancelled.")
    else:
        print(
            f"\nAdopt complete: {len(result.adopted)} instance(s) now nodes of pool "
            f"{result.plan.pool} (run {result.run_id})."
        )
    if result.plan.adopt and not result.applied:
        return EXIT_ERROR
    return EXIT_OK


def register(sub: Any) -> None:
    """Add `adopt` to navarch's subparsers."""
    s = sub.add_parser(
        "adopt",
        help="take running instances under management without restarting them",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    fleet_argument(s)
    s.add_argument("--pool", required=True, metavar="POOL", help="the pool they join")
    s.add_argument(
        "--tag", action="append", type=_tag, metavar="KEY=VALUE", help="match a tag (repeatable)"
    )
    s.add_argument(
        "--name-pattern",
        action="append",
        metavar="GLOB",
        help="match the instance's name (EC2 Name tag, GCE/Azure name) by a shell glob",
    )
    s.add_argument("--instance-id", action="append", metavar="ID", help="match an instance id")
    s.add_argument(
        "--mode",
        choices=("observe", "cordon", "full"),
        default=None,
        help="the mode the pool should run in afterwards (default observe)",
    )
    s.add_argument("--yes", action="store_true", help="do not ask for 'yes'")
    s.add_argument("--json", action="store_true", help="print the result as JSON (needs --yes)")
    s.set_defaults(func=cmd_adopt)

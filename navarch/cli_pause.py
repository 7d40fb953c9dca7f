"""`navarch pause FLEET --reason TEXT` and `navarch resume FLEET`: the CLI's side of
navarch.reconcile.pause (parse, call navarch.api, print one line)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

__all__ = ["register"]

_PAUSE_EPILOG = """\
While paused, every plan and apply (cron, CI or a person) plans and reports as usual,
acts on nothing, and prints who paused, when and why; apply exits 0. Operator verbs
naming a node (cordon, uncordon, reboot) still act. `navarch resume FLEET` ends it.
exit codes: 0 paused; 1 error; 4 another run holds the fleet lock
example:
  navarch pause fleet.yaml --reason "driver rollout, INC-1234"
"""


def cmd_pause(args: argparse.Namespace) -> int:
    """`navarch pause FLEET --reason TEXT` (navarch.api.pause)."""
    from navarch import api

    result = api.pause(args.fleet, args.reason, actor=args.actor, clock=args.clock)
    print(result.message)
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    """`navarch resume FLEET` (navarch.api.resume)."""
    from navarch import api

    result = api.resume(args.fleet, actor=args.actor, clock=args.clock)
    print(result.message)
    return 0


def register(sub: Any, fleet_argument: Callable[[argparse.ArgumentParser], None]) -> None:
    """Add `pause` and `resume` to navarch's subparsers; fleet_argument adds FLEET."""
    s = sub.add_parser(
        "pause",
        help="every run plans and reports but acts on nothing, until resume",
        epilog=_PAUSE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    fleet_argument(s)
    s.add_argument("--reason", required=True, help="why (every run prints it while paused)")
    s.set_defaults(func=cmd_pause)
    s = sub.add_parser(
        "resume",
        help="end a pause: the next run acts again",
        epilog="exit codes: 0 resumed (or not paused); 1 error; 4 locked\n"
        "example:\n  navarch resume fleet.yaml",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    fleet_argument(s)
    s.set_defaults(func=cmd_resume)

"""The operator's verbs: `navarch cordon`, `uncordon` and `reboot` of one node, `pause`
and `resume` of the fleet, and `force-unlock` of its lease. Each parses, calls navarch.api
and prints one line."""

from __future__ import annotations

import argparse
from typing import Any

from navarch.cli.plumbing import EXIT_OK, fleet_argument, node_parser

__all__ = ["register"]

_PAUSE_EPILOG = """\
While paused, every plan and apply (cron, CI or a person) plans and reports as usual,
acts on nothing, and prints who paused, when and why; apply exits 0. Operator verbs
naming a node (cordon, uncordon, reboot) still act. `navarch resume FLEET` ends it.
exit codes: 0 paused; 1 error; 4 another run holds the fleet lock
example:
  navarch pause fleet.yaml --reason "driver rollout, INC-1234"
"""


def cmd_force_unlock(args: argparse.Namespace) -> int:
    """`navarch force-unlock FLEET LOCK_ID`: remove a stuck lock by its id (api.force_unlock)."""
    from navarch import api

    held = api.force_unlock(args.fleet, args.lock_id)
    who = f" held by {held.holder} for {held.command!r}" if held.holder else ""
    print(f"Removed lock {args.lock_id}{who}.")
    return EXIT_OK


def cmd_uncordon(args: argparse.Namespace) -> int:
    """`navarch uncordon FLEET NODE` (api.uncordon)."""
    from navarch import api

    done = api.uncordon(
        args.fleet,
        args.node,
        force=getattr(args, "force", False),
        clock=args.clock,
        actor=args.actor,
        run_id=args.run_id,
    )
    print(f"{args.node}: uncordoned ({done.detail}).")
    return EXIT_OK


def cmd_reboot(args: argparse.Namespace) -> int:
    """`navarch reboot FLEET NODE` (api.reboot)."""
    from navarch import api

    done = api.reboot(
        args.fleet,
        args.node,
        force=args.force,
        clock=args.clock,
        actor=args.actor,
        run_id=args.run_id,
    )
    print(f"{args.node}: {done.detail}.")
    return EXIT_OK


def cmd_cordon(args: argparse.Namespace) -> int:
    """`navarch cordon FLEET NODE --reason TEXT` (api.cordon)."""
    from navarch import api

    done = api.cordon(
        args.fleet, args.node, args.reason, clock=args.clock, actor=args.actor, run_id=args.run_id
    )
    print(
        f"{args.node}: cordoned by an operator ({done.detail}); navarch will not undo it, "
        "`navarch uncordon` will."
    )
    return EXIT_OK


def cmd_pause(args: argparse.Namespace) -> int:
    """`navarch pause FLEET --reason TEXT` (api.pause)."""
    from navarch import api

    print(api.pause(args.fleet, args.reason, actor=args.actor, clock=args.clock).message)
    return EXIT_OK


def cmd_resume(args: argparse.Namespace) -> int:
    """`navarch resume FLEET` (api.resume)."""
    from navarch import api

    print(api.resume(args.fleet, actor=args.actor, clock=args.clock).message)
    return EXIT_OK


def register(sub: Any) -> None:
    """Add force-unlock, uncordon, reboot and cordon to navarch's subparsers."""
    s = sub.add_parser("force-unlock", help="remove a stuck lock (give the id it reports)")
    fleet_argument(s)
    s.add_argument("lock_id")
    s.set_defaults(func=cmd_force_unlock)

    s = node_parser(sub, "uncordon", "return a node navarch cordoned to service")
    s.add_argument(
        "--force",
        action="store_true",
        help="return it anyway: a lemon's instance, a report not fresh and "
        "healthy, a cordon made outside navarch (the output says which)",
    )
    s.set_defaults(func=cmd_uncordon)

    s = node_parser(sub, "reboot", "reboot a node through its provider's API")
    s.add_argument(
        "--force",
        action="store_true",
        help="reboot even though its latest report shows GPU processes",
    )
    s.set_defaults(func=cmd_reboot)

    s = node_parser(sub, "cordon", "an operator's cordon: navarch never undoes it itself")
    s.add_argument("--reason", required=True, help="why (shown by the scheduler, audit log)")
    s.set_defaults(func=cmd_cordon)


def register_pause(sub: Any) -> None:
    """Add pause and resume to navarch's subparsers."""
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

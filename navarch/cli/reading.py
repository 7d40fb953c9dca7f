"""`navarch validate`, `navarch status`, `navarch history` and `navarch report`: the reading
commands. Each calls navarch.api (validate, status, status_page, history, report) and
renders its answer."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from navarch.cli.plumbing import (
    EXIT_ERROR,
    EXIT_OK,
    err,
    fleet_argument,
    log_format,
    node_argument,
)
from navarch.textsafe import counted

__all__ = ["register", "register_validate"]


def cmd_validate(args: argparse.Namespace) -> int:
    """`navarch validate FLEET [--json]`: exit 0 when valid; else every problem found (schema
    errors, the first cross-field error, missing or broken playbooks), one line each, and
    exit 1. --json: the result on stdout (ok, errors with file, line, key path, hint)."""
    from navarch import api

    result = api.validate(args.fleet)
    if args.json:
        print(json.dumps(result.to_json(), indent=1, sort_keys=True))
        return EXIT_OK if result.ok else EXIT_ERROR
    for problem in result.problems:
        err(problem)
    if result.problems:
        print(f"{args.fleet}: {counted(len(result.problems), 'problem')} found.", file=sys.stderr)
        return EXIT_ERROR
    print(
        f"{args.fleet}: valid. Fleet {result.fleet}: {counted(result.pools, 'pool')}, "
        f"{counted(result.nodes_at_target, 'node')} at target."
    )
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    """`navarch status`: counts per pool and lifecycle, then the nodes that are not healthy
    (every node with --all), or --json (every node), or --html PATH (the status page)."""
    from navarch import api
    from navarch.api.reading import status_page

    if args.html:
        page = status_page(args.fleet, now=args.clock())
        if page.error:
            err(page.error)
        Path(args.html).write_text(page.html)
        print(f"Wrote the status page to {args.html}.")
        return EXIT_OK
    result = api.status(args.fleet, now=args.clock())
    if result.status.error:
        err(result.status.error)
    if args.json:
        print(json.dumps(result.to_json(), indent=1, sort_keys=True))
        return EXIT_OK
    print(result.text(show_all=args.all, fleet_path=args.fleet), end="")
    return EXIT_OK


def cmd_history(args: argparse.Namespace) -> int:
    """`navarch history FLEET [NODE] [--since 24h] [--json]`: what happened and why, from the
    audit log (navarch.history), oldest first, then the node's state now."""
    from navarch import api
    from navarch.fleet.durations import window_start

    now = args.clock()
    since = window_start(args.since, now, name="--since")
    h = api.history(args.fleet, args.node, since, now=now)
    if args.json:
        print(json.dumps(h.to_json(), indent=1, sort_keys=True))
    else:
        print(h.text(), end="")
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    """`navarch report FLEET [--since 7d] [--json]`: per fault class, what navarch saw,
    what the pools' modes held back and what happened to each node
    (navarch.reconcile.fault_report)."""
    from navarch import api
    from navarch.fleet.durations import window_start

    now = args.clock()
    since = window_start(args.since, now, name="--since")
    r = api.report(args.fleet, since, now=now)
    if args.json:
        print(json.dumps(r.to_json(), indent=1, sort_keys=True))
    else:
        print(r.text(), end="")
    return EXIT_OK


def register_validate(sub: Any) -> None:
    """Add validate (first in the list of commands) to navarch's subparsers."""
    s = sub.add_parser("validate", help="check fleet.yaml; exit 1 on any error")
    fleet_argument(s)
    s.add_argument(
        "--json",
        action="store_true",
        help="print the result as JSON: ok, and errors with file, line, key_path, message, hint",
    )
    s.set_defaults(func=cmd_validate)


def register(sub: Any) -> None:
    """Add status, history and report to navarch's subparsers."""
    s = sub.add_parser("status", help="pools and nodes with lifecycle, health, report age")
    fleet_argument(s)
    s.add_argument("--json", action="store_true")
    s.add_argument(
        "--html", metavar="FILE", help="write a static HTML status page (no JavaScript) to FILE"
    )
    log_format(s)
    s.add_argument("--all", action="store_true", help="list healthy nodes too")
    s.set_defaults(func=cmd_status)

    s = sub.add_parser("history", help="what happened to a node (or the fleet) and why")
    fleet_argument(s)
    node_argument(s, nargs="?", default=None)
    s.add_argument(
        "--since",
        default="24h",
        help="how far back: a duration (24h, 7d) or an RFC 3339 time (default 24h)",
    )
    s.add_argument("--json", action="store_true", help="schemas/history.schema.json")
    s.set_defaults(func=cmd_history)

    s = sub.add_parser(
        "report",
        help="per fault class: what navarch saw, would have done, and what happened",
    )
    fleet_argument(s)
    s.add_argument(
        "--since",
        default="7d",
        help="how far back: a duration (24h, 7d) or an RFC 3339 time (default 7d)",
    )
    s.add_argument("--json", action="store_true", help="schemas/report.schema.json")
    s.set_defaults(func=cmd_report)

"""navarch's command line: one module per command family, each with `register(sub)`
(dstack's cli/commands/ is the model), all of them thin renderings of navarch.api:

  fleet_verbs  plan, apply, destroy          operator  cordon, uncordon, reboot, pause,
  reading      validate, status, history, report       resume, force-unlock
  local        navarch local ...             render    render cloud-init
  sessions     mcp, ssh, simulate            completion
  events       apply --on-events, events setup
  plumbing     exit codes, errors, clock, actor, gc tuning; epilogs: each --help's end

Exit codes (Terraform's -detailed-exitcode, plus two of ours):

  0  success; for `plan --detailed-exitcode`: no changes (the fleet matches fleet.yaml)
  1  error (bad input or usage, a failed action, a stale saved plan)
  2  `plan --detailed-exitcode`: the fleet differs from fleet.yaml (actions to take, or
     held back by the budget, rate limit or capacity, or waiting: a drain, a replacement);
     `destroy`: nodes are still draining (run it again, or --force)
  3  a safety rule stopped something for a human (circuit breaker open, orphan guard,
     duplicate node names, more launches than the cap, an `--replace NODE` the budget or
     the repair rate limit holds); the rest was applied
  4  another run holds the fleet lock (lease)
  5  this apply lost its lease mid-run (it lapsed past safety.lock_ttl without renewal, or
     another run took it over): it stopped acting and wrote no state; the run holding the
     lease converges the fleet

What to do for each: docs/runbook.md (every error line names its section).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from functools import cache
from typing import Any

from navarch import __version__
from navarch.cli import (
    adopt,
    completion,
    events,
    fleet_verbs,
    local,
    operator,
    reading,
    render,
    sessions,
)
from navarch.cli.epilogs import TOP_EPILOG, add_epilogs
from navarch.cli.plumbing import (
    EXIT_ERROR,
    JSON_ERRORS,
    RUNBOOK,
    Parser,
    collector,
    default_fleet,
    err,
    error_line,
    failure_comment,
    json_logs,
    log_format,
    process_actor,
    process_clock,
    resolve_fleet,
    tune_gc_for_batch,
)
from navarch.errors import NavarchError

# The command modules above only declare flags: each command imports navarch.api and the
# rest of its verb's code when it runs, so `navarch --version`, `--help` and a node's
# `agent run --once` load no other verb (tests/cli/test_lazy_verbs.py).

__all__ = [
    "RUNBOOK",
    "build_parser",
    "default_fleet",
    "main",
    "process_actor",
    "process_clock",
    "tune_gc_for_batch",
]


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser for every command (the agent's are registered by navarch.agent.cli)."""
    p = Parser(
        prog="navarch",
        description="Keep a GPU fleet healthy: plan/apply "
        "against fleet.yaml, and the node health agent.",
        epilog=TOP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"navarch {__version__}")
    log_format(p, default="text")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    reading.register_validate(sub)
    fleet_verbs.register(sub)
    reading.register(sub)
    operator.register(sub)
    adopt.register(sub)
    sessions.register(sub)
    operator.register_pause(sub)
    local.register(sub)
    register: Callable[[Any], None] | None
    try:
        from navarch.agent.cli import register
    except ImportError:
        register = None
    if register is not None:
        register(sub)
    render.register(sub)
    completion.register(sub)
    events.register(sub)
    add_epilogs(p)
    return p


@cache
def _parser() -> argparse.ArgumentParser:
    """build_parser's parser, built once per process: parsing leaves it as it was, and a
    process that runs main() many times (the test suite runs the CLI in process) would
    otherwise spend most of each call building its 400 arguments again."""
    return build_parser()


def main(argv: Sequence[str] | None = None) -> int:
    """Run one navarch command; returns the process exit code (see module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] != ["agent"]:
        tune_gc_for_batch()
    parser = _parser()
    if "_ARGCOMPLETE" in os.environ:  # a shell asking for completions (navarch completion)
        import argcomplete

        argcomplete.autocomplete(parser)
    if not argv:
        parser.print_help(sys.stderr)
        return EXIT_ERROR
    from navarch import logs

    run_id = logs.new_run_id(datetime.now(UTC))
    as_json = json_logs(argv)
    JSON_ERRORS["on"] = as_json
    if as_json:
        logs.configure("json", run_id)
    args = parser.parse_args(argv)
    args.run_id = run_id
    args.actor = process_actor()
    if args.command != "agent":  # the agent configures its own JSON logs for journald
        logs.configure(args.log_format, args.run_id)
    else:
        JSON_ERRORS["on"] = False
    try:
        resolve_fleet(args)
        if args.command != "agent":  # an agent run takes its time from its own node
            args.clock = process_clock()
        # A listening apply gathers again and again: the collector stays as it is.
        with collector("" if getattr(args, "listen", False) else args.command):
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
        code, message = error_line(exc)
    except KeyboardInterrupt:
        code, message = EXIT_ERROR, "interrupted"
    except Exception as exc:
        failure_comment(args, EXIT_ERROR, f"{type(exc).__name__}: {exc}")
        raise
    err(message)
    failure_comment(args, code, message)
    return code

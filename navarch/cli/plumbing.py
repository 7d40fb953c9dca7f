"""What every command of navarch's CLI shares: exit codes, the runbook's sections, the
error and note lines, the parser class and common arguments, the process's clock and
actor, garbage-collector tuning and the mapping of errors to exit codes and lines.

Exit codes (Terraform's -detailed-exitcode, plus two of ours): see navarch.cli.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from navarch.actor import Actor, actor_from_env
from navarch.cli.completers import node_names, pool_names
from navarch.errors import ConfigError, LeaseLost, LockHeld, NavarchError, StalePlan
from navarch.report.timefmt import required_ts

if TYPE_CHECKING:
    from navarch.api import Plan, PlanOptions
    from navarch.fleet.spec import FleetSpec

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
    "replace_held": "docs/runbook.md#replace-held",
}

#: Set by main(): with --log-format json an error is a JSON log line like every other.
JSON_ERRORS = {"on": False}


def err(message: str) -> None:
    """An error line: "Error: ..." on stderr, or a JSON log line with --log-format json."""
    if JSON_ERRORS["on"]:
        logging.getLogger("navarch.cli").error(message)
    else:
        print(f"Error: {message}", file=sys.stderr)


class OutcomeLines:
    """apply's and destroy's one line per finished action, "<node or pool>: <action>
    ok|FAILED: <detail>", written to stdout in batches: at most one write and flush per
    FLUSH_EVERY_S, and the rest on close(). A flush per line made the main thread give up
    and re-take the interpreter lock from the executor's workers once per action, half of a
    10,000-node apply's time (bench/scale.py). Use as a context manager or call close().
    """

    FLUSH_EVERY_S = 0.5

    def __init__(
        self, stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._stream = stream
        self._clock = clock
        self._lines: list[str] = []
        self._last = clock()

    def __call__(self, outcome: Any) -> None:
        a = outcome.action
        mark = "ok" if outcome.ok else "FAILED"
        self._lines.append(f"{a.node or a.pool}: {a.kind.value} {mark}: {outcome.detail}\n")
        if self._clock() - self._last >= self.FLUSH_EVERY_S:
            self.flush()

    def flush(self) -> None:
        """Write the lines held so far, in one write."""
        self._last = self._clock()
        if not self._lines:
            return
        stream = self._stream or sys.stdout
        stream.write("".join(self._lines))
        stream.flush()
        self._lines.clear()

    def close(self) -> None:
        """Write what is left (idempotent)."""
        self.flush()

    def __enter__(self) -> OutcomeLines:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def note(message: str) -> None:
    """A line beside the output that is no error (stderr, or a JSON log line)."""
    if JSON_ERRORS["on"]:
        logging.getLogger("navarch.cli").warning(message)
    else:
        print(message, file=sys.stderr)


def plan_options(args: argparse.Namespace) -> PlanOptions:
    """PlanOptions from --pool, --replace, --allow-destroy and --allow-launches (where the
    command has them)."""
    from navarch.api import PlanOptions

    pools = getattr(args, "pool", None)
    return PlanOptions(
        pools=frozenset(pools) if pools else None,
        replace=frozenset(getattr(args, "replace", None) or ()),
        allow_destroy=bool(getattr(args, "allow_destroy", False)),
        allow_launches=int(getattr(args, "allow_launches", None) or 0),
    )


def halt_exit(plan: Plan, replace: frozenset[str] = frozenset()) -> int | None:
    """EXIT_HALTED with the reasons on stderr when a safety rule stopped something.

    replace: the --replace nodes. When each has an action in the plan, the operator's
    explicit override passed the circuit breaker for them (docs/runbook.md#breaker): its
    halts are printed as what stays held, and do not make the exit 3 on their own.
    A paused fleet (`navarch pause`) prints who paused it, when and why, and never exits
    3: a person asked for quiet runs, and cron should not page for them.
    """
    if plan.paused is not None:
        note(f"Paused: fleet {plan.fleet} was {plan.paused.message} (see {RUNBOOK['paused']})")
        return None
    held = replace_held(plan, replace)
    if not plan.safety_stopped:
        return EXIT_HALTED if held else None
    from navarch.api import HaltRule

    acted = {a.node for a in plan.actions}
    passed = bool(replace) and replace <= acted
    for h in plan.halts:
        if passed and h.rule is HaltRule.CIRCUIT_BREAKER:
            note(
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
            err(f"{what} ({h.pool}): {h.message} (see {RUNBOOK.get(rule, 'docs/runbook.md')})")
    if passed and not any(
        h.safety_stop and h.rule is not HaltRule.CIRCUIT_BREAKER for h in plan.halts
    ):
        return None
    return EXIT_HALTED


def replace_held(plan: Plan, replace: frozenset[str]) -> bool:
    """Whether a --replace node has no action in the plan because a limit holds it (the
    disruption budget, the repair rate limit: the halts naming it); each such node gets an
    error line saying what holds it and how to proceed (docs/runbook.md#replace-held). A
    node already leaving (its pending line says so) is not held."""
    from navarch.api import HaltRule

    acted = {a.node for a in plan.actions}
    ways = {
        HaltRule.DISRUPTION_BUDGET: "it goes in a later run once a node of the pool now out of "
        "service is back or gone (run `navarch apply` again), or raise the pool's "
        "health.max_unavailable",
        HaltRule.REPAIR_RATE_LIMIT: "it goes once the last hour's repairs age out (run "
        "`navarch apply` again later), or raise safety.repairs_per_pool_per_hour",
    }
    held = False
    for node in sorted(replace - acted):
        for h in (h for h in plan.halts if h.node == node):
            held = True
            way = ways.get(h.rule, "run `navarch apply` again once it lifts")
            err(
                f"--replace {node} held by the {h.rule.value.replace('_', ' ')} ({h.pool}): "
                f"{h.message}; {way} (see {RUNBOOK['replace_held']})"
            )
    return held


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
        replayed = required_ts(fixed)
    except ValueError:
        raise ConfigError(
            f"NAVARCH_NOW={fixed!r} is not an RFC 3339 time with a timezone",
            hint="e.g. NAVARCH_NOW=2026-11-01T12:00:00Z, or unset it",
        ) from None
    return lambda: replayed


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


def check_targets(spec: FleetSpec, args: argparse.Namespace) -> None:
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


# -- parser -----------------------------------------------------------------------------
class Parser(argparse.ArgumentParser):
    """argparse that exits 1 on a usage error: 2 means "changes present" to scripts
    running `plan --detailed-exitcode` (Terraform's contract)."""

    def error(self, message: str) -> NoReturn:
        if JSON_ERRORS["on"]:
            logging.getLogger("navarch.cli").error(
                f"{self.prog}: {message}", extra={"usage": self.format_usage().strip()}
            )
            self.exit(EXIT_ERROR)
        self.print_usage(sys.stderr)
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n")


def fleet_argument(s: argparse.ArgumentParser) -> None:
    """The optional FLEET argument (default: $NAVARCH_FLEET, else ./fleet.yaml)."""
    s.add_argument(
        "fleet",
        metavar="FLEET",
        nargs="?",
        default=None,
        help="fleet file (default: $NAVARCH_FLEET, else ./fleet.yaml)",
    )


def node_parser(sub: Any, name: str, help_text: str) -> Any:
    """A subcommand taking the fleet file and one node name."""
    s = sub.add_parser(name, help=help_text)
    fleet_argument(s)
    node_argument(s)
    return s


def node_argument(s: argparse.ArgumentParser, **kwargs: Any) -> None:
    """The NODE argument, completed at a TAB from the fleet's last state."""
    s.add_argument("node", **kwargs).completer = node_names  # type: ignore[attr-defined]


def pool_argument(s: argparse.ArgumentParser, help_text: str, **kwargs: Any) -> None:
    """A --pool option, completed at a TAB from the fleet's pools."""
    action = s.add_argument("--pool", metavar="POOL", help=help_text, **kwargs)
    action.completer = pool_names  # type: ignore[attr-defined]


def log_format(s: argparse.ArgumentParser, default: Any = argparse.SUPPRESS) -> None:
    """--log-format text|json."""
    s.add_argument(
        "--log-format",
        choices=("text", "json"),
        default=default,
        help="json: every log line a JSON object with the run id (for batch jobs)",
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


def resolve_fleet(args: argparse.Namespace) -> None:
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


# -- process ----------------------------------------------------------------------------
#: Commands that gather once and exit: their gather pauses the garbage collector and
#: freezes what it made (navarch.reconcile.collector, through navarch.api).
ONE_SHOT_COMMANDS = frozenset({"plan", "apply", "status", "destroy"})


def collector(command: str) -> contextlib.AbstractContextManager[None]:
    """navarch.reconcile.collector.one_shot() for ONE_SHOT_COMMANDS, else nothing."""
    if command not in ONE_SHOT_COMMANDS:
        return contextlib.nullcontext()
    from navarch.api.door import one_shot

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


def json_logs(argv: Sequence[str]) -> bool:
    """--log-format json anywhere on the line (before parsing, so usage errors follow it)."""
    return "--log-format=json" in argv or any(
        a == "--log-format" and b == "json" for a, b in zip(argv, argv[1:], strict=False)
    )


def error_line(exc: NavarchError) -> tuple[int, str]:
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


def failure_comment(args: argparse.Namespace, code: int, message: str) -> None:
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

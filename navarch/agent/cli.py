"""The agent's subcommands, registered into navarch's top-level parser by ``register``.

    navarch agent run [--once] [--config PATH] [--stdout] [--kernel-log FILE] [--interval-s N]
    navarch agent watch [--config PATH] [--interval-s N]   (checks at once on a new XID)
    navarch agent install [--config PATH] [--dry-run] [--root DIR]
    navarch agent bundle [--out PATH]     (the self-contained agent zipapp; prints its sha256)

Exit codes of ``agent run``: 0 when a report was written (whatever the node's health),
1 when it could not be written (bad config, no key, store unreachable), so the systemd
unit fails visibly only for the agent's own problems. Logs are JSON objects, one per
line, on stdout (on stderr with --stdout, where stdout carries the report).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from datetime import datetime
from typing import Any, TextIO

from navarch.agent.config import DEFAULT_CONFIG_PATH
from navarch.report.compat import UTC

__all__ = ["register", "JsonLogFormatter"]

EXIT_OK = 0
EXIT_FAILED = 1


class JsonLogFormatter(logging.Formatter):
    """One JSON object per record: ts, level, event (the message), then record.fields."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "event": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            doc.update(fields)
        if record.exc_info:
            doc["traceback"] = self.formatException(record.exc_info)[-2000:]
        return json.dumps(doc, default=str, separators=(",", ":"))


def _setup_logging(stream: TextIO) -> logging.Logger:
    log = logging.getLogger("navarch.agent")
    for h in list(log.handlers):
        if getattr(h, "_navarch_json", False):
            log.removeHandler(h)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonLogFormatter())
    handler._navarch_json = True  # type: ignore[attr-defined]
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    return log


def cmd_agent_run(args: argparse.Namespace) -> int:
    """``navarch agent run``: one report (--once) or one every --interval-s seconds."""
    from navarch.agent.config import load_config
    from navarch.agent.runner import run_once
    from navarch.errors import NavarchError

    log = _setup_logging(sys.stderr if args.stdout else sys.stdout)
    code = EXIT_OK
    while True:
        try:
            config = load_config(args.config, kernel_log=args.kernel_log)
            report = run_once(config, to_stdout=args.stdout)
            if args.stdout:
                print(json.dumps(report, indent=2, sort_keys=True), flush=True)
            code = EXIT_OK
            if args.metrics_textfile:
                _write_metrics(args.metrics_textfile, report, log)
        except (NavarchError, OSError) as exc:
            log.error(
                "report_not_written",
                extra={"fields": {"error": str(exc), "kind": type(exc).__name__}},
            )
            code = EXIT_FAILED
        if args.once:
            return code
        time.sleep(args.interval_s)


def cmd_agent_acceptance(args: argparse.Namespace) -> int:
    """``navarch agent acceptance --tests a,b``: run those acceptance tests now and print
    ``{"navarch_acceptance": [result, ...]}`` (navarch.remote.diagnostics reads it); --level:
    dcgm_diag's level instead of the policy's. Exit 0 when the tests ran, whatever their
    verdicts (the verdicts are in the JSON); 2 for a bad config or an unknown test name,
    with one line on stderr."""
    from navarch.agent.acceptance import run_named_tests
    from navarch.agent.config import load_config
    from navarch.errors import NavarchError

    names = [n.strip() for n in args.tests.split(",") if n.strip()]
    try:
        results = run_named_tests(load_config(args.config), names, level=args.level)
    except (NavarchError, ValueError) as exc:
        print(f"navarch agent acceptance: {exc}", file=sys.stderr)
        return 2
    doc = {"navarch_acceptance": [r.to_json() for r in results]}
    print(json.dumps(doc, sort_keys=True), flush=True)
    return EXIT_OK


def cmd_agent_watch(args: argparse.Namespace) -> int:
    """``navarch agent watch``: run until interrupted (navarch.agent.watch)."""
    import threading

    from navarch.agent.config import load_config
    from navarch.agent.watch import watch
    from navarch.errors import NavarchError

    log = _setup_logging(sys.stdout)
    try:
        load_config(args.config)  # a bad config stops here, not in the loop
        watch(lambda: load_config(args.config), interval_s=args.interval_s, stop=threading.Event())
    except NavarchError as exc:
        log.error("watch_not_started", extra={"fields": {"error": str(exc)}})
        return EXIT_FAILED
    except KeyboardInterrupt:
        pass
    return EXIT_OK


def _write_metrics(path: str, report: dict[str, Any], log: logging.Logger) -> None:
    """The report's Prometheus textfile (navarch.agent.metrics); a failure is logged, the
    report stays written."""
    from navarch.agent.metrics import write_report_metrics

    try:
        write_report_metrics(path, report)
    except OSError as exc:
        log.error("metrics_not_written", extra={"fields": {"error": str(exc), "path": path}})


def cmd_agent_install(args: argparse.Namespace) -> int:
    """``navarch agent install``: render and write the units, enable the timer."""
    import subprocess

    from navarch.agent.config import load_config
    from navarch.agent.install import install_units
    from navarch.errors import NavarchError

    try:
        config = load_config(args.config)
        lines = install_units(args.config, config=config, root=args.root, dry_run=args.dry_run)
    except NavarchError as exc:
        print(f"navarch agent install: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"navarch agent install: {exc}", file=sys.stderr)
        return EXIT_FAILED
    for line in lines:
        print(line)
    return EXIT_OK


def cmd_agent_bundle(args: argparse.Namespace) -> int:
    """``navarch agent bundle``: write the agent bundle; print its path, size and sha256."""
    from navarch.agent.bundle import write_bundle

    try:
        bundle = write_bundle(args.out)
    except (OSError, ModuleNotFoundError) as exc:
        print(f"navarch agent bundle: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(f"{args.out}  {bundle.size_bytes} bytes  sha256 {bundle.sha256}")
    return EXIT_OK


def _config_arg(parser: Any) -> None:
    """Add --config (the agent config's path) to an agent subcommand's parser."""
    parser.add_argument(
        "--config",
        default=DEFAULT_CONFIG_PATH,
        help=f"agent config (default {DEFAULT_CONFIG_PATH})",
    )


def register(subparsers: Any, *, bundled: bool = False) -> None:
    """Add ``agent`` (run, watch, install, bundle) to navarch's subparsers.

    subparsers: the object returned by ``ArgumentParser.add_subparsers``; each leaf sets
    ``func`` to a handler taking the parsed Namespace and returning an exit code.
    bundled: the agent zipapp's own CLI, which offers only run and watch (install and
    bundle need a full install: the unit templates and this installation's sources).
    """
    agent = subparsers.add_parser(
        "agent",
        help="the node health agent (runs on GPU machines)",
        epilog=(
            "In the agent bundle: install the units with cloud-init, examples/image or "
            "`navarch agent install` from a full install (pip install navarch)."
            if bundled
            else None
        ),
    )
    asub = agent.add_subparsers(dest="agent_command", required=True, metavar="COMMAND")

    s = asub.add_parser("run", help="check the GPUs and write a signed health report")
    s.add_argument(
        "--once", action="store_true", help="one report, then exit (the systemd timer's job)"
    )
    _config_arg(s)
    s.add_argument(
        "--stdout", action="store_true", help="print the report instead of writing it to the store"
    )
    s.add_argument(
        "--kernel-log", metavar="FILE", help="read XIDs from this text file (dmesg/syslog output)"
    )
    s.add_argument(
        "--interval-s", type=float, default=30.0, help="seconds between checks without --once"
    )
    s.add_argument(
        "--metrics-textfile",
        metavar="PATH",
        help="also write the GPU readings as Prometheus metrics (node_exporter textfile)",
    )
    s.set_defaults(func=cmd_agent_run)

    s = asub.add_parser(
        "watch", help="check every interval and at once on a new XID (follows /dev/kmsg)"
    )
    _config_arg(s)
    s.add_argument("--interval-s", type=float, default=30.0, help="seconds between checks")
    s.set_defaults(func=cmd_agent_watch)

    s = asub.add_parser(
        "acceptance",
        help="run named acceptance tests now and print their results as JSON "
        "(the reconciler's scheduled idle window, on a cordoned node)",
    )
    _config_arg(s)
    s.add_argument(
        "--tests",
        required=True,
        help="comma-separated tool tests, e.g. dcgm_diag,nvbandwidth,nccl_all_reduce",
    )
    s.add_argument("--level", type=int, choices=(1, 2, 3), help="dcgmi diag level for dcgm_diag")
    s.set_defaults(func=cmd_agent_acceptance)

    if bundled:
        return

    s = asub.add_parser("install", help="install and enable the agent's systemd service + timer")
    _config_arg(s)
    s.add_argument("--dry-run", action="store_true", help="print the units; write and run nothing")
    s.add_argument(
        "--root", default="/", help="write units under this root (systemctl runs only for /)"
    )
    s.set_defaults(func=cmd_agent_install)

    s = asub.add_parser("bundle", help="write the self-contained agent zipapp (navarch-agent.pyz)")
    s.add_argument("--out", default="navarch-agent.pyz", help="where (default ./navarch-agent.pyz)")
    s.set_defaults(func=cmd_agent_bundle)

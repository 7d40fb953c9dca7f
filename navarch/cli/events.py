"""`navarch apply FLEET --on-events QUEUE_URL [--listen]` and `navarch events setup FLEET`:
runs started by the store's notifications (navarch.events; docs/events.md).

    apply --on-events URL            drain what is queued (a long poll of --events-wait),
                                     apply once listing every report (the periodic run:
                                     a CronJob or timer), delete the drained messages
    apply --on-events URL --triggered
                                     a job the queue started: drain, apply once naming
                                     only the drained messages' reports, delete them
    apply --on-events URL --listen   serve the queue: a run within seconds of a batch of
                                     notifications, naming its reports, and one every
                                     --period without any (systemd service, Deployment)
    events setup FLEET [--dry-run]   create the queue and the bucket notification
"""

from __future__ import annotations

import argparse
import signal
from typing import Any

from navarch.cli.plumbing import EXIT_OK, fleet_argument, note
from navarch.errors import ConfigError, StoreError
from navarch.fleet.durations import parse_duration_s

__all__ = ["apply_on_events", "event_flags", "register"]


def _seconds(text: str) -> int:
    try:
        return parse_duration_s(text)
    except (ValueError, ConfigError) as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: a duration such as 20s, 1m") from exc


def event_flags(s: argparse.ArgumentParser) -> None:
    """apply's flags for event-started runs."""
    g = s.add_argument_group("event-started runs (docs/events.md)")
    g.add_argument(
        "--on-events",
        metavar="QUEUE_URL",
        help="the queue the store notifies: https://sqs.REGION.amazonaws.com/ACCOUNT/QUEUE, "
        "pubsub://projects/P/subscriptions/S or azure-queue://ACCOUNT/QUEUE; messages are "
        "deleted only after the run saved its state",
    )
    g.add_argument(
        "--listen",
        action="store_true",
        help="with --on-events: keep serving the queue, a run per burst of reports and one "
        "every --period without any",
    )
    g.add_argument(
        "--triggered",
        action="store_true",
        help="with --on-events: a job the queue started (Cloud Run, Azure Functions): run "
        "only for the reports the drained messages name, not at all for none",
    )
    g.add_argument(
        "--period",
        type=_seconds,
        default=60,
        metavar="DURATION",
        help="with --listen: the periodic run's interval (default 1m)",
    )
    g.add_argument(
        "--events-wait",
        type=_seconds,
        default=20,
        metavar="DURATION",
        help="longest wait for the first message of a batch (default 20s, SQS's longest poll)",
    )
    g.add_argument(
        "--events-visibility",
        type=_seconds,
        default=None,
        metavar="DURATION",
        help="how long a received message stays hidden before it is delivered again (default 10m)",
    )


def _open_queue(args: argparse.Namespace) -> Any:
    from navarch import api
    from navarch.api.reading import read_saved_plan
    from navarch.events.messages import Watch
    from navarch.events.queues import VISIBILITY_S, open_queue

    if read_saved_plan(args.target) is not None:
        raise ConfigError(
            f"--on-events with a saved plan ({args.target}): a run started by events plans anew",
            key_path="--on-events",
            hint="pass the fleet file",
        )
    fleet = api.load_fleet(args.target)
    try:
        watch = Watch.of_store(fleet.spec.store_url, fleet.name)
    except ValueError as exc:
        raise ConfigError(str(exc), key_path="store", file=str(fleet.path)) from exc
    queue = open_queue(args.on_events, watch)
    queue.visibility_s = args.events_visibility or VISIBILITY_S
    return queue


def apply_on_events(args: argparse.Namespace, apply_once: Any) -> int:
    """Run apply from the queue (module docstring) -> the last run's exit code.

    apply_once(named) applies once (named: report keys, or None to list every report) and
    returns its exit code. Raises ConfigError for a bad queue URL, store or flags;
    StoreError when the queue fails in a --triggered run (the periodic run goes on without
    the queue; --listen logs it and polls again)."""
    from navarch.events.runner import Batch, drain, listen, run_batch

    if not args.on_events:
        raise ConfigError(
            "--listen and --triggered serve an event queue", hint="add --on-events QUEUE_URL"
        )
    if args.triggered and args.listen:
        raise ConfigError("--triggered and --listen: choose one", key_path="--on-events")
    queue = _open_queue(args)
    if not args.listen:
        try:
            batch = drain(queue, wait_s=args.events_wait)
        except StoreError as exc:
            if args.triggered:
                raise
            # The periodic run does not depend on the queue: it runs and lists everything.
            note(f"event queue unreadable, running without it: {exc}")
            batch = Batch()
        code = run_batch(queue, batch, apply_once, full=not args.triggered)
        note(
            f"Events: {len(batch.messages)} messages, {len(batch.keys)} reports named"
            + (f", ignored {batch.parsed.ignored_text()}" if batch.parsed.ignored else "")
            + "; deleted after the run."
        )
        return int(code)
    stopping = {"now": False}

    def stop(*_: Any) -> None:
        stopping["now"] = True

    def each_run(named: tuple[str, ...] | None) -> int:
        # Each run of a listening process is a run of its own: its own id in the logs and
        # the audit log's chunk names.
        from datetime import UTC, datetime

        from navarch import logs

        args.run_id = logs.new_run_id(datetime.now(UTC))
        logs.configure(args.log_format, args.run_id)
        return int(apply_once(named))

    signal.signal(signal.SIGTERM, stop)  # a Deployment's or systemd's stop: finish the run
    return listen(
        queue,
        each_run,
        period_s=args.period,
        wait_s=args.events_wait,
        stop=lambda: stopping["now"],
    )


def cmd_events_setup(args: argparse.Namespace) -> int:
    """`navarch events setup FLEET [--dry-run]`: print each call, then the queue URL."""
    from navarch import api
    from navarch.events.routes import SetupTarget
    from navarch.events.setup import setup_events

    fleet = api.load_fleet(args.fleet)
    target = SetupTarget.of_fleet(
        fleet.spec.store_url,
        fleet.name,
        fleet.spec.providers,
        region=args.region or "",
        project=args.project or "",
        subscription_id=args.subscription_id or "",
        resource_group=args.resource_group or "",
    )
    print("Would call:" if args.dry_run else "Calling:")
    warnings: list[str] = []

    def warn(message: str) -> None:
        warnings.append(message)
        print(f"  warning: {message}")

    url, calls = setup_events(
        target, dry_run=args.dry_run, say=lambda line: print(f"  {line}"), warn=warn
    )
    done = "Would set up" if args.dry_run else "Set up"
    skipped = f", {len(warnings)} optional route(s) not set up" if warnings else ""
    print(
        f"\n{done} {target.store_url} -> {url} ({len(calls)} calls{skipped}). Start runs from"
        f" it with:\n  navarch apply {args.fleet} --on-events {url} --listen"
    )
    return EXIT_OK


def register(sub: Any) -> None:
    """`navarch events setup`."""
    events = sub.add_parser("events", help="runs started by the store's notifications")
    esub = events.add_subparsers(dest="events_command", required=True, metavar="SUBCOMMAND")
    s = esub.add_parser("setup", help="create the fleet's event queue and the bucket notification")
    fleet_argument(s)
    s.add_argument("--dry-run", action="store_true", help="print the API calls, make none")
    s.add_argument("--region", help="AWS: the queue's region (the bucket's; default: the fleet's)")
    s.add_argument("--project", help="GCP: the Pub/Sub project (default: the fleet's gcp provider)")
    s.add_argument("--subscription-id", help="Azure: the storage account's subscription")
    s.add_argument("--resource-group", help="Azure: the storage account's resource group")
    s.set_defaults(func=cmd_events_setup)

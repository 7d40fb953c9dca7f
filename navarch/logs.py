"""Logs and terminal progress for a batch job.

configure(): `--log-format json` makes every log record one JSON object on stderr with
the run id (`{"time", "level", "logger", "message", "run_id", ...extra}`), for journald,
CloudWatch or Loki; `text` (the default) keeps warnings as plain lines. summary() logs the
final one-line summary of a run. progress(): a progress bar on stderr only when stderr is
a terminal and the logs are text (none when piped or in CI); it uses rich, which honours
NO_COLOR (https://no-color.org), and so does everything else navarch prints (no colour).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, TextIO

from navarch.textsafe import terminal

#: Record attributes every LogRecord has; anything else passed as `extra` is emitted.
_STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
_RUN_ID = {"value": ""}
_HANDLER = "navarch.logs"  # the name of the handler configure() adds (and replaces)


def new_run_id(now: datetime) -> str:
    """A run id like the audit log's: "<UTC yyyymmddThhmmssZ>-<8 hex>"."""
    return f"{now.astimezone(UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"


def run_id() -> str:
    """The run id configure() set ("" before)."""
    return _RUN_ID["value"]


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (RFC 3339 UTC), level, logger, message, run_id,
    the exception text when there is one, and any `extra` fields."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "run_id": _RUN_ID["value"],
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in doc:
                doc[key] = value
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, sort_keys=True, default=str)


class _TextFormatter(logging.Formatter):
    """ "navarch: LEVEL: message" with the message on one printable line: a message that
    quotes a node's text cannot move the cursor, recolour the terminal or fake a line."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        record.message = terminal(record.message)
        return super().formatMessage(record)


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """A StreamHandler writing to whatever sys.stderr is at emit time (it may be replaced
    after configure(), e.g. by a test runner capturing output)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def configure(log_format: str, run: str, stream: TextIO | None = None) -> None:
    """Set up navarch's loggers: json (INFO and up, JSON lines) or text (WARNING and up,
    "navarch: LEVEL: message"), on stream (default: sys.stderr at each write); records
    carry `run` as run_id. Calling it again replaces the handler it added before."""
    _RUN_ID["value"] = run
    handler: logging.Handler = logging.StreamHandler(stream) if stream is not None else _Stderr()
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
        level = logging.INFO
    else:
        handler.setFormatter(_TextFormatter("navarch: %(levelname)s: %(message)s"))
        level = logging.WARNING
    root = logging.getLogger("navarch")
    for old in list(root.handlers):
        if old.get_name() == _HANDLER:
            root.removeHandler(old)
    handler.set_name(_HANDLER)
    root.addHandler(handler)
    root.setLevel(level)


def summary(message: str, **fields: Any) -> None:
    """Log the run's final one-line summary (logger navarch.run, INFO; in JSON it carries
    `summary: true` and the fields)."""
    logging.getLogger("navarch.run").info(message, extra={"summary": True, **fields})


def color_disabled() -> bool:
    """True when NO_COLOR is set to anything non-empty (https://no-color.org)."""
    return bool(os.environ.get("NO_COLOR"))


@contextmanager
def progress(total: int, label: str, enabled: bool) -> Iterator[Any]:
    """A progress bar of `total` steps on stderr, or a no-op when not enabled, total is
    0, or stderr is not a terminal. Yields an object with advance()."""
    if not (enabled and total and sys.stderr.isatty()):
        yield _NoProgress()
        return
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    console = Console(stderr=True, no_color=color_disabled())
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task(escape(label), total=total)  # a scenario's name is not markup
        yield _Bar(bar, task)


class _NoProgress:
    def advance(self) -> None:
        pass


class _Bar:
    def __init__(self, bar: Any, task: Any) -> None:
        self.bar, self.task = bar, task

    def advance(self) -> None:
        self.bar.advance(self.task)

"""Durations as written in fleet.yaml ("90s", "5m", "1h30m", "1d") to seconds."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from navarch.errors import ConfigError
from navarch.report.timefmt import required_ts

_PART = re.compile(r"([0-9]+)([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration_s(text: str) -> int:
    """Return whole seconds for a duration string such as "1h30m".

    Raises ValueError for anything that is not one or more <digits><s|m|h|d> parts.
    """
    if not isinstance(text, str) or not re.fullmatch(r"([0-9]+[smhd])+", text):
        raise ValueError(f"not a duration: {text!r} (write it like 90s, 5m, 1h)")
    return sum(int(n) * _UNIT_S[u] for n, u in _PART.findall(text))


def format_duration_s(seconds: float) -> str:
    """Render seconds compactly for humans: 45s, 5m, 1h2m, 3d4h."""
    s = int(max(seconds, 0))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        m, r = divmod(s, 60)
        return f"{m}m" + (f"{r}s" if r else "")
    if s < 86400:
        h, r = divmod(s, 3600)
        return f"{h}h" + (f"{r // 60}m" if r // 60 else "")
    d, r = divmod(s, 86400)
    return f"{d}d" + (f"{r // 3600}h" if r // 3600 else "")


def window_start(
    since: datetime | timedelta | str, now: datetime, *, name: str = "since"
) -> datetime:
    """The start (aware UTC) of a window that ends at `now` (aware UTC).

    since: an aware datetime; a timedelta back from now; or text, a duration back from now
    ("24h", "7d", "1h30m", parse_duration_s) or an RFC 3339 time with a timezone.
    name: how the caller's user wrote it, for the error ("--since", "since").
    Raises ConfigError for text that is neither, a naive datetime, or a duration that
    reaches back before the year 1 (datetime's range).
    """
    if isinstance(since, str):
        text = since
        try:
            since = timedelta(seconds=parse_duration_s(text))
        except ValueError:
            since = _rfc3339(text, name)
        except OverflowError:
            since = timedelta.max
    else:
        text = str(since)
    if isinstance(since, datetime):
        if since.tzinfo is None:
            raise ConfigError(
                f"{name} {text!r} has no timezone", hint="give an aware time, e.g. in UTC"
            )
        return since.astimezone(UTC)
    try:
        return now - since
    except OverflowError:
        raise ConfigError(
            f"{name} {text!r} reaches back before the year 1",
            hint="give a shorter duration, e.g. 30d, or an RFC 3339 time",
        ) from None


def _rfc3339(text: str, name: str) -> datetime:
    """An aware time from RFC 3339 text; ConfigError (with the forms) when it is not one."""
    try:
        return required_ts(text)
    except ValueError:
        raise ConfigError(
            f"{name} {text!r} is neither a duration nor an RFC 3339 time",
            hint="write it like 24h, 7d, 1h30m or 2026-11-24T03:00:00Z",
        ) from None

"""Durations as written in fleet.yaml ("90s", "5m", "1h30m", "1d") to seconds."""

from __future__ import annotations

import re

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

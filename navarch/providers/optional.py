"""Optional cloud lookups: answers navarch uses when it has them and does without.

An instance's network topology (block-aware placement), a pool's reservation or Capacity
Block, whether a placement group exists: a lookup of these that fails (an outage page, a
5xx, a timeout) or is denied (the policy lacks the action) leaves its answer unknown for
this run, with one warning naming the permission, and inventory, plan and apply go on.
docs/design.md, Safety rules: an optional cloud feature that fails degrades with a
warning and never stops the fleet. Listing, launching and terminating are not optional and keep raising.

Also here: `answer_excerpt`, the one-line excerpt of an answer body (an HTML error page,
a truncated JSON document) that every provider's error map quotes.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from navarch.errors import AuthError, ProviderError
from navarch.textsafe import node_text

__all__ = ["ANSWER_EXCERPT_CHARS", "OptionalLookup", "answer_excerpt", "optional", "warning_for"]

T = TypeVar("T")

#: How much of an unreadable answer an error line quotes: enough to recognise an outage or
#: proxy page, short enough to stay one line.
ANSWER_EXCERPT_CHARS = 160


_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)


def answer_excerpt(text: object, max_chars: int = ANSWER_EXCERPT_CHARS) -> str:
    """`text` on one printable line (line breaks and control characters become spaces,
    runs of spaces one), cut to max_chars characters with an ellipsis; text holding an HTML
    page (an outage or proxy page) is said as `an HTML page titled '...'`. Never raises."""
    flat = " ".join(str(text).split())
    title = _TITLE.search(flat)
    if title and "<html" in flat.lower():
        flat = f"an HTML page titled {title.group(1).strip()!r}"
    return node_text(flat, max_chars)


@dataclass(frozen=True)
class OptionalLookup:
    """One optional lookup of a cloud: permission, the IAM action or role permission it
    needs ("ec2:DescribeInstanceTopology"); unknown, what is unknown without it
    ("topology"); purpose, what it serves ("block-aware placement")."""

    permission: str
    unknown: str
    purpose: str


def warning_for(lookup: OptionalLookup, exc: ProviderError, where: str = "") -> str:
    """The one warning line for a lookup that failed with exc (a mapped provider error).

    Denied (AuthError): "<permission> denied: <unknown> unknown; grant it for <purpose>".
    Otherwise: "<permission> failed<where>: <error>; <unknown> unknown this run (<purpose>
    resumes when it answers)". where: " in us-east-1" or "".
    """
    if isinstance(exc, AuthError):
        return (
            f"{lookup.permission} denied{where}: {lookup.unknown} unknown; "
            f"grant it for {lookup.purpose}"
        )
    return (
        f"{lookup.permission} failed{where}: {answer_excerpt(exc, 300)}; {lookup.unknown} "
        f"unknown this run ({lookup.purpose} resumes when it answers)"
    )


def optional(
    lookup: OptionalLookup,
    call: Callable[[], T],
    default: T,
    log: logging.Logger,
    where: str = "",
) -> T:
    """call() -> its answer; when it raises a ProviderError (the provider's mapped errors:
    denied, 5xx, unreadable answer, timeout), log warning_for(...) and return default.
    Other exceptions (a bug) leave as they are."""
    try:
        return call()
    except ProviderError as exc:
        log.warning("%s", warning_for(lookup, exc, where))
        return default

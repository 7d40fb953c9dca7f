"""Text that a node supplied, made inert for each place it is shown.

A health report is signed with its node's own key, which a tenant with root on that node
holds, so its free text (check messages, XID messages) is hostile input. It is made plain
once where it enters (`node_text`: no control characters, no invisible characters, no lone
surrogates, a bounded length) and escaped again for each sink's format where it leaves:

- `slack_mrkdwn`: Slack's mrkdwn control characters (&, <, >), per Slack's "Formatting
  text for app surfaces" (escaping text), so `<!channel>` and `<url|label>` stay text.
- `markdown_code_line`: one line inside a fenced code block (no newline, no backtick run
  that could close the fence).
- `markdown_inline`: running Markdown text (CommonMark backslash escapes for link, image
  and code punctuation, HTML's &, <, > as entities, GitHub autolinks broken).
- `terminal`: a line for a terminal or a log (no ANSI escape, no newline).

JSON sinks (webhook, PagerDuty, the audit log) need only `node_text`: json.dumps escapes
the rest. The status page escapes through jinja2's HTML autoescape.

How navarch says a count in English, so no line says "node(s)".
"""

from __future__ import annotations

import re

from navarch.errors import NavarchError

#: Longest node-supplied text kept, in characters: one finding line in a plan, a Slack
#: message or a PagerDuty summary; the report schema allows 1024 per message.
NODE_TEXT_MAX_CHARS = 300

#: Longest operator reason (--reason), in characters: a sentence or two for the scheduler's
#: users and the audit log, never a pasted log (it lands in every plan and PR comment, and
#: GitHub refuses a comment over 65,536 characters).
OPERATOR_REASON_MAX_CHARS = 1024

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
#: Characters that show as nothing yet are still read by a model or a program: every format
#: character (Unicode category Cf: soft hyphen, zero-width space and joiners, word joiner,
#: U+180E, U+FEFF, the invisible operators, the whole tag block U+E0000-E007F that can
#: spell out a hidden instruction) and the invisible fillers and selectors of other
#: categories (combining grapheme joiner, Hangul fillers, Khmer inherent vowels, variation
#: selectors, which can carry a byte each). Cf as of Unicode 15.1; a test holds the list
#: against the running Python's unicodedata.
_INVISIBLE = re.compile(
    "[\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u115f\u1160"
    "\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff"
    "\uffa0\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0000-\U000e007f\U000e0100-\U000e01ef]"
)
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_BACKTICKS = re.compile(r"`{2,}")
_MD_PUNCT = re.compile(r"([\\`\[\]])")
_AUTOLINK = re.compile(r"(?i)(://|www\.)")


def plain(text: str) -> str:
    """One line of visible text: control characters (C0 and C1, so NUL, ESC and line
    breaks; bidi overrides) become spaces, invisible characters (every Unicode format
    character, tag characters, zero-width spaces and joiners, U+FEFF, variation selectors)
    are removed, lone surrogates become U+FFFD. Never raises.

    Printable ASCII, most text, is returned as it is without a regex pass: plain runs on
    every node string a state document holds each time it is read (bench/scale.py)."""
    text = str(text)
    if text.isascii() and text.isprintable():
        return text
    return _SURROGATE.sub("\ufffd", _INVISIBLE.sub("", _CONTROL.sub(" ", text)))


def node_text(text: str, max_chars: int = NODE_TEXT_MAX_CHARS) -> str:
    """`plain(text)` cut to max_chars characters (an ellipsis marks the cut)."""
    flat = plain(text)
    return flat if len(flat) <= max_chars else flat[: max_chars - 1] + "\u2026"


def terminal(text: str) -> str:
    """Text for a terminal or a log line: `plain`, so no ANSI escape sequence survives."""
    return plain(text)


def slack_mrkdwn(text: str) -> str:
    """Text for a Slack mrkdwn message: plain, then &, < and > as &amp; &lt; &gt; (Slack's
    only control characters; `<!channel>` and `<url|label>` then show as text)."""
    return plain(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def markdown_code_line(text: str) -> str:
    """Text for one line inside a fenced code block: plain (no newline can start a closing
    fence) and no run of two or more backticks."""
    return _BACKTICKS.sub("`", plain(text))


def markdown_inline(text: str) -> str:
    """Text for running GitHub Markdown: plain; &, <, > as HTML entities (no raw HTML, no
    <autolink>); CommonMark backslash escapes before [, ], ` and backslash (no link, image or code
    span can open; emphasis is harmless and kept readable); a zero-width space inside "://" and "www." so GitHub's extended autolinks
    do not turn a bare address into a link."""
    flat = plain(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    flat = _MD_PUNCT.sub(r"\\\1", flat)
    return _AUTOLINK.sub(lambda m: m.group(1)[0] + "\u200b" + m.group(1)[1:], flat)


def operator_reason(reason: str, why_needed: str) -> str:
    """An operator's --reason made plain (`plain`, stripped), or NavarchError when it is
    empty (why_needed says where it is shown) or longer than OPERATOR_REASON_MAX_CHARS.
    Every verb that takes a reason (cordon, pause, the MCP cordon) checks it here."""
    text = plain(reason).strip()
    if not text:
        raise NavarchError(f"give a reason (--reason TEXT): {why_needed}")
    if len(text) > OPERATOR_REASON_MAX_CHARS:
        raise NavarchError(
            f"the reason is {len(text):,} characters, more than "
            f"{OPERATOR_REASON_MAX_CHARS:,}: say why in a sentence or two ({why_needed}) "
            "and link to the details"
        )
    return text


def counted(n: int, noun: str, plural: str = "") -> str:
    """ "1 node", "3 nodes", "0 nodes": n and the noun, plural unless n is 1. plural: the
    plural form when it is not noun + "s" (e.g. "zones/types")."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"

"""A person's consent to an assistant's acting call: asked of the person, never the model.

A plan fingerprint (navarch.mcp.confirm) binds an acting call to a plan the server
returned; it is handed to the model, so it cannot also be the person's yes. Consent comes
from one of two places, chosen when the server starts:

- a confirmation code (`navarch mcp --confirm-code stderr|tty`): for each acting call the
  server draws a one-time code (the secrets module), writes it with the plan to the
  server's standard error or its controlling terminal, and refuses the call, saying
  only where the code went. The person reads the code there and gives it; a call carrying
  it, for the same plan, verb, nodes and reason, within CODE_TTL_S, acts. The code never
  enters a tool result, so the model cannot read it back.
- MCP elicitation (without --confirm-code): the server sends the client an
  `elicitation/create` request showing the plan; the call acts only when the client
  answers `accept` with `confirm: true` (MCP specification 2025-06-18, "Elicitation":
  the client presents the request to the user, who accepts, declines or cancels).

Without either (no code channel, and a client that did not declare the elicitation
capability at initialize) an acting call is refused with the reason and the way out.
"""

from __future__ import annotations

import enum
import hmac
import secrets
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from pydantic import BaseModel, Field

from navarch.errors import ConfigError

__all__ = [
    "CODE_ALPHABET",
    "CODE_ATTEMPTS",
    "CODE_TTL_S",
    "CodeChannel",
    "ConfirmCodes",
    "Consent",
    "Request",
    "open_channel",
]

#: How long a code stays good, in seconds: long enough to read a terminal and answer, short
#: enough that an old code lying in a scrollback does not confirm a later call.
CODE_TTL_S = 600.0

#: Wrong codes a pending code survives before it is dropped (a guessing model gets this
#: many tries at 1 in 32**8, about 1e12, each).
CODE_ATTEMPTS = 3

#: Crockford's base32 alphabet: no I, L, O or U, so a code read aloud or retyped survives.
CODE_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

_CODE_CHARS = 8


class CodeChannel(enum.StrEnum):
    """Where the server writes confirmation codes: its standard error (a terminal that ran
    it, or the client's server log), or its controlling terminal (/dev/tty)."""

    STDERR = "stderr"
    TTY = "tty"


def open_channel(channel: CodeChannel) -> TextIO:
    """The stream codes are written to for `channel`. Raises ConfigError when the
    controlling terminal cannot be opened (a server started by a desktop client has none)."""
    if channel is CodeChannel.STDERR:
        return sys.stderr
    try:
        return open("/dev/tty", "w", encoding="utf-8")  # noqa: SIM115 - held for the server's life
    except OSError as exc:
        raise ConfigError(
            f"--confirm-code tty: this process has no controlling terminal ({exc.strerror})",
            hint="use --confirm-code stderr and read the server's log, or run the client in a terminal",
        ) from exc


class Consent(enum.StrEnum):
    """How a person may be asked: a code on the server's channel, MCP elicitation, or no
    way at all (acting calls are refused)."""

    CODE = "code"
    ELICITATION = "elicitation"
    NONE = "none"


@dataclass(frozen=True)
class Request:
    """What the person is asked to allow. key: everything the answer is bound to (the plan
    fingerprint, the verb, the nodes named, a cordon's reason); text: the plan as the
    person reads it (`navarch plan`'s text of the actions the call would carry out)."""

    key: str
    text: str


class Confirm(BaseModel):
    """The elicitation form: one boolean the person sets to carry out the plan shown."""

    confirm: bool = Field(
        title="Carry out these actions",
        description="Set to true to let navarch carry out exactly the actions shown.",
    )


@dataclass
class _Pending:
    code: str
    expires_at: float
    attempts_left: int


class ConfirmCodes:
    """One-time codes issued to the person on `write`, by Request key.

    clock: monotonic seconds (time.monotonic); injected by tests of expiry.
    """

    def __init__(
        self, write: Callable[[str], None], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._write = write
        self._clock = clock
        self._pending: dict[str, _Pending] = {}

    def issue(self, request: Request, who: str) -> None:
        """Draw a code for `request`, replacing any earlier one, and write it with the plan
        and the asking client's name `who` to the person's channel."""
        code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(_CODE_CHARS))
        self._pending[request.key] = _Pending(code, self._clock() + CODE_TTL_S, CODE_ATTEMPTS)
        shown = f"{code[:4]}-{code[4:]}"
        self._write(
            f"\nnavarch mcp: {who} asks to carry out:\n{request.text}\n"
            f"navarch mcp: to allow it, give the assistant this confirmation code: {shown}\n"
            f"navarch mcp: (good once, for {int(CODE_TTL_S // 60)} minutes; "
            "ignore it to refuse)\n"
        )

    def redeem(self, request: Request, given: str) -> bool:
        """Whether `given` is the live code for `request`; a right code is used up, a wrong
        one costs one of CODE_ATTEMPTS tries, an expired one is dropped."""
        pending = self._pending.get(request.key)
        if pending is None:
            return False
        if self._clock() > pending.expires_at:
            del self._pending[request.key]
            return False
        typed = "".join(given.split()).replace("-", "").upper()
        if hmac.compare_digest(typed.encode(), pending.code.encode()):
            del self._pending[request.key]
            return True
        pending.attempts_left -= 1
        if pending.attempts_left <= 0:
            del self._pending[request.key]
        return False

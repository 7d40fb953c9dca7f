"""Talk to `navarch mcp` as an assistant does, through the `mcp` SDK's own client: the server
`navarch mcp` builds, in this process over the SDK's in-memory transport, or the command
itself as a subprocess over stdio. The SDK comes with the mcp extra; a test module that
talks carries `needs_mcp`, which skips it where the extra is not installed."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from navarch.report.timefmt import required_ts

# The SDK is imported when a test talks, not when pytest collects: its import costs each
# collecting process about a second.
if TYPE_CHECKING:
    from mcp import ClientSession
    from mcp.types import ElicitRequestParams, ElicitResult

#: A module of MCP tests carries this: the SDK comes with the mcp extra (and .[dev]).
needs_mcp = pytest.mark.skipif(
    importlib.util.find_spec("mcp") is None, reason="needs the mcp extra: pip install -e .[mcp]"
)

REPO = Path(__file__).resolve().parents[2]
CLIENT = "oncall-assistant"

Session = Callable[["ClientSession"], Awaitable[Any]]


class Person:
    """A person behind the client's elicitation: answers every request with `action`
    ("accept", "decline", "cancel") and, on accept, `confirm`; keeps the messages shown."""

    def __init__(self, action: str = "accept", confirm: bool = True) -> None:
        self.action = action
        self.confirm = confirm
        self.shown: list[str] = []

    async def answer(self, context: Any, params: ElicitRequestParams) -> ElicitResult:
        from mcp.types import ElicitResult

        self.shown.append(params.message)
        content = {"confirm": self.confirm} if self.action == "accept" else None
        return ElicitResult(action=self.action, content=content)  # type: ignore[arg-type]


def talk(
    workdir: Path,
    *flags: str,
    body: Session,
    env: dict[str, str] | None = None,
    person: Person | None = None,
    process: bool | None = None,
) -> Any:
    """Serve workdir/fleet.yaml as `navarch mcp fleet.yaml FLAGS` does, initialize as CLIENT,
    run body(session) and return what it returns.

    process: True starts `navarch mcp` as a subprocess spoken to over stdio (its stderr
    goes to workdir/mcp-server.log); False builds the same server in this process
    (navarch.mcp.server.build_server) and speaks to it over the SDK's in-memory transport,
    which skips a process start of about 2 s of CPU; None (the default) takes a process
    only for --confirm-code, whose codes are written to the server's own terminal.
    env: variables of the run (NAVARCH_NOW is the only one read in process).
    person: the client's elicitation answerer (declares the elicitation capability);
    None: a client without elicitation."""
    if process is None:
        process = "--confirm-code" in flags
    if not process:
        return _talk_in_process(workdir, flags, body, env or {}, person)
    from mcp import ClientSession, StdioServerParameters, stdio_client
    from mcp.types import Implementation

    server_env = {k: v for k, v in os.environ.items() if not k.startswith("NAVARCH_")}
    server_env.update({"PYTHONPATH": str(REPO), **(env or {})})
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "navarch", "mcp", "fleet.yaml", *flags],
        env=server_env,
        cwd=workdir,
    )

    async def run() -> Any:
        with open(workdir / "mcp-server.log", "a") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(
                    read,
                    write,
                    client_info=Implementation(name=CLIENT, version="1.0"),
                    elicitation_callback=person.answer if person is not None else None,
                ) as session:
                    await session.initialize()
                    with anyio.fail_after(120):
                        return await body(session)

    return anyio.run(run)


def _talk_in_process(
    workdir: Path, flags: tuple[str, ...], body: Session, env: dict[str, str], person: Person | None
) -> Any:
    """talk's in-process server, in workdir as the command runs there: the flags `navarch
    mcp` would parse, NAVARCH_NOW as the CLI's clock (navarch.cli.plumbing.process_clock)."""
    from navarch.mcp.server import build_server

    assert set(flags) <= {"--allow-actions"}, f"in process: {flags} need process=True"
    fixed = env.get("NAVARCH_NOW")
    now = required_ts(fixed) if fixed else None
    with contextlib.chdir(workdir):  # answers name "fleet.yaml" as the command's do
        server = build_server(
            "fleet.yaml",
            allow_actions="--allow-actions" in flags,
            now=(lambda: now) if now is not None else None,
        )
        return anyio.run(_in_memory, server, body, person)


async def _in_memory(server: Any, body: Session, person: Person | None) -> Any:
    """body(client) on a client of `server` over the SDK's in-memory transport."""
    from mcp import Client
    from mcp.types import Implementation

    async with Client(
        server,
        mode="legacy",  # the initialize handshake, as over stdio: elicitation can answer
        client_info=Implementation(name=CLIENT, version="1.0"),
        elicitation_callback=person.answer if person is not None else None,
    ) as client:
        with anyio.fail_after(120):
            return await body(client)  # type: ignore[arg-type]


def document(result: Any) -> dict[str, Any]:
    """A successful tool call's JSON document (its text content)."""
    assert not result.is_error, result.content
    return json.loads(result.content[0].text)


def refusal(result: Any) -> dict[str, Any]:
    """A refused acting call's JSON document {refused, plan, plan_fingerprint[, would]}
    (the SDK prefixes a tool error's text with "Error executing tool NAME: ")."""
    assert result.is_error, result.content
    text = result.content[0].text
    return json.loads(text[text.index("{") :])

"""Talk to `navarch mcp` as an assistant does: a subprocess spoken to by the `mcp` SDK's own
stdio client (import only where the mcp extra is installed)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import ElicitRequestParams, ElicitResult, Implementation

REPO = Path(__file__).resolve().parents[2]
CLIENT = "oncall-assistant"

Session = Callable[[ClientSession], Awaitable[Any]]


class Person:
    """A person behind the client's elicitation: answers every request with `action`
    ("accept", "decline", "cancel") and, on accept, `confirm`; keeps the messages shown."""

    def __init__(self, action: str = "accept", confirm: bool = True) -> None:
        self.action = action
        self.confirm = confirm
        self.shown: list[str] = []

    async def answer(self, context: Any, params: ElicitRequestParams) -> ElicitResult:
        self.shown.append(params.message)
        content = {"confirm": self.confirm} if self.action == "accept" else None
        return ElicitResult(action=self.action, content=content)  # type: ignore[arg-type]


def talk(
    workdir: Path,
    *flags: str,
    body: Session,
    env: dict[str, str] | None = None,
    person: Person | None = None,
) -> Any:
    """Start `navarch mcp fleet.yaml FLAGS` in workdir, initialize as CLIENT, run body(session)
    and return what it returns; the server's stderr goes to workdir/mcp-server.log.
    person: the client's elicitation answerer (declares the elicitation capability);
    None: a client without elicitation."""
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

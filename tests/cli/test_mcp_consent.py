"""An assistant's acting call needs a person's consent, not the model's: `navarch mcp
--allow-actions` asks the person through MCP elicitation or a one-time code on the server's
terminal, and a plan fingerprint alone never acts. Spoken to by the `mcp` SDK's own stdio
client, on the embedded local fleet after an injected XID 79 (demo-train-0002)."""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from tests.support.mcp_client import (
    CLIENT,
    Person,
    _in_memory,
    document,
    needs_mcp,
    refusal,
    talk,
)

if TYPE_CHECKING:
    from mcp import ClientSession


pytestmark = needs_mcp

CODE = re.compile(r"confirmation code: ([0-9A-Z]{4}-[0-9A-Z]{4})")


@pytest.fixture
def sick_fleet(navarch):
    """The example fleet applied, reporting, with XID 79 on demo-train-0002's GPU 3."""
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    navarch.ok("local", "inject", "fleet.yaml", "demo-train-0002", "--xid", "79", "--gpu", "3")
    navarch.ok("local", "tick", "fleet.yaml")
    return navarch


def _mcp_events(navarch) -> list[dict[str, Any]]:
    events = json.loads(navarch.ok("history", "fleet.yaml", "--json").out)["events"]
    return [e for e in events if e["actor"] == "mcp"]


def _lifecycles(navarch) -> dict[str, str]:
    return {n["node"]: n["lifecycle"] for n in navarch.nodes()}


async def _replace_twice(s: ClientSession) -> dict[str, Any]:
    """What a model alone does: ask, then replay the refusal's own fingerprint."""
    first = refusal(await s.call_tool("replace", {"node": "demo-infer-0001"}))
    ask = {"node": "demo-infer-0001", "plan_fingerprint": first["plan_fingerprint"]}
    return {"first": first, "second": await s.call_tool("replace", ask)}


def test_two_mcp_calls_without_a_person_replace_nothing(sick_fleet):
    before = _lifecycles(sick_fleet)
    got = talk(sick_fleet.workdir, "--allow-actions", body=_replace_twice)

    second = refusal(got["second"])
    assert "no way to" in second["refused"] and "--confirm-code" in second["refused"]
    assert "elicitation" in second["refused"]
    assert second["plan"]["actions"]  # the plan is still shown, as information
    assert not _mcp_events(sick_fleet)
    assert _lifecycles(sick_fleet) == before
    assert before["demo-infer-0001"] == "healthy"


def test_a_person_who_accepts_the_elicitation_lets_the_replace_proceed(sick_fleet):
    person = Person("accept")
    got = talk(sick_fleet.workdir, "--allow-actions", body=_replace_twice, person=person)

    done = document(got["second"])
    assert ("cordon", "demo-infer-0001", "ok") in {
        (o["action"], o["node"], o["kind"]) for o in done["outcomes"]
    }
    assert len(person.shown) == 1  # asked once, on the call with the fingerprint
    assert "demo-infer-0001" in person.shown[0] and f"MCP client {CLIENT}" in person.shown[0]
    assert "demo-train-0002" not in person.shown[0]  # only what this call carries out
    assert {(e["action"], e["node"]) for e in _mcp_events(sick_fleet)} >= {
        ("cordon", "demo-infer-0001")
    }


@pytest.mark.parametrize(
    ("action", "confirm"), [("decline", True), ("cancel", True), ("accept", False)]
)
def test_a_person_who_declines_the_elicitation_leaves_the_fleet_untouched(
    sick_fleet, action, confirm
):
    before = _lifecycles(sick_fleet)
    person = Person(action, confirm)
    got = talk(sick_fleet.workdir, "--allow-actions", body=_replace_twice, person=person)

    second = refusal(got["second"])
    assert "the person did not allow it" in second["refused"]
    assert len(person.shown) == 1
    assert not _mcp_events(sick_fleet)
    assert _lifecycles(sick_fleet) == before


def test_the_confirmation_code_reaches_only_the_servers_terminal_and_lets_the_call_act(
    sick_fleet,
):
    log = sick_fleet.workdir / "mcp-server.log"
    texts: list[str] = []

    async def body(s: ClientSession) -> dict[str, Any]:
        async def call(tool: str, args: dict[str, Any]) -> Any:
            result = await s.call_tool(tool, args)
            texts.extend(c.text for c in result.content)
            return result

        first = refusal(await call("replace", {"node": "demo-infer-0001"}))
        ask = {"node": "demo-infer-0001", "plan_fingerprint": first["plan_fingerprint"]}
        sent = refusal(await call("replace", ask))
        codes = CODE.findall(log.read_text())
        wrong = "0000-0000" if codes[-1] != "0000-0000" else "1111-1111"
        guessed = refusal(await call("replace", {**ask, "confirmation_code": wrong}))
        done = document(await call("replace", {**ask, "confirmation_code": codes[-1]}))
        reused = refusal(await call("replace", {**ask, "confirmation_code": codes[-1]}))
        return {"sent": sent, "guessed": guessed, "done": done, "reused": reused, "codes": codes}

    # A client that would accept any elicitation: with a code channel, only the code counts.
    person = Person("accept")
    got = talk(
        sick_fleet.workdir,
        "--allow-actions",
        "--confirm-code",
        "stderr",
        body=body,
        person=person,
    )

    assert len(got["codes"]) == 1 and not person.shown
    assert "written to the person on the navarch server's standard error" in got["sent"]["refused"]
    assert "demo-infer-0001" in log.read_text()  # the person reads what they allow
    code = got["codes"][0]
    for text in texts:
        assert code not in text and code.replace("-", "") not in text
    assert "not the live code" in got["guessed"]["refused"]
    assert got["reused"]["refused"]  # the state moved on: the code's plan is gone
    assert ("cordon", "demo-infer-0001", "ok") in {
        (o["action"], o["node"], o["kind"]) for o in got["done"]["outcomes"]
    }


def _talk_with_codes_in_process(
    workdir: Path, body: Callable[[ClientSession, io.StringIO], Awaitable[Any]]
) -> Any:
    """talk's in-process server as `navarch mcp fleet.yaml --allow-actions --confirm-code
    stderr` builds it, its standard error a buffer body(session, buffer) reads the codes
    from: for a test of what a code allows, where its own process would prove nothing."""
    from navarch.mcp.consent import CodeChannel
    from navarch.mcp.server import build_server

    terminal = io.StringIO()
    with contextlib.chdir(workdir):  # answers name "fleet.yaml" as the command's do
        with contextlib.redirect_stderr(terminal):  # the code channel opened as the server starts
            server = build_server("fleet.yaml", allow_actions=True, confirm_code=CodeChannel.STDERR)
        return anyio.run(_in_memory, server, lambda s: body(s, terminal), None)


def test_a_code_for_one_node_does_not_act_on_another(sick_fleet):
    async def body(s: ClientSession, terminal: io.StringIO) -> dict[str, Any]:
        plan = document(await s.call_tool("plan", {"replace": ["demo-infer-0001"]}))
        fp = plan["plan_fingerprint"]
        refusal(await s.call_tool("apply", {"plan_fingerprint": fp, "nodes": ["demo-infer-0001"]}))
        code = CODE.findall(terminal.getvalue())[-1]
        both = {"plan_fingerprint": fp, "nodes": ["demo-infer-0001", "demo-train-0002"]}
        return {"both": refusal(await s.call_tool("apply", {**both, "confirmation_code": code}))}

    before = _lifecycles(sick_fleet)
    got = _talk_with_codes_in_process(sick_fleet.workdir, body)
    assert "not the live code" in got["both"]["refused"]
    assert not _mcp_events(sick_fleet)
    assert _lifecycles(sick_fleet) == before


def test_allow_actions_help_says_consent_comes_from_a_person(navarch):
    text = " ".join(navarch.ok("mcp", "--help").out.split())
    assert "only with a person's consent" in text
    assert "is not consent" in text
    assert "--confirm-code" in text


def test_a_confirmation_code_is_good_once_for_its_call_within_its_time_and_three_tries():
    from navarch.mcp.consent import CODE_ATTEMPTS, CODE_TTL_S, ConfirmCodes, Request

    written: list[str] = []
    now = [0.0]
    codes = ConfirmCodes(written.append, clock=lambda: now[0])
    ask, other = Request("pf-1\x1freplace\x1fa", "plan"), Request("pf-1\x1freplace\x1fb", "p")

    def issued() -> str:
        return CODE.findall(written[-1])[-1]

    codes.issue(ask, "MCP client x")
    code = issued()
    assert not codes.redeem(other, code)  # bound to its call
    assert codes.redeem(ask, code.lower().replace("-", " "))  # as a person may type it
    assert not codes.redeem(ask, code)  # used up

    codes.issue(ask, "MCP client x")
    now[0] += CODE_TTL_S + 1
    assert not codes.redeem(ask, issued())  # expired

    codes.issue(ask, "MCP client x")
    code = issued()
    wrong = "0000-0000" if code != "0000-0000" else "1111-1111"
    for _ in range(CODE_ATTEMPTS):
        assert not codes.redeem(ask, wrong)
    assert not codes.redeem(ask, code)  # dropped after the tries


def test_confirm_code_without_acting_tools_is_refused_before_serving(navarch):
    run = navarch("mcp", "fleet.yaml", "--confirm-code", "stderr")
    assert run.code == 1
    assert "--confirm-code confirms acting tools, and this server has none" in run.err + run.out


def test_confirm_code_tty_without_a_controlling_terminal_refuses_to_start(navarch):
    import subprocess
    import sys

    from tests.support.mcp_client import REPO

    proc = subprocess.run(
        [sys.executable, "-m", "navarch", "mcp", "fleet.yaml", "--allow-actions"]
        + ["--confirm-code", "tty"],
        cwd=navarch.workdir,
        env={**navarch.env, "PYTHONPATH": str(REPO)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        start_new_session=True,  # no controlling terminal, as under a desktop client
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    assert "--confirm-code tty: this process has no controlling terminal" in proc.stderr
    assert "Traceback" not in proc.stderr

"""Who acted, end to end: every audit record names the person, CI job, MCP client or
scheduled run behind it (navarch.actor), `navarch history` shows it, and operator verbs
in the same second each keep their own audit chunk."""

from __future__ import annotations

import getpass
import json
import socket
from typing import Any

import pytest

from navarch.stores.file import FileStore

NOW = "2026-11-01T12:00:00Z"
AT_NOW = {"NAVARCH_NOW": NOW}
ME = f"{getpass.getuser()}@{socket.gethostname()}"


def _events(navarch, *args: str) -> list[dict[str, Any]]:
    return json.loads(navarch.ok("history", "fleet.yaml", "--json", *args, env=AT_NOW).out)[
        "events"
    ]


def _chunks(fleet_dir) -> list[str]:
    return [o.key for o in FileStore(fleet_dir / ".navarch" / "store").list("events/demo/")]


def test_three_operator_verbs_in_the_same_second_keep_every_record(navarch, fleet_dir) -> None:
    navarch.ok("apply", "fleet.yaml", "--auto-approve", env=AT_NOW)
    navarch.ok("local", "tick", "fleet.yaml", env=AT_NOW)
    before = set(_chunks(fleet_dir))
    navarch.ok("cordon", "fleet.yaml", "demo-train-0001", "--reason", "bad fan", env=AT_NOW)
    navarch.ok("cordon", "fleet.yaml", "demo-infer-0001", "--reason", "noisy", env=AT_NOW)
    navarch.ok("reboot", "fleet.yaml", "demo-train-0002", "--force", env=AT_NOW)

    assert len(set(_chunks(fleet_dir)) - before) == 3  # one chunk each, none overwritten
    # One second, one recorded time: their order within it is not kept, every record is.
    verbs = [(e["action"], e["node"]) for e in _events(navarch) if e["actor"] == "operator"]
    assert sorted(verbs) == [
        ("cordon", "demo-infer-0001"),
        ("cordon", "demo-train-0001"),
        ("reboot", "demo-train-0002"),
    ]
    text = navarch.ok("history", "fleet.yaml", env=AT_NOW).out
    assert f"cordon demo-infer-0001  ok  by {ME} (cordon)" in text, text
    assert f"reboot demo-train-0002  ok  by {ME} (reboot)" in text, text


def test_an_apply_in_github_actions_records_the_job_and_who_triggered_it(
    navarch, fleet_dir
) -> None:
    github = {
        "GITHUB_ACTIONS": "true",
        "GITHUB_ACTOR": "octocat",
        "GITHUB_RUN_ID": "4242",
        "GITHUB_REPOSITORY": "acme/gpu-fleet",
    }
    navarch.ok("apply", "fleet.yaml", "--auto-approve", env={**AT_NOW, **github})

    events = _events(navarch)
    assert len(events) == 5 and {e["action"] for e in events} == {"provision"}
    assert {json.dumps(e["by"], sort_keys=True) for e in events} == {
        json.dumps(
            {
                "kind": "ci",
                "name": "octocat",
                "host": "",
                "job": "GitHub Actions run 4242 of acme/gpu-fleet",
            },
            sort_keys=True,
        )
    }
    text = navarch.ok("history", "fleet.yaml", env=AT_NOW).out
    assert "by CI GitHub Actions run 4242 of acme/gpu-fleet (octocat), run " in text, text


def test_a_person_and_a_scheduled_run_are_told_apart(navarch, fleet_dir) -> None:
    navarch.ok("apply", "fleet.yaml", "--auto-approve", env=AT_NOW)
    navarch.ok("local", "tick", "fleet.yaml", env=AT_NOW)
    navarch.ok("local", "inject", "fleet.yaml", "demo-train-0002", "--xid", "79", env=AT_NOW)
    navarch.ok("local", "tick", "fleet.yaml", env=AT_NOW)
    navarch.ok("apply", "fleet.yaml", "--auto-approve", env={**AT_NOW, "NAVARCH_SCHEDULED": "1"})

    by = {(e["action"], e["node"]): e["by"] for e in _events(navarch)}
    assert by[("provision", "demo-train-0001")]["kind"] == "person"
    assert by[("provision", "demo-train-0001")]["name"] == getpass.getuser()
    assert by[("cordon", "demo-train-0002")]["kind"] == "scheduled"
    text = navarch.ok("history", "fleet.yaml", env=AT_NOW).out
    assert f"provision demo-train-0001  ok  by {ME}, run " in text, text
    assert f"cordon demo-train-0002  ok  by scheduled run on {socket.gethostname()}" in text


def test_three_mcp_verbs_in_the_same_second_keep_every_record_and_name_the_client(
    navarch, fleet_dir
) -> None:
    pytest.importorskip("mcp")
    from tests.support.mcp_client import CLIENT, Person, document, refusal, talk

    navarch.ok("apply", "fleet.yaml", "--auto-approve", env=AT_NOW)
    navarch.ok("local", "tick", "fleet.yaml", env=AT_NOW)
    nodes = ["demo-train-0001", "demo-train-0002", "demo-infer-0001"]

    async def body(s) -> list[dict[str, Any]]:
        done = []
        for n in nodes:  # each cordon on the plan its refusal showed, the person accepting
            ask = {"node": n, "reason": "ECC errors in jobs"}
            fp = refusal(await s.call_tool("cordon", ask))["plan_fingerprint"]
            done.append(document(await s.call_tool("cordon", {**ask, "plan_fingerprint": fp})))
        return done

    done = talk(fleet_dir, "--allow-actions", body=body, env=AT_NOW, person=Person("accept"))
    assert [d["cordoned"] for d in done] == [True, True, True]

    cordons = [e for e in _events(navarch) if e["actor"] == "mcp"]
    assert sorted(e["node"] for e in cordons) == sorted(nodes)
    assert len({e["run_id"] for e in cordons}) == 3
    for e in cordons:
        assert (e["client"], e["verb"]) == (CLIENT, "cordon")
        assert e["by"] == {"kind": "mcp", "name": CLIENT, "host": "", "job": ""}
    text = navarch.ok("history", "fleet.yaml", env=AT_NOW).out
    assert text.count(f"by MCP client {CLIENT} (cordon)") == 3, text


def test_status_json_says_who_cordoned_a_node_why_and_when(navarch, fleet_dir) -> None:
    navarch.ok("apply", "fleet.yaml", "--auto-approve", env=AT_NOW)
    navarch.ok("local", "tick", "fleet.yaml", env=AT_NOW)
    navarch.ok("cordon", "fleet.yaml", "demo-train-0001", "--reason", "bad fan", env=AT_NOW)
    status = json.loads(navarch.ok("status", "fleet.yaml", "--json", env=AT_NOW).out)
    nodes = {n["node"]: n for p in status["pools"] for n in p["nodes"]}
    cordon = nodes["demo-train-0001"]["cordon"]
    assert cordon["cause"] == "operator"
    assert cordon["at"] == NOW
    assert cordon["by"] == ME
    assert "bad fan" in cordon["note"]
    assert nodes["demo-train-0002"]["cordon"] is None

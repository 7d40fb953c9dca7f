"""`navarch mcp FLEET` as an assistant meets it: a subprocess spoken to by the `mcp` SDK's
own stdio client, on the embedded local fleet after an injected XID 79."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp import ClientSession  # noqa: E402

from navarch.mcp_server import ACTING_TOOLS, READ_ONLY_TOOLS  # noqa: E402
from tests.support.mcp_client import CLIENT, document, talk  # noqa: E402


@pytest.fixture
def sick_fleet(navarch):
    """The example fleet applied, reporting, with XID 79 on demo-train-0002's GPU 3."""
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    navarch.ok("local", "inject", "fleet.yaml", "demo-train-0002", "--xid", "79", "--gpu", "3")
    navarch.ok("local", "tick", "fleet.yaml")
    return navarch


def test_read_only_server_shows_the_xid79_cordon_and_offers_no_acting_tool(sick_fleet):
    async def body(s: ClientSession) -> dict[str, Any]:
        tools = {t.name: t for t in (await s.list_tools()).tools}
        resources = {str(r.uri) for r in (await s.list_resources()).resources}
        fleet_file = (await s.read_resource("navarch://fleet.yaml")).contents[0].text
        status = document(await s.call_tool("fleet_status", {}))
        plan = document(await s.call_tool("plan", {}))
        node = document(await s.call_tool("node_status", {"node": "demo-train-0002"}))
        refused = await s.call_tool("cordon", {"node": "demo-train-0001", "reason": "x"})
        unknown = await s.call_tool("node_status", {"node": "demo-train-0099"})
        return {
            "tools": tools,
            "resources": resources,
            "fleet_file": fleet_file,
            "status": status,
            "plan": plan,
            "node": node,
            "refused": refused,
            "unknown": unknown,
        }

    got = talk(sick_fleet.workdir, body=body)
    assert set(got["tools"]) == set(READ_ONLY_TOOLS)
    assert not set(ACTING_TOOLS) & set(got["tools"])
    assert all(t.annotations.read_only_hint for t in got["tools"].values())
    assert "report_age_s (seconds" in got["tools"]["fleet_status"].description
    assert got["resources"] == {"navarch://status", "navarch://fleet.yaml"}
    assert got["fleet_file"] == (sick_fleet.workdir / "fleet.yaml").read_text()

    sick = next(
        n for p in got["status"]["pools"] for n in p["nodes"] if n["node"] == "demo-train-0002"
    )
    assert (sick["lifecycle"], sick["health"]) == ("unhealthy", "unhealthy")
    cordons = [a for a in got["plan"]["actions"] if a["action"] == "cordon"]
    assert [a["node"] for a in cordons] == ["demo-train-0002"]
    assert cordons[0]["reason"].startswith("XID 79: GPU has fallen off the bus")
    assert got["plan"]["halts"] == []
    assert got["node"]["status"]["pool"] == "train"
    assert got["node"]["status"]["reason"] == cordons[0]["reason"]
    assert [e["action"] for e in got["node"]["history"]["events"]] == ["provision"]

    assert got["refused"].is_error
    assert "cordon" in got["refused"].content[0].text
    lifecycles = {n["node"]: n["lifecycle"] for n in sick_fleet.nodes("train")}
    assert lifecycles["demo-train-0001"] == "healthy"
    assert got["unknown"].is_error
    assert "demo-train-0099 is not a node of fleet demo" in got["unknown"].content[0].text


def test_cordon_over_mcp_is_audited_with_the_clients_name(sick_fleet):
    async def body(s: ClientSession) -> dict[str, Any]:
        tools = {t.name for t in (await s.list_tools()).tools}
        done = document(
            await s.call_tool("cordon", {"node": "demo-train-0001", "reason": "ECC errors in jobs"})
        )
        return {"tools": tools, "done": done}

    got = talk(sick_fleet.workdir, "--allow-actions", body=body)
    assert got["tools"] == set(READ_ONLY_TOOLS) | set(ACTING_TOOLS)
    assert got["done"]["cordoned"] is True

    history = json.loads(sick_fleet.ok("history", "fleet.yaml", "demo-train-0001", "--json").out)
    cordon = history["events"][-1]
    assert (cordon["action"], cordon["actor"], cordon["client"], cordon["verb"]) == (
        "cordon",
        "mcp",
        CLIENT,
        "cordon",
    )
    assert cordon["reason"] == "operator: ECC errors in jobs"
    text = sick_fleet.ok("history", "fleet.yaml", "demo-train-0001").out
    assert f"by MCP client {CLIENT} (cordon)" in text
    lifecycles = {n["node"]: n["lifecycle"] for n in sick_fleet.nodes("train")}
    assert lifecycles["demo-train-0001"] == "operator_cordoned"


def test_acting_tools_obey_the_safety_rules_and_the_lease(sick_fleet):
    # A node nobody cordoned is not navarch's to uncordon; a held lease stops every action.
    from datetime import UTC, datetime

    from navarch.fleet_file import load_fleet
    from navarch.reconcile.state import acquire_lock, force_unlock
    from navarch.stores import open_store

    async def uncordon(s: ClientSession) -> Any:
        return await s.call_tool("uncordon", {"node": "demo-train-0001"})

    refused = talk(sick_fleet.workdir, "--allow-actions", body=uncordon)
    assert refused.is_error
    assert "navarch did not cordon demo-train-0001" in refused.content[0].text

    spec = load_fleet(sick_fleet.workdir / "fleet.yaml")
    store = open_store(spec.store_url)
    lock = acquire_lock(
        store, spec.name, "apply (test)", 900, datetime.now(UTC), holder="ci@box pid 1"
    )

    async def act(s: ClientSession) -> list[Any]:
        return [
            await s.call_tool("cordon", {"node": "demo-train-0001", "reason": "x"}),
            await s.call_tool("apply", {}),
        ]

    locked = talk(sick_fleet.workdir, "--allow-actions", body=act)
    assert all(r.is_error and "ci@box pid 1" in r.content[0].text for r in locked)
    force_unlock(store, spec.name, lock.lock_id)
    lifecycles = {n["node"]: n["lifecycle"] for n in sick_fleet.nodes("train")}
    assert lifecycles == {
        "demo-train-0001": "healthy",
        "demo-train-0002": "unhealthy",
        "demo-train-0003": "healthy",
    }


def test_validate_fleet_names_the_line_of_a_candidates_problem(sick_fleet):
    good = (sick_fleet.workdir / "fleet.yaml").read_text()
    bad = good.replace("max: 5}", "max: many}", 1)
    assert bad != good

    async def body(s: ClientSession) -> list[dict[str, Any]]:
        return [
            document(await s.call_tool("validate_fleet", {"fleet_yaml": text}))
            for text in (good, bad)
        ]

    ok, wrong = talk(sick_fleet.workdir, body=body)
    assert ok["valid"] and ok["problems"] == [] and ok["nodes_at_target"] == 5
    assert not wrong["valid"]
    line = bad.splitlines().index(next(x for x in bad.splitlines() if "max: many" in x)) + 1
    assert wrong["problems"][0].startswith(f"fleet.yaml:{line}: pools.train.nodes.max")
    assert not list(sick_fleet.workdir.glob(".navarch-candidate-*"))


def test_docs_list_every_tool_and_a_client_config_that_starts_the_server():
    import re

    from tests.support.mcp_client import REPO

    text = (REPO / "docs" / "mcp.md").read_text()
    documented = set(re.findall(r"^\| `(\w+)", text, re.M))
    assert documented == set(READ_ONLY_TOOLS) | set(ACTING_TOOLS)
    config = json.loads(re.search(r"```json\n(.*?)```", text, re.S)[1])
    server = config["mcpServers"]["navarch-prod"]
    assert server["command"] == "navarch" and server["args"][0] == "mcp"


def test_apply_and_replace_over_mcp_act_like_the_cli_and_are_audited(sick_fleet):
    async def body(s: ClientSession) -> list[dict[str, Any]]:
        return [
            document(await s.call_tool("apply", {})),
            document(await s.call_tool("replace", {"node": "demo-infer-0001"})),
        ]

    applied, replaced = talk(sick_fleet.workdir, "--allow-actions", body=body)
    assert applied["applied"] and not applied["halted"]
    assert ("cordon", "demo-train-0002", "ok") in {
        (o["action"], o["node"], o["kind"]) for o in applied["outcomes"]
    }
    assert ("cordon", "demo-infer-0001", "ok") in {
        (o["action"], o["node"], o["kind"]) for o in replaced["outcomes"]
    }

    events = json.loads(sick_fleet.ok("history", "fleet.yaml", "--json").out)["events"]
    by_mcp = {
        (e["action"], e["node"], e["verb"])
        for e in events
        if e["actor"] == "mcp" and e["client"] == CLIENT
    }
    assert ("cordon", "demo-train-0002", "apply") in by_mcp
    assert ("cordon", "demo-infer-0001", "replace") in by_mcp

"""One answer per question: the CLI's --json, navarch.api and the MCP tools return the same
document for the same fleet at the same moment (NAVARCH_NOW fixes it for all three)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from navarch import api
from navarch.fleet.schemas import validator_for
from tests.support.mcp_client import document, needs_mcp, talk

pytestmark = needs_mcp


@pytest.fixture
def moment(navarch) -> datetime:
    """The example fleet after an XID 79 on demo-train-0002 and a cordon, a minute later."""
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    navarch.ok("local", "inject", "fleet.yaml", "demo-train-0002", "--xid", "79", "--gpu", "3")
    navarch.ok("local", "tick", "fleet.yaml")
    navarch.ok("cordon", "fleet.yaml", "demo-infer-0001", "--reason", "flaky NCCL")
    return (datetime.now(UTC) + timedelta(minutes=1)).replace(microsecond=0)


def test_cli_api_and_mcp_return_the_same_documents(navarch, moment):
    env = {"NAVARCH_NOW": moment.strftime("%Y-%m-%dT%H:%M:%SZ")}
    cli = {
        "status": json.loads(navarch.ok("status", "fleet.yaml", "--json", env=env).out),
        "plan": json.loads(navarch.ok("plan", "fleet.yaml", "--json", env=env).out),
        "history": json.loads(navarch.ok("history", "fleet.yaml", "--json", env=env).out),
    }
    fleet = api.load_fleet(navarch.workdir / "fleet.yaml")
    py = {
        "status": api.status(fleet, now=moment).to_json(),
        "plan": api.plan(fleet, now=moment).to_json(),
        "history": api.history(fleet, now=moment).to_json(),
    }

    async def body(s: Any) -> dict[str, Any]:
        return {
            "status": document(await s.call_tool("fleet_status", {})),
            "plan": document(await s.call_tool("plan", {})),
            "history": document(await s.call_tool("recent_events", {})),
        }

    mcp = talk(navarch.workdir, body=body, env=env)
    # The MCP answers add a page of the status, the plan's fingerprint (what the acting
    # tools are bound to) and the names of the fields nodes wrote; the rest is the same.
    assert mcp["status"].pop("page") == {"matched": 5, "returned": 5, "limit": 100, "next": None}
    assert mcp["plan"].pop("plan_fingerprint").startswith("pf-")
    for doc in mcp.values():
        assert doc.pop("untrusted")["fields"]

    for question, schema in (
        ("status", "status.schema.json"),
        ("plan", "plan.schema.json"),
        ("history", "history.schema.json"),
    ):
        validator_for(schema).validate(cli[question])
        assert py[question] == cli[question], question
        assert mcp[question] == cli[question], question
    assert [a["node"] for a in cli["plan"]["actions"] if a["action"] == "cordon"] == [
        "demo-train-0002"
    ]
    assert [e["verb"] for e in cli["history"]["events"] if e["actor"] == "operator"] == ["cordon"]

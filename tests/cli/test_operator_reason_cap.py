"""An operator's reason is a sentence or two, not a pasted log: `cordon --reason` (CLI and
the MCP cordon tool) refuses one over 1,024 characters with a clear error and acts on
nothing, so plans and PR comments quoting it stay small."""

from __future__ import annotations

from typing import Any

import pytest

LONG = "ECC errors in jobs, " * 60 + "see the ticket"  # 1,214 characters


@pytest.fixture
def applied(navarch):
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    return navarch


def _lifecycle(navarch, node: str) -> str:
    return {n["node"]: n["lifecycle"] for n in navarch.nodes("train")}[node]


def test_an_over_long_cordon_reason_is_refused_and_nothing_is_cordoned(applied):
    before = _lifecycle(applied, "demo-train-0001")
    run = applied("cordon", "fleet.yaml", "demo-train-0001", "--reason", LONG)
    assert run.code == 1, run.out + run.err
    assert "the reason is 1,214 characters, more than 1,024" in run.err
    assert "Traceback" not in run.err
    assert _lifecycle(applied, "demo-train-0001") == before != "operator_cordoned"
    # A reason at the cap is still taken.
    applied.ok("cordon", "fleet.yaml", "demo-train-0001", "--reason", "x" * 1024)
    assert _lifecycle(applied, "demo-train-0001") == "operator_cordoned"


def test_an_over_long_reason_over_mcp_is_refused(applied):
    pytest.importorskip("mcp")
    from tests.support.mcp_client import talk

    async def body(s: Any) -> Any:
        return await s.call_tool("cordon", {"node": "demo-train-0001", "reason": LONG})

    refused = talk(applied.workdir, "--allow-actions", body=body)
    assert refused.is_error
    assert "more than 1,024" in refused.content[0].text
    assert _lifecycle(applied, "demo-train-0001") != "operator_cordoned"

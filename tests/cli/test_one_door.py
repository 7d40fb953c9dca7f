"""One front door: every CLI verb is a rendering of its navarch.api call.

Two copies of the example fleet walk the same story, one through `navarch VERB` (a
process, as an operator runs it), the other through `api.VERB(...)`; after each verb both
fleets are in the same state with the same audit trail (node names are deterministic;
instance ids and times are not, so they are left out). The reading verbs are also asked
both ways of the same fleet at one moment and must return the same document.
"""

from __future__ import annotations

import ast
import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from navarch import api
from navarch.actor import Actor, ActorKind
from navarch.errors import NavarchError
from tests.cli.conftest import REPO, Navarch

ME = Actor(ActorKind.PERSON, name="alice", host="laptop")


def _state(nav: Navarch) -> dict[str, Any]:
    """What a fleet is now, without what differs between two clouds: each node's lifecycle
    and health, the pause, and the audit log's (verb, action, node, ok, actor) sequence."""
    status = nav.status()
    nodes = {n["node"]: (n["lifecycle"], n["health"]) for p in status["pools"] for n in p["nodes"]}
    history = json.loads(nav.ok("history", "fleet.yaml", "--json", "--since", "1d").out)
    events = sorted(
        (e.get("verb") or "apply", e["action"], e["node"] or "", e["ok"], e["actor"])
        for e in history["events"]
    )
    return {"nodes": nodes, "paused": status["paused"] is not None, "events": events}


@pytest.fixture
def two(tmp_path: Path) -> tuple[Navarch, Navarch]:
    """Two directories holding the example fleet: one for the CLI, one for the api."""
    out = []
    for name in ("cli", "api"):
        (tmp_path / name).mkdir()
        shutil.copy(REPO / "fleet.example.yaml", tmp_path / name / "fleet.yaml")
        out.append(Navarch(tmp_path / name))
    return out[0], out[1]


def _same_documents(nav: Navarch, moment: datetime) -> None:
    """plan, status and history of one fleet at one moment: CLI --json == api to_json()."""
    env = {"NAVARCH_NOW": moment.strftime("%Y-%m-%dT%H:%M:%SZ")}
    fleet = api.load_fleet(nav.workdir / "fleet.yaml")
    for verb, doc in (
        ("plan", api.plan(fleet, now=moment).to_json()),
        ("status", api.status(fleet, now=moment).to_json()),
        ("history", api.history(fleet, now=moment).to_json()),
    ):
        assert json.loads(nav.ok(verb, "fleet.yaml", "--json", env=env).out) == doc, verb


def test_every_cli_verb_and_its_api_call_leave_the_same_fleet(two):
    cli, py = two
    fleet = py.workdir / "fleet.yaml"

    done = cli.ok("validate", "fleet.yaml").out
    checked = api.validate(fleet)
    assert checked.ok
    assert f"Fleet {checked.fleet}: 2 pools, {checked.nodes_at_target} nodes" in done

    moment = (datetime.now(UTC) + timedelta(minutes=1)).replace(microsecond=0)
    _same_documents(cli, moment)
    for nav in two:  # a read writes nothing, not even the local secret file
        assert not (nav.workdir / ".navarch").exists()

    cli.ok("apply", "fleet.yaml", "--auto-approve")
    assert not api.apply(fleet, api.ApplyOptions(auto_approve=True, actor=ME)).failed
    for nav in two:
        nav.ok("local", "tick", "fleet.yaml")
    assert _state(cli) == _state(py)

    steps = (
        (
            ("cordon", "demo-infer-0001", "--reason", "flaky NCCL"),
            lambda: api.cordon(fleet, "demo-infer-0001", "flaky NCCL", actor=ME),
        ),
        (("uncordon", "demo-infer-0001"), lambda: api.uncordon(fleet, "demo-infer-0001", actor=ME)),
        (("reboot", "demo-train-0001"), lambda: api.reboot(fleet, "demo-train-0001", actor=ME)),
        (
            ("pause", "--reason", "driver rollout"),
            lambda: api.pause(fleet, "driver rollout", actor=ME),
        ),
        (("resume",), lambda: api.resume(fleet, actor=ME)),
    )
    for argv, call in steps:
        verb, rest = argv[0], argv[1:]
        printed = cli.ok(verb, "fleet.yaml", *rest).out
        result = call()
        doc = result.to_json()
        if "detail" in doc:  # the CLI prints the api's one line of what was done
            assert doc["node"] in printed and doc["verb"] in printed, verb
        else:
            assert doc["message"].split(" by ")[0] in printed, verb
        assert _state(cli) == _state(py), verb
    _same_documents(cli, moment + timedelta(minutes=1))

    # force-unlock: the same refusal both ways when there is no such lock
    refused = cli("force-unlock", "fleet.yaml", "no-such-lock")
    assert refused.code == 1
    with pytest.raises(NavarchError) as caught:
        api.force_unlock(fleet, "no-such-lock")
    assert f"Error: {caught.value}" in refused.err

    cli.ok("destroy", "fleet.yaml", "--force", "--auto-approve")
    gone = api.destroy(fleet, force=True, auto_approve=True, actor=ME)
    assert gone.done and gone.to_json()["left"] == []
    assert _state(cli) == _state(py)
    assert _state(py)["nodes"] == {}


def test_plan_and_status_write_no_local_secret_file_and_an_acting_verb_creates_it(navarch):
    secret = navarch.workdir / ".navarch" / "fleet.secret"
    for verb in ("plan", "status"):
        navarch.ok(verb, "fleet.yaml")
    assert api.plan(navarch.workdir / "fleet.yaml").to_json()["summary"]["provision"] == 5
    api.status(navarch.workdir / "fleet.yaml")
    assert not secret.exists()
    navarch.ok("pause", "fleet.yaml", "--reason", "first act")
    assert secret.stat().st_mode & 0o777 == 0o600


def test_force_unlock_removes_the_lock_the_same_way_from_the_cli_and_the_api(two):
    from navarch.fleet.load import load_fleet
    from navarch.reconcile.state import acquire_lock
    from navarch.stores import open_store

    printed = []
    for nav in two:
        spec = load_fleet(nav.workdir / "fleet.yaml")
        store = open_store(spec.store_url, base_dir=spec.base_dir)
        lock = acquire_lock(
            store, spec.name, "apply (test)", 900, datetime.now(UTC), holder="ci@box"
        )
        if nav is two[0]:
            printed.append(nav.ok("force-unlock", "fleet.yaml", lock.lock_id).out)
        else:
            done = api.force_unlock(nav.workdir / "fleet.yaml", lock.lock_id)
            assert done.to_json() == {
                "lock_id": lock.lock_id,
                "holder": "ci@box",
                "command": "apply (test)",
            }
        nav.ok("apply", "fleet.yaml", "--auto-approve")  # the lease is free again
    assert "held by ci@box for 'apply (test)'" in printed[0]


#: The front doors: they parse and render; every verb goes through navarch.api.
FRONT_DOORS = [
    *sorted((REPO / "navarch" / "cli").glob("*.py")),
    REPO / "navarch" / "mcp" / "server.py",
    REPO / "navarch" / "mcp" / "confirm.py",
    REPO / "navarch" / "mcp" / "consent.py",
    REPO / "navarch" / "mcp" / "views.py",
]


@pytest.mark.parametrize("path", FRONT_DOORS, ids=lambda p: p.name)
def test_no_front_door_reaches_past_navarch_api(path):
    """Neither the CLI nor the MCP server imports the reconciler or the planner, even
    lazily or for type checking."""
    wrong = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        wrong += [
            f"line {node.lineno}: {n}"
            for n in names
            if n.startswith(("navarch.reconcile", "navarch.planner"))
            or n in ("navarch.reconcile", "navarch.planner")
        ]
        if isinstance(node, ast.ImportFrom) and node.module == "navarch":
            wrong += [
                f"line {node.lineno}: navarch.{a.name}"
                for a in node.names
                if a.name in ("reconcile", "planner")
            ]
    assert not wrong, f"{path.relative_to(REPO)} reaches past navarch.api: {wrong}"

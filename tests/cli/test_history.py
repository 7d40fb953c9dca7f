"""`navarch history` end to end on the embedded local provider: the story of a node told
from the audit log, in order, with reasons, who asked, and the report behind each action."""

from __future__ import annotations

import getpass
import json
import re
import socket
from pathlib import Path
from typing import Any

import jsonschema
import yaml

REPO = Path(__file__).resolve().parents[2]
NODE = "demo-train-0002"
ME = f"{getpass.getuser()}@{socket.gethostname()}"


def _edit_health(fleet_dir: Path, **health: Any) -> None:
    path = fleet_dir / "fleet.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["pools"]["train"]["health"].update(health)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def _cycle(navarch) -> str:
    navarch.ok("local", "tick", "fleet.yaml")
    return navarch.ok("apply", "fleet.yaml", "--auto-approve").out


def _validate(doc: dict[str, Any]) -> None:
    schema = json.loads((REPO / "schemas" / "history.schema.json").read_text())
    jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).validate(doc)


def test_history_tells_xid79_reboot_return_then_replace_in_order(navarch, fleet_dir) -> None:
    navarch.env["NAVARCH_SCHEDULED"] = "1"  # every run here is the timer's
    _edit_health(fleet_dir, replacement="after-terminate", return_after=1)
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    navarch.ok("local", "inject", "fleet.yaml", NODE, "--xid", "79")
    outs = [_cycle(navarch) for _ in range(3)]  # cordon+drain, reboot, uncordon
    assert f"~ uncordon {NODE}" in outs[2], outs
    navarch.ok("local", "inject", "fleet.yaml", NODE, "--xid", "79")
    outs = [_cycle(navarch) for _ in range(2)]  # cordon+drain, terminate
    assert f"- terminate {NODE}" in outs[1], outs

    text = navarch.ok("history", "fleet.yaml", NODE).out
    story = re.findall(rf"^\S+  (\w+) {NODE}  ok  by scheduled run", text, re.M)
    assert story == [
        "provision",
        "cordon",
        "drain",
        "reboot",
        "uncordon",
        "cordon",
        "drain",
        "terminate",
    ], text
    assert "# because XID 79: GPU has fallen off the bus" in text
    assert "xid:79, first occurrence; remediation: reboot then replace" in text
    assert "xid:79 again within 1d after reboot" in text
    assert re.search(r"# report #\d+ unhealthy, fault xid:79(@gpu\d+)?, rung reboot", text), text
    assert re.search(
        r"# because healthy for 1 reports? after reboot\n    # report #\d+ healthy", text
    ), text

    doc = json.loads(navarch.ok("history", "fleet.yaml", NODE, "--json").out)
    _validate(doc)
    actions = [(e["action"], e["node"]) for e in doc["events"]]
    assert actions[-1] == ("terminate", NODE)
    assert {e["actor"] for e in doc["events"]} == {"scheduled"}
    reboot = next(e for e in doc["events"] if e["action"] == "reboot")
    assert reboot["fault"].startswith("xid:79") and reboot["rung"] == "reboot"
    assert reboot["report"]["status"] == "unhealthy"
    times = [e["time"] for e in doc["events"]]
    assert times == sorted(times)


def test_history_names_who_asked_replace_and_operator_verbs(navarch, fleet_dir) -> None:
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    navarch.ok("cordon", "fleet.yaml", "demo-infer-0001", "--reason", "bad fan")
    navarch.ok("uncordon", "fleet.yaml", "demo-infer-0001")
    navarch.ok("apply", "fleet.yaml", "--auto-approve", "--replace", NODE)

    doc = json.loads(navarch.ok("history", "fleet.yaml", "--json").out)
    _validate(doc)
    who = {(e["action"], e["node"]): (e["actor"], e["verb"]) for e in doc["events"]}
    assert who[("cordon", "demo-infer-0001")] == ("operator", "cordon")
    assert who[("uncordon", "demo-infer-0001")] == ("operator", "uncordon")
    assert who[("cordon", NODE)] == ("replace", None)
    replacement = next(e for e in doc["events"] if e["replaces"] == NODE)
    assert replacement["action"] == "provision" and replacement["actor"] == "replace"

    text = navarch.ok("history", "fleet.yaml", NODE).out
    assert f"cordon {NODE}  ok  by {ME} (apply --replace)" in text, text
    assert "# because replacement requested (--replace)" in text
    assert f"Now: {NODE} (train, " in text and "draining since" in text
    status = navarch.ok("status", "fleet.yaml").out
    assert (
        f"Why a node is not serving, and what navarch did to it: navarch history fleet.yaml {NODE}"
        in status
    ), status
    text = navarch.ok("history", NODE).out  # fleet file ./fleet.yaml; one positional: a node
    assert text.startswith(f"History of node {NODE} (fleet demo)")
    assert f"cordon {NODE}  ok  by {ME} (apply --replace)" in text
    text = navarch.ok("history", "fleet.yaml", "demo-infer-0001").out
    assert f"cordon demo-infer-0001  ok  by {ME} (cordon)" in text
    assert "# because operator: bad fan" in text


def test_history_since_reads_only_the_days_it_needs(navarch) -> None:
    navarch.ok("apply", "fleet.yaml", "--auto-approve", env={"NAVARCH_NOW": "2026-03-01T10:00:00Z"})
    later = {"NAVARCH_NOW": "2026-03-09T10:00:00Z"}
    doc = json.loads(navarch.ok("history", "fleet.yaml", "--json", env=later).out)
    assert doc["events"] == [] and doc["read"]["chunks"] == 0
    assert doc["read"]["days"] == [
        "events/demo/2026/03/07/",
        "events/demo/2026/03/08/",
        "events/demo/2026/03/09/",
    ]
    assert "no action recorded in this range" in navarch.ok("history", "fleet.yaml", env=later).out
    doc = json.loads(navarch.ok("history", "fleet.yaml", "--json", "--since", "9d", env=later).out)
    assert len(doc["events"]) == 5 and {e["action"] for e in doc["events"]} == {"provision"}
    doc = json.loads(
        navarch.ok(
            "history", "fleet.yaml", "--json", "--since", "2026-03-01T09:00:00Z", env=later
        ).out
    )
    assert len(doc["events"]) == 5


def test_history_rejects_a_since_it_cannot_read(navarch) -> None:
    run = navarch("history", "fleet.yaml", "--since", "yesterday")
    assert run.code == 1
    assert "--since 'yesterday' is neither a duration nor an RFC 3339 time" in run.err


def _now_line(text: str, node: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"Now: {node} "))


def test_history_and_status_agree_on_an_unhealthy_and_an_operator_cordoned_node(
    navarch, fleet_dir
) -> None:
    """history's "Now" line says what `navarch status` says of a node (one observed
    state), never "serving" for a node status lists unhealthy or operator-cordoned."""
    _edit_health(fleet_dir, unhealthy_after=3)  # one bad report: unhealthy for status only
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    navarch.ok("cordon", "fleet.yaml", "demo-train-0001", "--reason", "fan noise")
    navarch.ok("local", "inject", "fleet.yaml", NODE, "--xid", "79")
    navarch.ok("local", "tick", "fleet.yaml")
    status = json.loads(navarch.ok("status", "fleet.yaml", "--json").out)
    said = {n["node"]: n["lifecycle"] for p in status["pools"] for n in p["nodes"]}
    assert said[NODE] == "unhealthy" and said["demo-train-0001"] == "operator_cordoned", said
    for node in (NODE, "demo-train-0001"):
        line = _now_line(navarch.ok("history", "fleet.yaml", node).out, node)
        assert f") {said[node]}" in line and "serving" not in line, line
        doc = json.loads(navarch.ok("history", "fleet.yaml", node, "--json").out)
        _validate(doc)
        assert doc["nodes"][0]["lifecycle"] == said[node]
    fleet_wide = navarch.ok("history", "fleet.yaml").out
    assert f") {said[NODE]}" in _now_line(fleet_wide, NODE), fleet_wide

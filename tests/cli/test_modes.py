"""A pool's mode end to end on the local loop (fleet.example.yaml on the embedded local
provider): XID 79 injected on one node, the agents tick, apply runs. In observe nothing is
cordoned and the plan, the notification and `navarch report` say what would have been;
in cordon the node is cordoned and drained, never terminated; in full it is replaced."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import yaml

REPO = Path(__file__).resolve().parents[2]
NODE = "demo-train-0002"


def _set(fleet_dir: Path, mode: str) -> None:
    """The train pool in `mode`, its ladder straight to replace, events to events.jsonl."""
    path = fleet_dir / "fleet.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["pools"]["train"]["mode"] = mode
    doc["pools"]["train"]["health"]["remediation"] = ["replace"]
    doc["notify"] = [{"type": "log", "path": "events.jsonl"}]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def _events(fleet_dir: Path, kind: str) -> list[dict[str, Any]]:
    log = fleet_dir / "events.jsonl"
    lines = log.read_text().splitlines() if log.exists() else []
    return [e for e in map(json.loads, lines) if e["kind"] == kind]


def _cycle(navarch) -> str:
    navarch.ok("local", "tick", "fleet.yaml")
    return navarch.ok("apply", "fleet.yaml", "--auto-approve").out


def _inject(navarch, fleet_dir: Path, mode: str) -> None:
    """The fleet launched in full (an observe pool launches nothing: the nodes it watches
    already run), then the train pool in `mode` and XID 79 on NODE."""
    _set(fleet_dir, "full")
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    navarch.ok("local", "tick", "fleet.yaml")
    _set(fleet_dir, mode)
    navarch.ok("local", "inject", "fleet.yaml", NODE, "--xid", "79")


def _validate(doc: dict[str, Any], schema: str) -> None:
    s = json.loads((REPO / "schemas" / schema).read_text())
    jsonschema.Draft202012Validator(s, format_checker=jsonschema.FormatChecker()).validate(doc)


def _node(navarch) -> dict[str, Any]:
    return next(n for n in navarch.nodes("train") if n["node"] == NODE)


def test_observe_cordons_nothing_and_plan_notification_and_report_say_would_cordon(
    navarch, fleet_dir
) -> None:
    _inject(navarch, fleet_dir, "observe")
    navarch.ok("local", "tick", "fleet.yaml")
    planned = navarch.ok("plan", "fleet.yaml").out
    assert f"? would cordon {NODE} (" in planned and "[mode observe]" in planned, planned
    assert f"? would replace {NODE} with demo-train-0004" in planned, planned
    doc = json.loads(navarch.ok("plan", "fleet.yaml", "--json").out)
    _validate(doc, "plan.schema.json")
    assert doc["actions"] == []
    assert (doc["would"][0]["headline"], doc["would"][0]["mode"]) == (
        f"would cordon {NODE}",
        "observe",
    )
    out = navarch.ok("apply", "fleet.yaml", "--auto-approve").out
    assert "would cordon" in out and "succeeded" not in out, out
    assert _node(navarch)["lifecycle"] == "unhealthy"  # not cordoned
    assert _node(navarch)["would"][0] == {"action": f"would cordon {NODE}", "mode": "observe"}
    [would] = [e for e in _events(fleet_dir, "would_act") if e["details"]["action"] == "cordon"]
    assert would["message"].startswith(f"would cordon {NODE} (pool mode observe): XID 79")
    assert not _events(fleet_dir, "node_cordoned")

    report = navarch.ok("report", "fleet.yaml", "--since", "7d").out
    assert "gpu_lost (1 node):" in report, report
    assert "would cordon (mode observe): first " in report
    assert "now: unhealthy (XID 79" in report
    doc = json.loads(navarch.ok("report", "fleet.yaml", "--json").out)
    _validate(doc, "report.schema.json")
    [gpu_lost] = [c for c in doc["classes"] if c["class"] == "gpu_lost"]
    [story] = gpu_lost["nodes"]
    assert story["node"] == NODE and story["faults"][0].startswith("xid:79")
    assert [(w["action"], w["mode"]) for w in story["would"]] == [
        ("cordon", "observe"),
        ("drain", "observe"),
        ("provision", "observe"),  # its surge replacement, told in its story
    ]
    assert story["done"] == [] and story["now"]["instance_state"] == "running"
    assert doc["modes"]["train"] == "observe"


def test_cordon_mode_cordons_and_drains_but_never_terminates_then_full_replaces(
    navarch, fleet_dir
) -> None:
    _inject(navarch, fleet_dir, "cordon")
    first = _cycle(navarch)
    assert f"~ cordon {NODE}" in first and f"~ drain {NODE}" in first, first
    assert f"? would replace {NODE} with " in first, first  # the surge launch is held
    instance = _node(navarch)["instance_id"]
    later = [_cycle(navarch) for _ in range(2)]
    assert all(f"- terminate {NODE}" not in o for o in later), later
    assert f"? would terminate {NODE}" in later[-1], later
    assert _node(navarch)["instance_id"] == instance
    assert _node(navarch)["lifecycle"] in ("draining", "cordoned")
    assert len(navarch.nodes("train")) == 3  # nothing launched

    _set(fleet_dir, "full")
    outs = [_cycle(navarch) for _ in range(3)]
    assert any(f"- terminate {NODE}" in o for o in outs), outs
    assert any("+ provision demo-train-0004" in o for o in outs), outs
    assert NODE not in {n["node"] for n in navarch.nodes("train")}
    report = navarch.ok("report", "fleet.yaml").out
    assert "would terminate (mode cordon)" in report and "did terminate ok" in report, report

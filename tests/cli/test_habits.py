"""Habits of the tools operators know, on the embedded local provider: `validate --json`
for scripts, TAB completion of the fleet's node and pool names, `history` naming the
fleet once, and an operator's cordon told to the notification sinks like navarch's own."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

from navarch.cli import build_parser
from tests.cli.conftest import Navarch


def _edit(fleet_dir: Path, change) -> None:  # type: ignore[no-untyped-def]
    path = fleet_dir / "fleet.yaml"
    doc = yaml.safe_load(path.read_text())
    change(doc)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def test_validate_json_gives_ok_and_each_error_with_file_line_and_key_path(
    navarch: Navarch, fleet_dir: Path
) -> None:
    good = navarch("validate", "fleet.yaml", "--json")
    assert good.code == 0 and json.loads(good.out)["ok"] is True
    assert json.loads(good.out)["errors"] == []

    def break_two(d) -> None:  # type: ignore[no-untyped-def]
        d["pools"]["train"]["capacity"] = "cheap"
        d["colour"] = "blue"

    _edit(fleet_dir, break_two)
    lines = (fleet_dir / "fleet.yaml").read_text().splitlines()
    bad = navarch("validate", "fleet.yaml", "--json")
    assert bad.code == 1 and bad.err == ""
    doc = json.loads(bad.out)
    assert doc["ok"] is False
    by_key = {e["key_path"]: e for e in doc["errors"]}
    assert set(by_key) == {"pools.train.capacity", "colour"}
    capacity = by_key["pools.train.capacity"]
    assert capacity["file"] == "fleet.yaml"
    assert lines[capacity["line"] - 1].strip() == "capacity: cheap"
    assert "unknown key 'colour'" in by_key["colour"]["message"]


def _complete(navarch: Navarch, line: str, tmp_path: Path) -> list[str]:
    answer = tmp_path / "completions"
    run = navarch(
        subprocess=True,
        env={
            "_ARGCOMPLETE": "1",
            "COMP_LINE": line,
            "COMP_POINT": str(len(line)),
            "_ARGCOMPLETE_SHELL": "bash",
            "_ARGCOMPLETE_STDOUT_FILENAME": str(answer),
        },
    )
    assert run.code == 0, run.err
    return sorted(answer.read_text().split())


def test_tab_completes_node_and_pool_names_from_the_last_state(
    navarch: Navarch, fleet_dir: Path
) -> None:
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    nodes = _complete(navarch, "navarch cordon fleet.yaml demo-tr", fleet_dir)
    assert nodes == ["demo-train-0001", "demo-train-0002", "demo-train-0003"]
    # --pool's completer, as the parser holds it (one process per completion is slow).
    plan = _subparser("plan")
    (pool,) = [a for a in plan._actions if "--pool" in a.option_strings]
    args = plan.parse_args([str(fleet_dir / "fleet.yaml")])
    assert pool.completer("in", parsed_args=args) == ["infer"]  # type: ignore[attr-defined]


def _subparser(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found: argparse.ArgumentParser = sub.choices[name]
    return found


def test_fleet_history_names_the_fleet_once(navarch: Navarch) -> None:
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    header = navarch.ok("history", "fleet.yaml").out.splitlines()[0]
    assert header.startswith("History of fleet demo, ")
    assert header.count("demo") == 1
    node = navarch.ok("history", "fleet.yaml", "demo-train-0001").out.splitlines()[0]
    assert node.startswith("History of node demo-train-0001 (fleet demo), ")


def test_an_operators_cordon_is_notified_with_who_why_and_when(
    navarch: Navarch, fleet_dir: Path
) -> None:
    _edit(fleet_dir, lambda d: d.update(notify=[{"type": "log", "path": "events.jsonl"}]))
    navarch.ok("apply", "fleet.yaml", "--auto-approve")
    (fleet_dir / "events.jsonl").unlink(missing_ok=True)  # the launches' events
    navarch.ok(
        "cordon",
        "fleet.yaml",
        "demo-train-0002",
        "--reason",
        "fan noise, INC-7",
        env={"NAVARCH_NOW": "2026-05-01T12:00:00Z"},
    )
    (event,) = [json.loads(x) for x in (fleet_dir / "events.jsonl").read_text().splitlines()]
    assert (event["kind"], event["node"], event["pool"]) == (
        "node_cordoned",
        "demo-train-0002",
        "train",
    )
    assert "fan noise, INC-7" in event["message"] and event["details"]["operator"] == "true"
    assert event["details"]["by"] and event["time"] == "2026-05-01T12:00:00Z"

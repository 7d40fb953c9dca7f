"""State and fleet files written while the feature was called burn-in still load: its old
codes read as today's acceptance codes (navarch.report.compat.renamed_value)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from navarch.fleet.load import load_fleet
from navarch.fleet.spec import SinkSpec
from navarch.notify.events import SEVERITY, Event, EventKind
from navarch.notify.sinks import accepts
from navarch.planner.model import ActionReason, HaltRule, Lifecycle, Memory, NodeMemory
from navarch.reconcile.codec import memory_from_json, memory_to_json
from navarch.report.health import FaultKey

ROOT = Path(__file__).parent.parent.parent


def _entry_doc(**fields: object) -> dict:
    nm = NodeMemory("demo-train-0001", "train", "i-1")
    doc = json.loads(json.dumps(memory_to_json(Memory("demo").with_node(nm))))
    doc["nodes"]["demo-train-0001"].update(fields)
    return doc


def test_a_cordon_recorded_under_the_old_word_loads_as_an_acceptance_cordon():
    at = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
    doc = _entry_doc(cordon={"cause": "burn_in", "at": at.isoformat(), "idle": True})
    node = memory_from_json(doc).node("demo-train-0001")
    assert node is not None and node.cordon is not None
    assert node.cordon.cause is ActionReason.ACCEPTANCE and node.cordon.acceptance


def test_the_old_flag_of_a_state_from_before_the_cordon_record_loads_as_an_acceptance_cordon():
    node = memory_from_json(_entry_doc(burn_in_cordon=True)).node("demo-train-0001")
    assert node is not None and node.cordon is not None
    assert node.cordon.cause is ActionReason.ACCEPTANCE


def test_old_codes_of_reasons_halts_lifecycles_and_faults_read_as_todays():
    assert ActionReason("burn_in_failed") is ActionReason.ACCEPTANCE_FAILED
    assert ActionReason("burn_in_timeout") is ActionReason.ACCEPTANCE_TIMEOUT
    assert HaltRule("burn_in_held") is HaltRule.ACCEPTANCE_HELD
    assert Lifecycle("burn_in") is Lifecycle.ACCEPTANCE
    assert FaultKey.parse("burn_in") == FaultKey("acceptance")
    # Anything else is still refused or kept as it was.
    assert FaultKey.parse("xid:79@gpu3") == FaultKey("xid:79", 3)
    try:
        ActionReason("burn_out")
    except ValueError:
        pass
    else:
        raise AssertionError("an unknown code must not load")


def test_a_notify_sink_listing_the_old_event_name_loads_and_gets_the_held_events(tmp_path):
    text = (ROOT / "fleet.example.yaml").read_text()
    assert "\nsafety:" in text
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        text.replace(
            "\nsafety:",
            "\nnotify: [{type: log, path: events.jsonl, events: [burn_in_held]}]\n\nsafety:",
            1,
        )
    )
    spec = load_fleet(fleet)
    assert [s.events for s in spec.notify] == [("burn_in_held",)]
    kind = EventKind.ACCEPTANCE_HELD
    held = Event(kind, SEVERITY[kind], "demo", "train", None, "suite held")
    assert accepts(SinkSpec("log", "l", events=("burn_in_held",)), held)
    assert not accepts(SinkSpec("log", "l", events=("node_cordoned",)), held)

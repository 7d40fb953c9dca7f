"""Reserved capacity left idle is notified: once it has been idle (billed, unused) for the
fleet's reservation_idle_after, as a condition sent once, and cleared once it is used."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from navarch.fleet.load import load_fleet
from navarch.inventory import Reservation
from navarch.notify.dispatch import notify_run
from navarch.notify.state import load_state
from navarch.outcome import RunResult
from navarch.planner.model import Memory, Plan
from navarch.stores import open_store
from tests.unattended.helpers import write_fleet

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def _result(running: int) -> RunResult:
    r = Reservation("sim", "res-train", "sim-h100x8", "sim-1a", 3, 3 - running)
    return RunResult(Plan("demo", T0, ()), (), Memory(fleet="demo"), "r", None, (r,))


def test_reserved_capacity_idle_past_reservation_idle_after_is_notified_once_then_cleared(
    tmp_path: Path,
) -> None:
    write_fleet(
        tmp_path, notify=[{"type": "log", "path": "events.jsonl"}], reservation_idle_after="30m"
    )
    spec = load_fleet(tmp_path / "fleet.yaml")
    store = open_store(spec.store_url, base_dir=spec.base_dir)

    def events() -> list[dict]:
        path = tmp_path / "events.jsonl"
        return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []

    notify_run(spec, store, now=T0, run_id="r1", result=_result(running=2))
    notify_run(spec, store, now=T0 + timedelta(minutes=20), run_id="r2", result=_result(2))
    assert events() == []  # idle, but not yet for 30 minutes
    assert load_state(store, "demo").idle_since == {"res-train": "2026-03-02T12:00:00Z"}
    notify_run(spec, store, now=T0 + timedelta(minutes=31), run_id="r3", result=_result(2))
    notify_run(spec, store, now=T0 + timedelta(minutes=40), run_id="r4", result=_result(2))
    [idle] = events()
    assert idle["kind"] == "reservation_idle" and idle["severity"] == "warning"
    assert idle["message"] == (
        "reservation res-train (sim sim-1a sim-h100x8): 1 of 3 reserved instances idle "
        "since 2026-03-02T12:00:00Z, billed but unused"
    )
    notify_run(spec, store, now=T0 + timedelta(minutes=45), run_id="r5", result=_result(3))
    assert [e["kind"] for e in events()] == ["reservation_idle", "condition_cleared"]
    state = load_state(store, "demo")
    assert state.active == {} and state.idle_since == {}

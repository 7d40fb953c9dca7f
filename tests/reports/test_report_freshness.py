"""Freshness does not trust the node's clock.

Reports are stored in a real file:// store whose file modification time is the store's
clock; read_reports, observe() and plan() then judge them as `navarch plan` does.
"""

from __future__ import annotations

import json
import os
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from navarch.fleet.load import load_fleet
from navarch.inventory import Instance, InstanceState, launch_id, ownership_tags
from navarch.planner.model import Lifecycle, Memory
from navarch.planner.observe import observe
from navarch.planner.plan import plan
from navarch.reconcile.codec import memory_from_json, memory_to_json
from navarch.reconcile.reports import read_reports
from navarch.report import signing
from navarch.stores.file import FileStore
from tests.support.reports import report_doc

REPO = Path(__file__).resolve().parents[2]
SECRET = b"fleet-secret-for-tests"
NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
NODE = "demo-train-0001"


@pytest.fixture
def spec(tmp_path):
    shutil.copy(REPO / "fleet.example.yaml", tmp_path / "fleet.yaml")
    return load_fleet(tmp_path / "fleet.yaml")


def _instance() -> Instance:
    tags = {**ownership_tags("demo", "train", NODE, launch_id("demo", NODE, 0)), "team": "research"}
    return Instance(
        provider="sim",
        instance_id="i-1",
        zone="sim-1a",
        instance_type="sim-h100x8",
        state=InstanceState.RUNNING,
        launched_at=NOW - timedelta(hours=2),
        tags=tuple(sorted(tags.items())),
    )


def _store_report(store: FileStore, generated_at: datetime, stored_at: datetime) -> None:
    report = report_doc(generated_at=generated_at.strftime("%Y-%m-%dT%H:%M:%SZ"), gpus=[])
    signed = signing.sign(report, signing.derive_node_key(SECRET, "demo", NODE))
    key = f"health/demo/train/{NODE}.json"
    store.put(key, json.dumps(signed).encode())
    os.utime(store.root / key, (stored_at.timestamp(), stored_at.timestamp()))


def _judge(spec, store):
    reports = read_reports(store, "demo", Memory(fleet="demo"), SECRET, NOW)
    observed = observe(spec, [_instance()], reports, Memory(fleet="demo"), NOW)
    view = next(v for v in observed.views if v.node == NODE)
    made = plan(spec, observed.views, observed.memory, NOW)
    touching = [a for a in made.actions if a.node == NODE]
    return reports[NODE], view, touching, observed.memory


def test_16_5_node_clock_eleven_minutes_behind_is_fresh_not_offline(tmp_path, spec):
    store = FileStore(tmp_path / "store")
    _store_report(
        store, generated_at=NOW - timedelta(minutes=11), stored_at=NOW - timedelta(seconds=10)
    )
    obs, view, touching, memory = _judge(spec, store)
    assert obs.rejected is None and obs.summary.stored_at == NOW - timedelta(seconds=10)
    assert obs.summary.clock_skew_s == pytest.approx(-650)
    assert view.lifecycle is Lifecycle.HEALTHY
    assert view.report_age_s == pytest.approx(10)
    assert "clock skew: node clock 10m50s behind the store's" in view.reason
    assert touching == []  # no cordon, no replacement for skew alone
    # stored_at survives a round trip through state/<fleet>.json (unchanged reports reuse it)
    again = memory_from_json(json.loads(json.dumps(memory_to_json(memory))))
    assert again.node(NODE).report.stored_at == obs.summary.stored_at


def test_16_5_node_clock_ten_minutes_ahead_is_not_rejected_as_future(tmp_path, spec):
    store = FileStore(tmp_path / "store")
    _store_report(
        store, generated_at=NOW + timedelta(minutes=10), stored_at=NOW - timedelta(seconds=5)
    )
    obs, view, touching, _ = _judge(spec, store)
    assert obs.rejected is None
    assert view.lifecycle is Lifecycle.HEALTHY
    assert "clock skew: node clock 10m5s ahead of the store's" in view.reason
    assert touching == []


def test_16_5_a_clock_ahead_cannot_keep_a_silent_node_fresh(tmp_path, spec):
    """Age is the store's: a report stored 2 hours ago is old whatever its generated_at."""
    store = FileStore(tmp_path / "store")
    _store_report(store, generated_at=NOW, stored_at=NOW - timedelta(hours=2))
    obs, view, _, _ = _judge(spec, store)
    assert obs.rejected is None
    assert view.lifecycle is Lifecycle.OFFLINE
    assert view.report_age_s == pytest.approx(7200)


def test_16_5_small_write_delay_is_not_skew(tmp_path, spec):
    store = FileStore(tmp_path / "store")
    _store_report(
        store, generated_at=NOW - timedelta(seconds=40), stored_at=NOW - timedelta(seconds=5)
    )
    _, view, _, _ = _judge(spec, store)
    assert view.lifecycle is Lifecycle.HEALTHY and "clock skew" not in view.reason

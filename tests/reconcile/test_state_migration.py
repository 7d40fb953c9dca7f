"""A state document written before NodeMemory.cordon loads into the same Cordon and plans
the same (tests/fixtures/state/local_loop, README.md there says how it was made)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from navarch.planner.model import ActionReason, Cordon, Memory, NodeMemory
from navarch.reconcile.codec import memory_from_json, memory_to_json
from navarch.report.health_report import RejectReason
from navarch.stores.file import FileStore

FIXTURE = Path(__file__).parent.parent / "fixtures" / "state" / "local_loop"
ROOT = Path(__file__).parent.parent.parent
#: The clock of the plan the fixture's plan.json was made with.
PLAN_NOW = "2025-01-06T12:01:00Z"


def _copy_fixture(tmp_path: Path) -> Path:
    """The fixture's fleet and .navarch in tmp_path, with each node's report_version set to
    its copied report's version (the file store's version is mtime and inode, which a copy
    changes: left as saved, every report would read as replayed)."""
    shutil.copy(FIXTURE / "fleet.yaml", tmp_path / "fleet.yaml")
    shutil.copytree(FIXTURE / "dot-navarch", tmp_path / ".navarch")
    store = FileStore(tmp_path / ".navarch" / "store")
    versions = {
        i.key.rsplit("/", 1)[-1].removesuffix(".json"): i.version for i in store.list("health/")
    }
    state = tmp_path / ".navarch" / "store" / "state" / "demo.json"
    doc = json.loads(state.read_text())
    for name, node in doc["nodes"].items():
        if node.get("report_version"):
            node["report_version"] = versions[name]
    state.write_text(json.dumps(doc))
    return tmp_path


def _plan_json(fleet_dir: Path) -> dict[str, object]:
    env = dict(os.environ, NAVARCH_NOW=PLAN_NOW, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-m", "navarch", "plan", "fleet.yaml", "--json"],
        cwd=fleet_dir,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    plan = json.loads(out)
    # Made of the copied reports' versions (mtime and inode): not the state's doing.
    plan.pop("observation_fingerprint")
    return dict(plan)


def test_saved_state_from_before_the_cordon_type_loads_into_cordons_and_plans_the_same(
    tmp_path,
):
    doc = json.loads((FIXTURE / "dot-navarch" / "store" / "state" / "demo.json").read_text())
    memory = memory_from_json(doc)
    operator = memory.node("demo-train-0001")
    assert operator is not None and operator.cordon is not None
    assert operator.cordon.cause is ActionReason.OPERATOR
    assert operator.cordon.note == "operator: disk check"
    faulty = memory.node("demo-train-0002")
    assert faulty is not None and faulty.cordon is not None
    assert faulty.cordon.repair and faulty.cordon.fault == "xid:79@gpu3"
    serving = memory.node("demo-train-0003")
    assert serving is not None and serving.cordon is None

    want = json.loads((FIXTURE / "plan.json").read_text())
    want.pop("observation_fingerprint")
    assert _plan_json(_copy_fixture(tmp_path)) == want


def test_a_cordon_is_written_as_one_record_without_the_old_flags_and_reads_back_equal():
    at = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
    cordon = Cordon(ActionReason.OPERATOR, at, by="alice@gpu-admin", idle=True, note="operator: x")
    nm = NodeMemory("demo-train-0001", "train", "i-1", cordon=cordon)
    doc = json.loads(json.dumps(memory_to_json(Memory("demo").with_node(nm))))
    entry = doc["nodes"]["demo-train-0001"]
    assert entry["cordon"]["cause"] == "operator" and entry["cordon"]["by"] == "alice@gpu-admin"
    assert not {"repair", "operator_cordon", "idle_cordon", "burn_in_cordon"} & set(entry)
    back = memory_from_json(doc).node("demo-train-0001")
    assert back is not None and back.cordon == cordon


def test_a_rejection_reason_loads_typed_and_an_unknown_one_as_unrecognised():
    nm = NodeMemory("demo-train-0001", "train", "i-1", report_version="v1")
    doc = json.loads(json.dumps(memory_to_json(Memory("demo").with_node(nm))))
    entry = doc["nodes"]["demo-train-0001"]
    entry["report_rejected"] = "bad_signature"
    back = memory_from_json(doc).node("demo-train-0001")
    assert back is not None and back.report_rejected is RejectReason.BAD_SIGNATURE
    # A word written by another version of navarch loads as a named fallback, never an error.
    entry["report_rejected"] = "quantum_flux"
    back = memory_from_json(doc).node("demo-train-0001")
    assert back is not None and back.report_rejected is RejectReason.UNRECOGNISED

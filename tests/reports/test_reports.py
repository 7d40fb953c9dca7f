"""Report verification: every rejection reason, and rejected reports never count as unhealthy."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from navarch.errors import ReportRejected
from navarch.planner.model import Memory, NodeMemory, ReportSummary
from navarch.reconcile.reports import MAX_REPORT_BYTES, read_reports, verify_report
from navarch.report import signing
from navarch.report.health import FaultKey, Remedy, Status
from navarch.report.health_report import ReportCheck
from navarch.stores.file import FileStore
from tests.support.reports import GPU0, xid79_report_doc, xid_check

SECRET = b"fleet-secret-for-tests"
NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


GPU1 = replace(
    GPU0, index=1, uuid="GPU-2", pci_bus_id="0000:2a:00", utilization_pct=60.0, process_count=0
)
THERMAL = ReportCheck(
    "temperature", Status.DEGRADED, Remedy.NONE, "GPU 2 at 88 C", 2, {}, FaultKey("thermal", 2)
)


def _report(**over) -> dict:
    """XID 79 latched on GPU 0, a degraded temperature check on GPU 2, two GPUs."""
    checks = [THERMAL.to_json()]
    return xid79_report_doc(**{"checks": checks, "gpus": [GPU0.to_json(), GPU1.to_json()], **over})


def _signed(report: dict, node: str = "demo-train-0001") -> bytes:
    key = signing.derive_node_key(SECRET, "demo", node)
    return json.dumps(signing.sign(report, key)).encode()


def _verify(data: bytes, last_sequence: int = 0, secret: bytes | None = SECRET) -> ReportSummary:
    return verify_report(
        data,
        fleet="demo",
        pool="train",
        node="demo-train-0001",
        fleet_secret=secret,
        last_sequence=last_sequence,
        now=NOW,
    )


def test_good_report_is_summarised():
    s = _verify(_signed(_report()))
    assert s.fatal and s.status == "unhealthy" and s.sequence == 7
    assert s.findings[0] == "XID 79: GPU has fallen off the bus on 0000:18:00"
    assert s.findings[1] == "temperature (GPU 2): GPU 2 at 88 C"
    assert (s.process_count, s.utilization_pct, s.gpu_count) == (1, 50.0, 2)


def test_a_lost_gpu_counts_as_running_no_process_so_its_node_can_drain():
    lost_check = ReportCheck(
        "gpu_lost",
        Status.UNHEALTHY,
        Remedy.REBOOT,
        "GPU 1 is lost (fallen off the bus / not responding)",
        1,
        {},
        FaultKey("gpu_lost", 1),
    ).to_json()
    idle = replace(GPU0, process_count=0).to_json()
    lost = replace(GPU0, index=1, uuid="GPU-2", process_count=None).to_json()
    s = _verify(_signed(_report(checks=[lost_check], gpus=[idle, lost])))
    assert s.process_count == 0
    # A GPU whose count is unknown for another reason still leaves the count unknown.
    s = _verify(_signed(_report(checks=[], gpus=[idle, lost])))
    assert s.process_count is None


@pytest.mark.parametrize(
    ("data", "kwargs", "reason"),
    [
        (b"x" * (MAX_REPORT_BYTES + 1), {}, "oversized"),
        (b"{not json", {}, "malformed"),
        (b"[1, 2]", {}, "malformed"),
        (
            json.dumps({k: v for k, v in _report().items() if k != "signature"}).encode(),
            {},
            "unsigned",
        ),
        (_signed(_report(status="on-fire")), {}, "schema"),
        (_signed(_report(node="demo-train-0002"), node="demo-train-0002"), {}, "identity"),
        (_signed(_report()), {"secret": None}, "no_secret"),
        (_signed(_report(), node="demo-train-0009"), {}, "bad_signature"),
        (_signed(_report()), {"last_sequence": 7}, "replayed"),
        (_signed(_report(generated_at="2026-11-01T12:05:00Z")), {}, "future"),
    ],
)
def test_rejections(data, kwargs, reason):
    with pytest.raises(ReportRejected) as info:
        _verify(data, **kwargs)
    assert info.value.reason == reason


def test_tampered_field_breaks_the_signature():
    doc = json.loads(_signed(_report(status="healthy", xids=[], action="none")))
    doc["status"] = "unhealthy"
    with pytest.raises(ReportRejected, match="bad_signature"):
        _verify(json.dumps(doc).encode())


def test_read_reports_skips_unchanged_objects(tmp_path):
    store = FileStore(tmp_path)
    key = "health/demo/train/demo-train-0001.json"
    version = store.put(key, _signed(_report()))
    obs = read_reports(store, "demo", Memory(fleet="demo"), SECRET, NOW)
    assert obs["demo-train-0001"].summary.sequence == 7
    # Memory already holds this version: the object is not fetched (a corrupt body would
    # otherwise be rejected), the remembered summary is reused.
    remembered = NodeMemory(
        node="demo-train-0001",
        pool="train",
        report_version=version,
        report=obs["demo-train-0001"].summary,
    )
    memory = Memory(fleet="demo").with_node(remembered)
    store_get = store.get
    fetched: list[str] = []
    store.get = lambda k: fetched.append(k) or store_get(k)  # type: ignore[method-assign]
    again = read_reports(store, "demo", memory, SECRET, NOW + timedelta(seconds=30))
    assert fetched == [] and again["demo-train-0001"].summary.sequence == 7


@pytest.mark.parametrize(
    "change",
    [
        {"generated_at": "yesterday"},
        {"health_score": 101},
        {"xids": [{"code": 79}]},
        {"gpus": [{"index": 0}]},
        {"extra_field": 1},
        {"notice": {"kind": "preemption", "source": "mars"}},
    ],
)
def test_schema_rejections_agree_with_the_jsonschema_package(change):
    """The compiled validator on the hot path rejects what jsonschema (the reference) does."""
    from navarch.fleet.schemas import validator_for

    report = _report(**change)
    assert not validator_for("health-report.schema.json").is_valid(report)
    with pytest.raises(ReportRejected) as info:
        _verify(_signed(report))
    assert info.value.reason == "schema"


def test_summary_fault_key_is_the_agents_structured_key_not_the_display_text():
    check = replace(
        xid_check("anything at all: (GPU 7) no colon rules here"),
        boots_seen=2,
        first_seen="2026-10-31T12:00:00.000Z",
    )
    report = _report(checks=[*_report()["checks"], check.to_json()])
    s = _verify(_signed(report))
    assert s.fault_key == FaultKey("xid:79", 0)
    assert s.status is Status.UNHEALTHY and s.action is Remedy.REBOOT


def test_a_version_1_report_is_rejected_by_schema():
    with pytest.raises(ReportRejected) as err:
        _verify(_signed(_report(schema_version=1)))
    assert err.value.reason == "schema"

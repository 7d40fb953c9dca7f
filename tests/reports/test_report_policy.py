"""Health policy rules applied to verified reports: navarch.reconcile.reports runs
navarch.fleet.policy.evaluate over each report with its pool's rule sets."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime

from navarch.fleet.policy import compile_rule
from navarch.planner.model import Memory
from navarch.reconcile.reports import read_reports, verify_report
from navarch.report import signing
from navarch.stores.file import FileStore
from tests.support.reports import GPU0, xid79_report_doc

SECRET = b"fleet-secret-for-tests"
NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)

HOT = compile_rule(
    "hot-gpu",
    "gpus.exists(g, g.temperature_c != null && g.temperature_c >= 85.0)",
    "unhealthy",
    "replace",
)
RAISES = compile_rule("needs-second-gpu", "gpus[1].temperature_c > 80.0", "unhealthy", "replace")


def _report(**over) -> dict:
    """An agent's report (schemas/health-report.schema.json) with XID 79: unhealthy, reboot."""
    return xid79_report_doc(**over)


def _signed(report: dict) -> bytes:
    key = signing.derive_node_key(SECRET, "demo", "demo-train-0001")
    return json.dumps(signing.sign(report, key)).encode()


def _healthy(**over) -> dict:
    gpus = [replace(GPU0, temperature_c=88.0, process_count=0).to_json()]
    return _report(
        status="healthy", action="none", health_score=100, checks=[], xids=[], gpus=gpus, **over
    )


def _verify(data: bytes, rule_sets=None):
    return verify_report(
        data,
        fleet="demo",
        pool="train",
        node="demo-train-0001",
        fleet_secret=SECRET,
        last_sequence=0,
        now=NOW,
        rule_sets=rule_sets,
    )


def test_without_rule_sets_the_agent_verdict_stands() -> None:
    s = _verify(_signed(_healthy()))
    assert (s.status, s.action) == ("healthy", "none")


def test_a_user_rule_turns_a_hot_gpu_into_a_replacement() -> None:
    s = _verify(_signed(_healthy()), rule_sets=((HOT,), ()))
    assert (s.status, s.action) == ("unhealthy", "replace")
    assert s.findings[0] == "rule hot-gpu: unhealthy, action replace"


def test_builtin_rules_keep_todays_behaviour() -> None:
    s = _verify(_signed(_report()), rule_sets=((), ()))
    assert (s.status, s.action) == ("unhealthy", "reboot")
    assert s.findings[0].startswith("XID 79")


def test_a_rule_that_raises_leaves_the_node_as_it_was_and_says_why() -> None:
    # One GPU only: gpus[1] raises at evaluation.
    s = _verify(_signed(_healthy()), rule_sets=((RAISES,), ()))
    assert (s.status, s.action) == ("healthy", "none")
    assert any(f.startswith("policy error: rule needs-second-gpu") for f in s.findings), s.findings


def test_read_reports_applies_each_pools_rule_sets(tmp_path) -> None:
    store = FileStore(tmp_path)
    store.put("health/demo/train/demo-train-0001.json", _signed(_healthy()))
    memory = Memory(fleet="demo")
    plain = read_reports(store, "demo", memory, SECRET, NOW)
    ruled = read_reports(store, "demo", memory, SECRET, NOW, rule_sets={"train": ((HOT,), ())})
    assert plain["demo-train-0001"].summary.status == "healthy"
    assert ruled["demo-train-0001"].summary.status == "unhealthy"

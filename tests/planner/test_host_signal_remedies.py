"""Host signals (navarch.agent.host_signals) through the remediation table and plan():
a fatal host fault is remedied by its class row, a report-only one is never cordoned."""

from __future__ import annotations

import pytest
from test_remedies import NODE, _kinds, _plan


@pytest.mark.parametrize(
    "kind",
    [
        "host_storage:fs_read_only",
        "host_cpu:hard_lockup",
        "pcie:aer_fatal",
        "pcie:aer_counter_uncorrectable",
    ],
)
def test_a_fatal_host_fault_is_rebooted_and_its_class_row_decides(kind: str) -> None:
    assert "cordon" in _kinds(_plan({}, kind=kind, action="reboot"))
    assert _kinds(_plan({}, kind=kind, action="reboot", phase="draining")) == ["reboot"]
    cls = kind.split(":", 1)[0]
    rows = [{"match": cls, "actions": ["replace"]}]
    p = _plan({"remedies": rows}, kind=kind, action="reboot", phase="draining")
    assert _kinds(p) == ["terminate"]
    (term,) = [a for a in p.actions if a.node == NODE]
    assert f"remedies row {cls}: replace" in term.reason


@pytest.mark.parametrize(
    "kind",
    [
        "clock:unsynchronised",
        "host_memory:oom_kill",
        "host_cpu:hung_task",
        "pcie:aer_corrected",
        "pcie:peermem",
    ],
)
def test_a_report_only_host_signal_never_cordons(kind: str) -> None:
    assert _kinds(_plan({}, kind=kind, action="none")) == []


def test_an_uncorrected_host_memory_error_replaces_the_node_though_an_oom_kill_only_reports() -> (
    None
):
    assert "cordon" in _kinds(_plan({}, kind="host_memory_uncorrected", action="reboot"))
    drained = _plan({}, kind="host_memory_uncorrected", action="reboot", phase="draining")
    assert _kinds(drained) == ["terminate"]
    assert _kinds(_plan({}, kind="host_memory:oom_kill", action="none")) == []

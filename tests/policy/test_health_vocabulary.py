"""navarch.report.health: one order per word, one text form per fault key."""

from __future__ import annotations

from navarch.report.health import FaultKey, Remedy, Status


def test_status_has_one_order_worst_last() -> None:
    assert [s.value for s in sorted(Status, key=lambda s: s.rank)] == [
        "healthy",
        "degraded",
        "unknown",
        "unhealthy",
    ]
    assert Status.worst([Status.DEGRADED, Status.UNKNOWN]) is Status.UNKNOWN
    assert Status.worst([]) is Status.HEALTHY


def test_remedy_is_ordered_by_strength() -> None:
    assert [r.value for r in sorted(Remedy, key=lambda r: r.rank)] == [
        "none",
        "restart_app",
        "reset_gpu",
        "reboot",
        "replace",
    ]
    assert Remedy.strongest([Remedy.RESET_GPU, Remedy.REBOOT]) is Remedy.REBOOT
    assert f"{Remedy.REBOOT}" == "reboot" and Status("unhealthy") == "unhealthy"


def test_fault_key_text_form_round_trips_and_old_text_still_loads() -> None:
    key = FaultKey("xid:79", 3)
    assert key.format() == "xid:79@gpu3" and FaultKey.parse(key.format()) == key
    assert FaultKey.parse("gpu_count") == FaultKey("gpu_count")
    assert FaultKey.parse("XID 79") == FaultKey("XID 79")  # state written by an older navarch
    assert FaultKey.from_json(key.to_json()) == key


def test_the_same_fault_on_another_gpu_is_the_same_fault() -> None:
    assert FaultKey("xid:79", 0).same_as(FaultKey("xid:79", 5))
    assert not FaultKey("xid:79", 0).same_as(FaultKey("xid:48", 0))

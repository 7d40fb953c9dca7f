"""The XID catalogue: application XIDs never make a node unhealthy; unknown is not a fault."""

from __future__ import annotations

import pytest

from navarch.report.health import Remedy as Action
from navarch.report.xid import (
    APPLICATION_XIDS,
    Severity,
    lookup,
    lookup_event,
    lookup_sxid,
    recovery_action,
)


@pytest.mark.parametrize("code", [13, 31, 43, 45, 68, 137, 8, 69, 80, 94, 63])
def test_application_xids_are_never_fatal(code: int) -> None:
    info = lookup(code)
    assert info.severity in (Severity.IGNORE, Severity.WARNING)
    assert info.action.rank <= Action.RESTART_APP.rank


@pytest.mark.parametrize("code", [13, 31, 43, 45, 68, 137])
def test_core_application_xids_are_ignored(code: int) -> None:
    assert lookup(code).severity is Severity.IGNORE


def test_application_set_matches_catalogue() -> None:
    assert all(lookup(c).severity is not Severity.FATAL for c in APPLICATION_XIDS)


@pytest.mark.parametrize(
    ("code", "action"),
    [
        (79, Action.REBOOT),
        (48, Action.RESET_GPU),
        (64, Action.REPLACE),
        (119, Action.REBOOT),
        (74, Action.RESET_GPU),
        (95, Action.RESET_GPU),
        (54, Action.REPLACE),
        (151, Action.REBOOT),
    ],
)
def test_fatal_xids(code: int, action: Action) -> None:
    info = lookup(code)
    assert info.severity is Severity.FATAL
    assert info.action is action
    assert info.known


def test_reboot_fixable_flags() -> None:
    assert lookup(79).reboot_fixable
    assert lookup(48).reboot_fixable
    assert not lookup(64).reboot_fixable  # remap failure is an RMA criterion
    assert not lookup(54).reboot_fixable  # mechanical


@pytest.mark.parametrize("code", [0, 1, 999, 12345])
def test_unknown_code_is_warning_none(code: int) -> None:
    info = lookup(code)
    assert (info.severity, info.action, info.known) == (Severity.WARNING, Action.NONE, False)


def test_nvlink5_nonfatal_is_ignored_and_fatal_kept() -> None:
    assert (
        lookup_event(145, "RLW_REMAP Nonfatal XC0 i0 Link 00 (0x00004b06 0x0)").severity
        is Severity.IGNORE
    )
    assert (
        lookup_event(149, "NETIR_LINK_EVT Fatal XC0 i0 Link 04 (0x004505c6 0x0)").severity
        is Severity.FATAL
    )


@pytest.mark.parametrize(
    ("text", "severity", "action"),
    [
        (
            "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)",
            Severity.FATAL,
            Action.REBOOT,
        ),
        (
            "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
            Severity.FATAL,
            Action.RESET_GPU,
        ),
        (
            "GPU recovery action changed from 0x0 (None) to 0x3 (Drain P2P)",
            Severity.WARNING,
            Action.RESET_GPU,
        ),
        (
            "GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)",
            Severity.IGNORE,
            Action.NONE,
        ),
    ],
)
def test_xid154_uses_target_action(text: str, severity: Severity, action: Action) -> None:
    info = lookup_event(154, text)
    assert (info.severity, info.action) == (severity, action)


def test_sxid() -> None:
    fatal = lookup_sxid(20034, True)
    assert (fatal.kind, fatal.severity, fatal.action) == ("sxid", Severity.FATAL, Action.REBOOT)
    assert lookup_sxid(12028, False).severity is Severity.WARNING


def test_recovery_action_values() -> None:
    assert recovery_action(0)[1] is Severity.IGNORE
    assert recovery_action(2)[2] is Action.REBOOT
    assert recovery_action(42)[1:] == (Severity.WARNING, Action.NONE)


def test_action_order() -> None:
    assert Action.strongest([Action.NONE, Action.REPLACE, Action.REBOOT]) is Action.REPLACE
    assert Action.strongest([]) is Action.NONE

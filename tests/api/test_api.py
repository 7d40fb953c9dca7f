"""navarch.api's contract beyond its documented examples: what it refuses, and that its
values are frozen."""

from __future__ import annotations

import dataclasses
import os
import shutil
from datetime import datetime
from pathlib import Path

import pytest

from navarch import api
from navarch.errors import ConfigError, NavarchError

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> api.LoadedFleet:
    shutil.copy(REPO / "fleet.example.yaml", tmp_path / "fleet.yaml")
    for key in [k for k in os.environ if k.startswith("NAVARCH_")]:
        monkeypatch.delenv(key)
    return api.load_fleet(tmp_path / "fleet.yaml")


def test_apply_without_approval_does_nothing_and_says_how_to_approve(fleet) -> None:
    with pytest.raises(NavarchError, match="auto_approve=True"):
        api.apply(fleet)
    assert api.status(fleet).to_json()["pools"][0]["nodes"] == []


def test_a_declined_plan_is_reported_unapplied_and_nothing_is_launched(fleet) -> None:
    shown = []
    result = api.apply(fleet, api.ApplyOptions(confirm=lambda plan: shown.append(plan) or False))
    assert not result.applied and result.outcomes == ()
    assert [a.kind.value for a in shown[0].actions] == ["provision"] * 5
    assert api.plan(fleet).to_json()["summary"]["provision"] == 5


def test_a_naive_now_is_refused_with_what_to_pass(fleet) -> None:
    with pytest.raises(ConfigError, match="aware UTC datetime"):
        api.plan(fleet, now=datetime(2026, 11, 24, 12, 0))


def test_returned_values_are_frozen(fleet) -> None:
    result = api.plan(fleet)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.error = "changed"  # type: ignore[misc]
    assert dataclasses.is_dataclass(api.validate(fleet.path))


def test_all_names_only_what_the_module_defines() -> None:
    assert [name for name in api.__all__ if not hasattr(api, name)] == []
    # The lazy lookup's table and the literal __all__ list the same names.
    assert sorted(api._ROOMS) == sorted(api.__all__)

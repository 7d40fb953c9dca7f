"""An action carries one payload shape per kind, and a saved plan builds it back."""

from __future__ import annotations

import pytest

from navarch.planner.model import Action, ActionKind, ActionReason
from navarch.planner.payloads import CordonPayload, ProvisionPayload, ScalePayload
from navarch.reconcile.render import action_from_json, action_to_json


def test_an_action_with_another_kinds_payload_is_refused() -> None:
    with pytest.raises(TypeError, match="cordon action carries CordonPayload"):
        Action(
            ActionKind.CORDON,
            "train",
            "n1",
            "x",
            payload=ProvisionPayload(),
            action_reason=ActionReason.UNHEALTHY,
        )
    with pytest.raises(TypeError, match="drain action carries no payload"):
        Action(
            ActionKind.DRAIN,
            "train",
            "n1",
            "x",
            payload=CordonPayload(),
            action_reason=ActionReason.REDRAIN,
        )


def test_a_saved_action_builds_its_kinds_payload_back_and_ignores_other_kinds_keys() -> None:
    scale = Action(
        ActionKind.SCALE,
        "train",
        None,
        "up",
        payload=ScalePayload(5),
        action_reason=ActionReason.SCALE_UP,
    )
    doc = action_to_json(scale)
    assert doc["desired"] == 5 and doc["places"] == [] and doc["repair"] is False
    assert action_from_json(doc) == scale
    with pytest.raises(ValueError, match="scale action"):
        action_from_json({**doc, "desired": None})

"""Capacity fallover only stops for a reason.

Each test applies a real local fleet (file:// store, local provider) through run_apply;
where a cloud's answer is needed, a thin wrapper around the local provider raises the
navarch error the cloud's map_error gives for it (the mapping itself is tested per cloud in
tests/aws, tests/gcp, tests/lambda_cloud).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from navarch.errors import (
    AuthError,
    CapacityError,
    LaunchSpent,
    QuotaError,
    TransientError,
)
from navarch.fleet.load import load_fleet
from navarch.inventory import Instance
from navarch.planner.payloads import ProvisionPayload
from navarch.providers.base import ProvisionRequest
from navarch.reconcile.run import Fleet, gather, run_apply, system_clock
from navarch.reconcile.state import load_memory

FLEET = "fo"
PLACES = [
    ("sim-1a", "sim-h100x8"),
    ("sim-1b", "sim-h100x8"),
    ("sim-1a", "sim-a100x8"),
    ("sim-1b", "sim-a100x8"),
]


def _fleet(root: Path, *, target: int = 2, not_offered: Sequence[str] = ()) -> Fleet:
    (root / "fleet.secret").write_text("0123456789abcdef0123456789abcdef\n")
    doc = {
        "fleet": FLEET,
        "store": "file://store",
        "secret": {"file": "fleet.secret"},
        "providers": {
            "sim": {
                "type": "local",
                "dir": "local",
                "max_parallel": 1,
                "not_offered": list(not_offered),
            }
        },
        "pools": {
            "train": {
                "provider": "sim",
                "instance_types": ["sim-h100x8", "sim-a100x8"],
                "gpus_per_node": 1,
                "region": "sim-1",
                "zones": ["sim-1a", "sim-1b"],
                "nodes": {"min": 0, "target": target, "max": target + 1},
                "scheduler": "none",
            }
        },
    }
    (root / "fleet.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return Fleet.open(load_fleet(root / "fleet.yaml"))


class Scripted:
    """The local provider, except that launches in some places raise a navarch error."""

    def __init__(self, inner: Any, fail: Callable[[ProvisionRequest], Exception | None]) -> None:
        self.inner, self.name, self.fail = inner, inner.name, fail
        self.calls: list[tuple[str, str, str, str]] = []  # node, zone, type, launch id

    def list_instances(self, fleet: str) -> Sequence[Instance]:
        return self.inner.list_instances(fleet)

    def provision(self, request: ProvisionRequest) -> Instance:
        self.calls.append((request.node, request.zone, request.instance_type, request.launch_id))
        error = self.fail(request)
        if error is not None:
            raise error
        return self.inner.provision(request)

    def terminate(self, instances: Sequence[Instance]) -> None:
        self.inner.terminate(instances)

    def update_tags(self, instance: Instance, tags: Mapping[str, str]) -> None:
        self.inner.update_tags(instance, tags)


def _apply(fleet: Fleet):
    return run_apply(fleet, command="apply")


def _placed(fleet: Fleet) -> dict[str, tuple[str, str]]:
    return {
        i.node: (i.zone, i.instance_type)
        for i in fleet.providers["sim"].list_instances(FLEET)
        if i.node
    }


def _exhausted(fleet: Fleet) -> set[tuple[str, str]]:
    memory, _ = load_memory(fleet.store, FLEET)
    return {(e.zone, e.instance_type) for e in memory.pool("train").exhausted}


def test_type_not_offered_in_the_first_zone_falls_over_to_the_next(tmp_path):
    fleet = _fleet(tmp_path, not_offered=["sim-1a/sim-h100x8"])
    result = _apply(fleet)
    assert all(o.ok for o in result.outcomes), [o.detail for o in result.outcomes]
    assert _placed(fleet) == {
        "fo-train-0001": ("sim-1b", "sim-h100x8"),
        "fo-train-0002": ("sim-1b", "sim-h100x8"),
    }
    first = next(o for o in result.outcomes if o.action.node == "fo-train-0001")
    assert "after 1 zone/type that could not take it" in first.detail
    # Remembered like capacity (with a backoff), so the next launch does not try it again.
    assert _exhausted(fleet) == {("sim-1a", "sim-h100x8")}


def test_no_place_can_take_it_says_why_for_each_place(tmp_path):
    fleet = _fleet(tmp_path, target=1, not_offered=["sim-1a/sim-h100x8", "sim-1b/sim-a100x8"])
    sim = fleet.providers["sim"]
    fleet.providers["sim"] = Scripted(
        sim,
        lambda r: (
            CapacityError(
                f"no capacity in {r.zone}", code="InsufficientInstanceCapacity", scope="zone"
            )
            if (r.zone, r.instance_type) in {("sim-1b", "sim-h100x8"), ("sim-1a", "sim-a100x8")}
            else None
        ),
    )
    (outcome,) = _apply(fleet).outcomes[-1:]
    assert not outcome.ok and outcome.error == "PlacementError"
    assert outcome.detail.startswith("no place could take it: ")
    assert "sim-1a/sim-h100x8: not offered here" in outcome.detail
    assert "sim-1b/sim-h100x8: no capacity in sim-1b" in outcome.detail
    assert _exhausted(fleet) == set(PLACES)


@pytest.mark.parametrize(
    ("error", "calls", "why"),
    [
        # quota stops the pool: the second node is not even tried
        (QuotaError("vCPU limit", code="VcpuLimitExceeded", scope="region"), 1, "QuotaError"),
        # auth stops the provider
        (AuthError("expired token", code="ExpiredToken"), 1, "AuthError"),
        # transient stops this action only: the next node tries again, from its first place
        (TransientError("throttled", code="RequestLimitExceeded"), 2, "TransientError"),
    ],
)
def test_quota_auth_and_transient_stop_where_they_should(tmp_path, error, calls, why):
    fleet = _fleet(tmp_path)
    scripted = Scripted(fleet.providers["sim"], lambda r: error)
    fleet.providers["sim"] = scripted
    result = _apply(fleet)
    provisions = [o for o in result.outcomes if o.action.kind.value == "provision"]
    assert len(provisions) == 2 and not any(o.ok for o in provisions)
    assert {o.error for o in provisions} == {why}
    assert len(scripted.calls) == calls
    # never fell over: each launch tried only its first place (zones spread: sim-1a, sim-1b)
    firsts = {
        (
            o.action.carries(ProvisionPayload).places[0].zone,
            o.action.carries(ProvisionPayload).places[0].instance_type,
        )
        for o in provisions
    }
    assert {(z, t) for _, z, t, _ in scripted.calls} <= firsts
    assert firsts == {PLACES[0], ("sim-1b", PLACES[0][1])}
    assert _exhausted(fleet) == set()  # not the place's fault


def test_spent_launch_id_tries_the_next_place(tmp_path):
    fleet = _fleet(tmp_path, target=1)
    scripted = Scripted(
        fleet.providers["sim"],
        lambda r: (
            LaunchSpent(
                "launch already ran, instance terminated", code="IdempotentLaunchTerminated"
            )
            if r.attempt == 0
            else None
        ),
    )
    fleet.providers["sim"] = scripted
    result = _apply(fleet)
    assert all(o.ok for o in result.outcomes)
    assert _placed(fleet) == {"fo-train-0001": PLACES[1]}
    assert scripted.calls[0][3] != scripted.calls[1][3]  # a new launch id
    assert _exhausted(fleet) == set()  # the place is fine, only the token was spent


def test_all_launch_ids_spent_moves_to_a_new_node_name(tmp_path):
    fleet = _fleet(tmp_path, target=1)
    spent = Scripted(
        fleet.providers["sim"],
        lambda r: (
            LaunchSpent(
                "launch already ran, instance terminated", code="IdempotentLaunchTerminated"
            )
            if r.node == "fo-train-0001"
            else None
        ),
    )
    fleet.providers["sim"] = spent
    first = _apply(fleet)
    assert not first.outcomes[-1].ok
    assert len({lid for *_, lid in spent.calls}) == len(PLACES)  # each place's own token
    # The next run does not reuse the spent name (and so its tokens): it launches a new node.
    plan = gather(fleet, system_clock()).plan
    assert [a.node for a in plan.actions if a.kind.value == "provision"] == ["fo-train-0002"]
    second = _apply(fleet)
    assert all(o.ok for o in second.outcomes)
    assert set(_placed(fleet)) == {"fo-train-0002"}


def test_the_provisioner_alone_falls_over_zones_then_types_and_backs_off_the_full_place(
    tmp_path,
):
    """The fail-over is its own unit (navarch.reconcile.provisioning.Provisioner): handed a
    provision action's places, it tries them in order, and its Memory update backs off the
    place without capacity (10 min for a first failure) and records the launched node."""
    from datetime import UTC, datetime, timedelta

    from navarch.planner.model import Action, ActionKind, ActionReason, Memory, Place
    from navarch.reconcile.provisioning import BACKOFF_BASE_S, Provisioner

    fleet = _fleet(tmp_path)
    full = Scripted(
        fleet.providers["sim"],
        lambda r: CapacityError("no h100 here", scope="zone") if r.zone == "sim-1a" else None,
    )
    now = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
    provisioner = Provisioner(
        fleet.spec,
        {"sim": full},
        inventory=(),
        clock=lambda: now,
        user_data=None,
        fleet_secret=None,
    )
    places = tuple(Place(zone, itype, False, i) for i, (zone, itype) in enumerate(PLACES))
    action = Action(
        ActionKind.PROVISION,
        "train",
        "fo-train-0001",
        "scale_up",
        payload=ProvisionPayload(places=places),
        action_reason=ActionReason.SCALE_UP,
    )
    outcome, update = provisioner.provision(action)
    assert outcome.ok and "sim-1b/sim-h100x8 after 1 zone/type without capacity" in outcome.detail
    assert [(zone, itype) for _, zone, itype, _ in full.calls] == PLACES[:2]
    memory = update(Memory(fleet=FLEET))
    (backoff,) = memory.pool("train").exhausted
    assert (backoff.zone, backoff.instance_type, backoff.failures) == ("sim-1a", "sim-h100x8", 1)
    assert backoff.until == now + timedelta(seconds=BACKOFF_BASE_S)
    assert memory.node("fo-train-0001") is not None
    assert memory.pool("train").next_index == 2

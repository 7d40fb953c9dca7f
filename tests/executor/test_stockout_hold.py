"""No node lost to a stockout, through the real loop: local provider, file store, the real
agent on fake GPUs, run_apply. A thin wrapper around the local provider answers every
launch with the CapacityError a cloud's map_error gives for "no capacity" while the
stockout lasts (tests/executor/test_capacity_fallover.py has the same wrapper)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

from navarch.errors import CapacityError, QuotaError
from navarch.fleet.load import load_fleet
from navarch.planner.model import ActionKind
from navarch.providers.local.ops import inject, tick
from navarch.reconcile.run import Fleet, run_apply
from tests.executor.test_capacity_fallover import Scripted

FLEET = "so"
T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def _fleet(root: Path, **health: str) -> Fleet:
    (root / "fleet.secret").write_text("0123456789abcdef0123456789abcdef\n")
    doc = {
        "fleet": FLEET,
        "store": "file://store",
        "secret": {"file": "fleet.secret"},
        "providers": {"sim": {"type": "local", "dir": "local", "max_parallel": 1}},
        "pools": {
            "train": {
                "provider": "sim",
                "instance_types": ["sim-h100x8"],
                "gpus_per_node": 1,
                "region": "sim-1",
                "zones": ["sim-1a", "sim-1b"],
                "nodes": {"min": 0, "target": 2, "max": 2},
                "scheduler": "none",
                "health": {"remediation": ["replace"], **health},
            }
        },
    }
    (root / "fleet.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return Fleet.open(load_fleet(root / "fleet.yaml"))


def test_a_replace_only_node_is_not_terminated_while_every_launch_fails_on_capacity(
    tmp_path: Path,
) -> None:
    fleet = _fleet(tmp_path)
    spec = fleet.spec
    stockout = {"on": False}
    fleet.providers["sim"] = Scripted(
        fleet.providers["sim"],
        lambda r: (
            CapacityError(
                f"no capacity in {r.zone}", code="InsufficientInstanceCapacity", scope="zone"
            )
            if stockout["on"]
            else None
        ),
    )
    terminated: list[tuple[datetime, str | None]] = []

    def apply(at: datetime):  # noqa: ANN202 - an ApplyResult
        tick(spec, now=at - timedelta(seconds=30))
        result = run_apply(fleet, command="apply", clock=lambda: at)
        assert result is not None
        terminated.extend(
            (at, o.action.node)
            for o in result.outcomes
            if o.action.kind is ActionKind.TERMINATE and o.ok
        )
        return result

    apply(T0)
    apply(T0 + timedelta(minutes=2))  # both nodes report and serve
    sick = f"{FLEET}-train-0001"
    inject(spec, sick, xid=79)
    stockout["on"] = True
    for minutes in (4, 6, 8, 30, 90, 180, 600):  # ten hours of stockout
        result = apply(T0 + timedelta(minutes=minutes))
    assert terminated == []
    assert sick in {i.node for i in fleet.providers["sim"].list_instances(FLEET)}
    assert any(line.startswith(f"{sick}: held cordoned") for line in result.plan.pending)
    # Capacity returns: the replacement launches beside the held node; once it reports
    # ready, the held node is terminated, never before.
    stockout["on"] = False
    at = T0 + timedelta(hours=12)
    for step in range(6):
        apply(at + timedelta(minutes=2 * step))
        if terminated:
            break
    assert [node for _, node in terminated] == [sick]
    nodes = {i.node for i in fleet.providers["sim"].list_instances(FLEET)}
    assert sick not in nodes and len(nodes) == 2


def _after_terminate(tmp_path: Path, error: Callable[[str], Exception]):  # noqa: ANN202
    """An after-terminate replace-only pool of 2 serving nodes, whose first node then
    gets XID 79 as launches start failing with error(zone), unannounced (no launch has
    failed before). Returns (fleet, apply(at) -> ApplyResult, terminated nodes, the switch)."""
    fleet = _fleet(tmp_path, replacement="after-terminate")
    failing = {"on": False}
    fleet.providers["sim"] = Scripted(
        fleet.providers["sim"], lambda r: error(r.zone) if failing["on"] else None
    )
    terminated: list[str | None] = []

    def apply(at: datetime):  # noqa: ANN202 - an ApplyResult
        tick(fleet.spec, now=at - timedelta(seconds=30))
        result = run_apply(fleet, command="apply", clock=lambda: at)
        assert result is not None
        terminated.extend(
            o.action.node for o in result.outcomes if o.action.kind is ActionKind.TERMINATE and o.ok
        )
        return result

    apply(T0)
    apply(T0 + timedelta(minutes=2))
    inject(fleet.spec, f"{FLEET}-train-0001", xid=79)
    failing["on"] = True
    return fleet, apply, terminated, failing


def test_after_terminate_tries_the_launch_before_terminating_a_faulty_node(
    tmp_path: Path,
) -> None:
    """replacement: after-terminate, an unannounced stockout: the faulty node's
    replacement launch is tried first, and the node is not terminated when it fails; it
    is terminated once capacity returns and its replacement launched."""
    fleet, apply, terminated, failing = _after_terminate(
        tmp_path,
        lambda zone: CapacityError(
            f"no capacity in {zone}", code="InsufficientInstanceCapacity", scope="zone"
        ),
    )
    sick = f"{FLEET}-train-0001"
    tried: list[str] = []
    for minutes in (4, 6, 8, 30, 90):
        result = apply(T0 + timedelta(minutes=minutes))
        tried += [
            o.action.node or "" for o in result.outcomes if o.action.kind is ActionKind.PROVISION
        ]
    assert tried, "no replacement launch was tried"
    assert terminated == []
    assert sick in {i.node for i in fleet.providers["sim"].list_instances(FLEET)}
    failing["on"] = False
    at = T0 + timedelta(hours=3)
    for step in range(6):
        apply(at + timedelta(minutes=2 * step))
        if terminated:
            break
    assert terminated == [sick]
    nodes = {i.node for i in fleet.providers["sim"].list_instances(FLEET)}
    assert sick not in nodes and len(nodes) == 2


def test_after_terminate_terminates_when_the_launch_is_refused_for_quota(
    tmp_path: Path,
) -> None:
    """A quota refusal is after-terminate's own case (no room above the running nodes):
    the faulty node's termination goes on, and its replacement follows it."""
    fleet, apply, terminated, failing = _after_terminate(
        tmp_path, lambda zone: QuotaError("vCPU limit reached", code="VcpuLimitExceeded")
    )
    for minutes in (4, 6, 8):
        apply(T0 + timedelta(minutes=minutes))
        if terminated:
            break
    assert terminated == [f"{FLEET}-train-0001"]

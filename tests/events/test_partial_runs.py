"""Only what changed: a run started by events whose reports say again what the last ones
said (a heartbeat from a healthy node in service) folds them into Memory and stops, without
listing the clouds or reading any other report; a report with news takes the full run.
Through the real loop: local provider, file store, the real agent on fake GPUs, run_apply,
with the provider's listings and the store's reads counted."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import orjson
import pytest
import yaml

from navarch.errors import LockHeld
from navarch.fleet.load import load_fleet
from navarch.outcome import RunResult
from navarch.planner.model import ActionKind, Phase
from navarch.providers.local.ops import inject, tick
from navarch.reconcile.render import NO_CHANGES, plan_to_json, render_text
from navarch.reconcile.run import Fleet, run_apply
from navarch.reconcile.state import acquire_lock, load_memory, release_lock, state_key

FLEET = "ev"
T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
T1 = T0 + timedelta(minutes=2)  # every node's first report
T2 = T1 + timedelta(minutes=5, seconds=1)  # past the agents' 300 s heartbeat


def _fleet(root: Path) -> Fleet:
    (root / "fleet.secret").write_text("0123456789abcdef0123456789abcdef\n")
    doc = {
        "fleet": FLEET,
        "store": "file://store",
        "secret": {"file": "fleet.secret"},
        "providers": {"sim": {"type": "local", "dir": "local"}},
        "pools": {
            "train": {
                "provider": "sim",
                "instance_types": ["sim-h100x8"],
                "gpus_per_node": 1,
                "region": "sim-1",
                "zones": ["sim-1a"],
                "nodes": {"min": 0, "target": 3, "max": 3},
                "health": {"remediation": ["replace"]},
            }
        },
    }
    (root / "fleet.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return Fleet.open(load_fleet(root / "fleet.yaml"))


class Counted:
    """Counts the calls made through the wrapped object's methods, by name."""

    def __init__(self, inner: Any, calls: Counter[str], args: list[tuple[str, Any]]) -> None:
        self._inner, self._calls, self._args = inner, calls, args

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def counted(*a: Any, **kw: Any) -> Any:
            self._calls[name] += 1
            self._args.append((name, a[0] if a else None))
            return attr(*a, **kw)

        return counted


@pytest.fixture
def served(tmp_path: Path) -> tuple[Fleet, list[str]]:
    """Three nodes launched, reporting healthy and folded in; at T2 each agent has written
    its heartbeat (the store announces every one)."""
    fleet = _fleet(tmp_path)
    assert run_apply(fleet, command="apply", clock=lambda: T0) is not None
    tick(fleet.spec, now=T1 - timedelta(seconds=30))
    result = run_apply(fleet, command="apply", clock=lambda: T1)
    assert result is not None and not result.plan.actions
    nodes = sorted(nm.node for nm in result.memory.nodes)
    assert len(nodes) == 3
    tick(fleet.spec, now=T2 - timedelta(seconds=5))
    return fleet, nodes


def _key(node: str) -> str:
    return f"health/{FLEET}/train/{node}.json"


def _counted(fleet: Fleet) -> tuple[Counter[str], Counter[str], list[tuple[str, Any]]]:
    """Wrap the fleet's store and provider: (store calls, provider calls, store calls' first
    arguments)."""
    store_calls: Counter[str] = Counter()
    cloud_calls: Counter[str] = Counter()
    store_args: list[tuple[str, Any]] = []
    fleet.store = cast(Any, Counted(fleet.store, store_calls, store_args))
    fleet.providers["sim"] = cast(Any, Counted(fleet.providers["sim"], cloud_calls, []))
    return store_calls, cloud_calls, store_args


def _apply(fleet: Fleet, at: datetime, named: list[str] | None) -> RunResult:
    result = run_apply(
        fleet, command="apply", clock=lambda: at, named=frozenset(named) if named else None
    )
    assert result is not None
    return result


def _state(fleet: Fleet) -> dict[str, Any]:
    doc: dict[str, Any] = orjson.loads(
        (fleet.spec.base_dir / "store" / state_key(FLEET)).read_bytes()
    )
    return doc


def test_a_heartbeat_event_run_lists_no_instances_and_reads_only_the_named_report(
    served: tuple[Fleet, list[str]],
) -> None:
    fleet, nodes = served
    named = nodes[1]
    before = _state(fleet)
    store_calls, cloud_calls, store_args = _counted(fleet)

    result = _apply(fleet, T2, [_key(named)])

    assert not cloud_calls  # no listing, no reservations: the clouds were not asked
    listed = [arg for name, arg in store_args if name == "list"]
    assert listed == [_key(named)]  # not health/<fleet>/: one LIST for the named key
    read = [arg for name, arg in store_args if name in ("get", "get_many")]
    assert [k for k in read if k.startswith("health/")] == [_key(named)]
    assert read.count(state_key(FLEET)) == 1  # and the lease's object: nothing else
    # The report is folded: Memory holds the heartbeat's sequence, the state was saved once.
    after = _state(fleet)
    assert after["serial"] == before["serial"] + 1
    seq = after["nodes"][named]["report"]["sequence"]
    assert seq > before["nodes"][named]["report"]["sequence"]
    memory, _ = load_memory(fleet.store, FLEET)
    nm = memory.node(named)
    assert nm is not None and nm.report is not None and nm.report.sequence == seq
    # Every other node's entry is written back as it was read.
    for other in (nodes[0], nodes[2]):
        assert after["nodes"][other] == before["nodes"][other]
    # The run says it was partial: never "No changes" for a fleet it did not look at.
    assert result.plan.partial and not result.plan.converged and not result.plan.actions
    text = render_text(result.plan)
    assert "Partial run: read the 1 report its events named (1 new)" in text
    assert NO_CHANGES not in text
    doc = plan_to_json(result.plan)
    assert doc["partial"] == result.plan.partial and doc["converged"] is False


def test_a_redelivered_heartbeat_event_writes_nothing(served: tuple[Fleet, list[str]]) -> None:
    fleet, nodes = served
    _apply(fleet, T2, [_key(nodes[0])])
    version = fleet.store.get(state_key(FLEET)).version
    _, cloud_calls, store_args = _counted(fleet)

    again = _apply(fleet, T2 + timedelta(seconds=20), [_key(nodes[0])])

    assert again.plan.partial.startswith("read the 1 report its events named (none new)")
    assert not cloud_calls
    assert [k for name, k in store_args if name == "put" and k != f"state/{FLEET}.lock"] == []
    assert fleet.store.get(state_key(FLEET)).version == version


def test_an_event_run_for_a_faulty_report_lists_the_instances_and_cordons_the_node(
    served: tuple[Fleet, list[str]],
) -> None:
    fleet, nodes = served
    sick = nodes[2]
    inject(fleet.spec, sick, xid=79)
    tick(fleet.spec, now=T2)
    _, cloud_calls, _ = _counted(fleet)

    result = _apply(fleet, T2 + timedelta(seconds=10), [_key(sick)])

    assert cloud_calls["list_instances"] == 1  # the full run: a fresh, exhaustive listing
    assert not result.plan.partial
    cordoned = [o for o in result.outcomes if o.action.kind is ActionKind.CORDON and o.ok]
    assert [o.action.node for o in cordoned] == [sick]
    memory, _ = load_memory(fleet.store, FLEET)
    nm = memory.node(sick)
    assert nm is not None and nm.phase is not Phase.NONE


def test_an_event_run_for_a_spot_notice_is_the_full_run(
    served: tuple[Fleet, list[str]],
) -> None:
    fleet, nodes = served
    inject(fleet.spec, nodes[0], preempt=True)
    tick(fleet.spec, now=T2)
    _, cloud_calls, _ = _counted(fleet)

    result = _apply(fleet, T2 + timedelta(seconds=10), [_key(nodes[0])])

    assert cloud_calls["list_instances"] == 1
    assert not result.plan.partial


def test_an_event_run_naming_a_report_of_no_known_node_is_the_full_run(
    served: tuple[Fleet, list[str]],
) -> None:
    fleet, _ = served
    _, cloud_calls, _ = _counted(fleet)

    result = _apply(fleet, T2, [_key(f"{FLEET}-train-0099")])

    assert cloud_calls["list_instances"] == 1
    assert not result.plan.partial


def test_a_heartbeat_event_run_waits_for_the_lease_like_any_run(
    served: tuple[Fleet, list[str]],
) -> None:
    fleet, nodes = served
    version = fleet.store.get(state_key(FLEET)).version
    held = acquire_lock(fleet.store, FLEET, "apply (another runner)", 300, T2)
    try:
        with pytest.raises(LockHeld):
            _apply(fleet, T2, [_key(nodes[0])])
    finally:
        release_lock(fleet.store, FLEET, held)
    assert fleet.store.get(state_key(FLEET)).version == version  # nothing folded or written
    assert _apply(fleet, T2, [_key(nodes[0])]).plan.partial  # once free, it runs

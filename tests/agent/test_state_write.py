"""An agent whose state file cannot be saved still reports, says so, and
every report keeps being accepted by the reconciler's check (no "replayed" forever).

Two ways to make the state unwritable that also work as root (where chmod does not stop
writes): ``os.replace`` raising ENOSPC (a full disk, after the file was written fine for
a while: the file on disk goes stale), and a state path whose parent is a regular file
(the state can neither be read nor written).
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from navarch.agent import AgentConfig, run_once
from navarch.reconcile.reports import ReportRejected, verify_report
from navarch.report import signing
from navarch.stores import open_store

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SECRET = b"fleet-secret-for-state-tests-0123"


class Reconciler:
    """The reconciler's report boundary for one node: remembers the last accepted sequence."""

    def __init__(self, cfg: AgentConfig) -> None:
        self.cfg = cfg
        self.last_sequence = 0

    def accept(self, now: datetime) -> dict[str, Any]:
        data = open_store(self.cfg.store).get(self.cfg.report_key).data
        summary = verify_report(
            data,
            fleet=self.cfg.fleet,
            pool=self.cfg.pool,
            node=self.cfg.node,
            fleet_secret=SECRET,
            last_sequence=self.last_sequence,
            now=now,
        )
        report = json.loads(data)
        assert summary is not None
        self.last_sequence = report["sequence"]
        return report


@pytest.fixture
def cfg(make_config: Callable[..., AgentConfig]) -> AgentConfig:
    key = signing.derive_node_key(SECRET, "demo", "train-0001").hex()
    return make_config(key=key)


def state_checks(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in report["checks"] if c["name"] == "agent_state"]


@pytest.fixture
def disk_full(
    cfg: AgentConfig, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[bool], None]]:
    """set_full(True): renaming onto the state file fails with ENOSPC (the file:// store,
    on another "disk", keeps working); set_full(False): the disk has room again."""
    real = os.replace

    def replace(src: Any, dst: Any) -> None:
        if os.fspath(dst) == cfg.state_file:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(src, dst)

    def set_full(full: bool) -> None:
        monkeypatch.setattr(os, "replace", replace if full else real)

    yield set_full


def test_agent_sequence_after_failed_state_write(
    cfg: AgentConfig, disk_full: Callable[[bool], None], validate_report: Any
) -> None:
    rec = Reconciler(cfg)
    t = [T0 + timedelta(minutes=n) for n in range(8)]
    good = [run_once(cfg, now=t[n]) for n in range(2)]
    rec.accept(t[1])
    stale = Path(cfg.state_file).read_bytes()

    disk_full(True)
    failing = []
    for n in range(2, 5):
        report = run_once(cfg, now=t[n])
        validate_report(report)
        assert rec.accept(t[n]) == report
        failing.append(report)
    assert Path(cfg.state_file).read_bytes() == stale  # the state on disk is stale
    for report in failing:
        (check,) = state_checks(report)
        assert check["status"] == "unknown" and check["action"] == "none"
        assert check["message"] == "agent state not writable: [Errno 28] No space left on device"
        assert check["evidence"]["errno"] == errno.ENOSPC
        assert (report["status"], report["action"]) == ("unknown", "none")
        assert report["health_score"] == 75
    seqs = [r["sequence"] for r in [*good, *failing]]
    assert seqs == sorted(set(seqs))
    assert failing[-1]["sequence"] >= int(t[4].timestamp() * 1000)  # the clock floor

    disk_full(False)
    healed = [run_once(cfg, now=t[n]) for n in (5, 6)]
    assert rec.accept(t[6]) == healed[-1]
    assert healed[0]["sequence"] > failing[-1]["sequence"]
    assert healed[1]["sequence"] == healed[0]["sequence"] + 1
    assert all(state_checks(r) == [] and r["status"] == "healthy" for r in healed)
    assert json.loads(Path(cfg.state_file).read_text())["sequence"] == healed[1]["sequence"]


class _NoReads:
    """A store the agent can write its report to but not read back (e.g. a put-only policy)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def get(self, key: str) -> Any:
        raise PermissionError("AccessDenied: GetObject")

    def put(self, key: str, data: bytes) -> Any:
        return self.inner.put(key, data)


def test_full_disk_and_unreadable_store_still_advance_from_the_clock(
    cfg: AgentConfig, disk_full: Callable[[bool], None]
) -> None:
    rec = Reconciler(cfg)
    store = _NoReads(open_store(cfg.store))
    t = [T0 + timedelta(minutes=n) for n in range(6)]
    run_once(cfg, now=t[0], store=store)
    rec.accept(t[0])
    disk_full(True)
    for n in (1, 2, 3):
        report = run_once(cfg, now=t[n], store=store)
        assert rec.accept(t[n])["sequence"] == report["sequence"]
        assert state_checks(report)
    disk_full(False)
    for n in (4, 5):
        report = run_once(cfg, now=t[n], store=store)
        assert rec.accept(t[n])["sequence"] == report["sequence"]
        assert not state_checks(report)


def test_state_path_under_a_regular_file(
    make_config: Callable[..., AgentConfig], tmp_path: Path, validate_report: Any
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the state directory should be\n")
    key = signing.derive_node_key(SECRET, "demo", "train-0001").hex()
    cfg = make_config(key=key, state_file=str(blocker / "agent-state.json"))
    rec = Reconciler(cfg)
    for n in range(3):
        now = T0 + timedelta(minutes=n)
        report = run_once(cfg, now=now)
        validate_report(report)
        assert rec.accept(now) == report
        (check,) = state_checks(report)
        assert check["message"].startswith("agent state not writable: ")
        assert check["status"] == "unknown"
        assert report["status"] == "unknown"


def test_replayed_is_what_the_fix_prevents(
    cfg: AgentConfig, disk_full: Callable[[bool], None]
) -> None:
    """The reconciler rejects a repeated sequence: the property the agent must keep."""
    rec = Reconciler(cfg)
    run_once(cfg, now=T0)
    rec.accept(T0)
    with pytest.raises(ReportRejected) as info:
        rec.accept(T0)
    assert info.value.reason == "replayed"

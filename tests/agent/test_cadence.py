"""The agent checks often and writes its report on change or heartbeat: what each check
writes to the store, and the consecutive counts the reports carry."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from navarch.agent import AgentConfig, run_once
from navarch.agent.runner import STREAK_WRITE_CAP
from navarch.stores import open_store

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _stored_sequence(cfg: AgentConfig) -> int:
    return int(json.loads(open_store(cfg.store).get(cfg.report_key).data)["sequence"])


def _checks(cfg: AgentConfig, count: int, start_s: float = 0, every_s: float = 30) -> list[int]:
    """Run `count` checks every_s apart; the stored report's sequence after each."""
    out = []
    for n in range(count):
        run_once(cfg, now=T0 + timedelta(seconds=start_s + n * every_s))
        out.append(_stored_sequence(cfg))
    return out


def _ecc(cfg: AgentConfig, gpu: int, errors: int) -> None:
    Path(cfg.faults_file).write_text(json.dumps({"ecc_uncorrected": {str(gpu): errors}}))  # type: ignore[arg-type]


def test_unchanged_healthy_checks_write_only_every_heartbeat(
    make_config: Callable[..., AgentConfig],
) -> None:
    cfg = make_config(heartbeat_s=300)
    # A new boot writes its first checks (the verdict's run of checks is counted up to the
    # cap), then nothing until the heartbeat.
    seqs = _checks(cfg, STREAK_WRITE_CAP + 4)
    first = seqs[0]  # the clock floor: a new node has no state yet
    assert seqs[:STREAK_WRITE_CAP] == list(range(first, first + STREAK_WRITE_CAP))
    assert seqs[STREAK_WRITE_CAP:] == [first + STREAK_WRITE_CAP - 1] * 4
    later = _checks(cfg, 1, start_s=(STREAK_WRITE_CAP - 1) * 30 + 300)
    assert later == [first + STREAK_WRITE_CAP]


def test_a_new_fault_is_written_at_the_next_check(
    make_config: Callable[..., AgentConfig],
) -> None:
    cfg = make_config(heartbeat_s=300)
    quiet = _checks(cfg, STREAK_WRITE_CAP + 1)
    _ecc(cfg, 3, 2)
    run_once(cfg, now=T0 + timedelta(seconds=(STREAK_WRITE_CAP + 1) * 30))
    stored = json.loads(open_store(cfg.store).get(cfg.report_key).data)
    assert stored["sequence"] == quiet[-1] + 1
    assert stored["status"] == "unhealthy"


def test_unhealthy_checks_carry_their_consecutive_count(
    make_config: Callable[..., AgentConfig],
) -> None:
    cfg = make_config(heartbeat_s=300)
    _ecc(cfg, 3, 2)
    reports = [run_once(cfg, now=T0 + timedelta(seconds=30 * n)) for n in range(3)]
    counts = [
        next(c["consecutive"] for c in r["checks"] if c["name"] == "ecc" and c["gpu_index"] == 3)
        for r in reports
    ]
    assert counts == [1, 2, 3]
    # Each count below the cap is a change: every one of these checks was written.
    assert _stored_sequence(cfg) == reports[-1]["sequence"] == reports[0]["sequence"] + 2
    # The fault gone ends its count; back again, it starts from 1.
    Path(cfg.faults_file).write_text("{}")  # type: ignore[arg-type]
    run_once(cfg, now=T0 + timedelta(seconds=90))
    _ecc(cfg, 3, 2)
    again = run_once(cfg, now=T0 + timedelta(seconds=120))
    assert (
        next(
            c["consecutive"] for c in again["checks"] if c["name"] == "ecc" and c["gpu_index"] == 3
        )
        == 1
    )


def test_busy_gpus_changing_is_written_at_once(make_config: Callable[..., AgentConfig]) -> None:
    cfg = make_config(heartbeat_s=300)
    seqs = _checks(cfg, STREAK_WRITE_CAP + 1)
    Path(cfg.faults_file).write_text(json.dumps({"process_count": {"0": 2}}))  # type: ignore[arg-type]
    run_once(cfg, now=T0 + timedelta(seconds=(STREAK_WRITE_CAP + 1) * 30))
    assert _stored_sequence(cfg) == seqs[-1] + 1


def test_heartbeat_zero_writes_every_check(make_config: Callable[..., AgentConfig]) -> None:
    cfg = make_config(heartbeat_s=0)
    seqs = _checks(cfg, STREAK_WRITE_CAP + 3)
    assert seqs == list(range(seqs[0], seqs[0] + STREAK_WRITE_CAP + 3))


def test_a_check_that_writes_nothing_reads_nothing_from_the_store(
    make_config: Callable[..., AgentConfig],
    monkeypatch: Any,
) -> None:
    cfg = make_config(heartbeat_s=300)
    _checks(cfg, STREAK_WRITE_CAP)
    store = open_store(cfg.store)
    calls: list[str] = []
    real_get, real_put = store.get, store.put
    monkeypatch.setattr(store, "get", lambda key: calls.append("get") or real_get(key))
    monkeypatch.setattr(
        store, "put", lambda key, data, **kw: calls.append("put") or real_put(key, data, **kw)
    )
    run_once(cfg, now=T0 + timedelta(seconds=STREAK_WRITE_CAP * 30), store=store)
    assert calls == []


def test_a_write_the_store_refused_is_retried_at_the_next_check(
    make_config: Callable[..., AgentConfig],
    monkeypatch: Any,
) -> None:
    from navarch.errors import StoreError

    cfg = make_config(heartbeat_s=300)
    _checks(cfg, STREAK_WRITE_CAP + 1)  # past the first checks of the boot: nothing changes
    Path(cfg.faults_file).write_text(json.dumps({"process_count": {"0": 2}}))  # type: ignore[arg-type]
    store = open_store(cfg.store)
    real_put = store.put

    def refuse(key: str, data: bytes, **kw: Any) -> str:
        raise StoreError("the store is down")

    monkeypatch.setattr(store, "put", refuse)
    with pytest.raises(StoreError):
        run_once(cfg, now=T0 + timedelta(seconds=(STREAK_WRITE_CAP + 1) * 30), store=store)
    monkeypatch.setattr(store, "put", real_put)
    # The same state at the next check: still a change the store has not seen.
    report = run_once(cfg, now=T0 + timedelta(seconds=(STREAK_WRITE_CAP + 2) * 30), store=store)
    stored = json.loads(open_store(cfg.store).get(cfg.report_key).data)
    assert stored["sequence"] == report["sequence"]
    assert stored["gpus"][0]["process_count"] == 2

"""Notifier pieces on their own: event derivation from an RunResult, per-sink filters,
condition start/clear bookkeeping, the Slack message, retries, and secrets kept out of
errors. HTTP goes to a recording server on 127.0.0.1."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest

from navarch.errors import AuthError, LeaseLost, NotifyError, RemoteError
from navarch.fleet.load import load_fleet
from navarch.fleet.spec import SinkSpec
from navarch.notify.dispatch import notify_run
from navarch.notify.events import (
    Event,
    EventKind,
    events_from_error,
    outcome_events,
    plan_conditions,
)
from navarch.notify.sinks import SlackSink, WebhookSink, accepts
from navarch.notify.state import NotifyState, load_state, transition
from navarch.outcome import Outcome, RunResult
from navarch.planner.model import (
    Action,
    ActionKind,
    ActionReason,
    DiagState,
    DiagWhy,
    Fault,
    Halt,
    HaltRule,
    Memory,
    Plan,
)
from navarch.planner.payloads import CordonPayload, DiagnosePayload, RemedyPayload
from navarch.report.health import FaultKey, Remedy
from navarch.stores import open_store
from tests.unattended.helpers import Recorder, write_fleet

NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
XID = "XID 79: GPU has fallen off the bus on 0000:5d:00"


def result(*outcomes: Outcome, halts: tuple[Halt, ...] = ()) -> RunResult:
    plan = Plan("demo", NOW, tuple(o.action for o in outcomes), halts=halts)
    return RunResult(plan, outcomes, Memory(fleet="demo"), "run-1")


def test_events_from_outcomes_and_halts() -> None:
    fault = Fault(FaultKey("xid:79", 0), Remedy.REBOOT, "boot-1", 3)
    cordon = Action(
        ActionKind.CORDON,
        "train",
        "demo-train-0002",
        XID,
        instance_id="i-2",
        payload=CordonPayload(fault=fault),
        action_reason=ActionReason.UNHEALTHY,
    )
    term = Action(
        ActionKind.TERMINATE,
        "train",
        "demo-train-0001",
        "drain finished",
        instance_id="i-1",
        action_reason=ActionReason.DRAIN_FINISHED,
    )
    launch = Action(
        ActionKind.PROVISION,
        "infer",
        "demo-infer-0003",
        "below target",
        action_reason=ActionReason.SCALE_UP,
    )
    r = result(
        Outcome.done(cordon, "cordoned"),
        Outcome.done(term, "terminated i-1"),
        Outcome.failed(launch, AuthError("denied"), "auth: denied"),
        halts=(
            Halt("train", "circuit_breaker", "2 of 3 sick"),
            Halt("train", "disruption_budget", "waits"),
        ),
    )
    kinds = [(e.kind, e.node) for e in outcome_events("demo", "run-1", r.outcomes)]
    assert kinds == [
        (EventKind.NODE_CORDONED, "demo-train-0002"),
        (EventKind.DRAIN_FINISHED, "demo-train-0001"),
        (EventKind.NODE_TERMINATED, "demo-train-0001"),
    ]
    assert dict(outcome_events("demo", "r", r.outcomes[:1])[0].details)["xid"] == "79"
    conditions = plan_conditions(r.plan)
    assert list(conditions) == ["train/breaker_tripped"]  # the budget only paces


def test_ladder_events_reboot_reset_and_diagnostics() -> None:
    """A reboot, a GPU reset and a diagnostics verdict are events; a diagnostic
    that only started (or still runs) is not; a failed one is a warning."""
    node = "demo-train-0002"
    reboot = Action(
        ActionKind.REBOOT,
        "train",
        node,
        "XID 79, first occurrence",
        payload=RemedyPayload(rung=Remedy.REBOOT),
        action_reason=ActionReason.REMEDY,
    )
    reset = Action(
        ActionKind.RESET_GPU,
        "train",
        node,
        "XID 48, first occurrence",
        payload=RemedyPayload(rung=Remedy.RESET_GPU),
        action_reason=ActionReason.REMEDY,
    )
    diag = Action(
        ActionKind.DIAGNOSE,
        "train",
        node,
        "return_requires_diag",
        payload=DiagnosePayload(level=2, why=DiagWhy.RETURN),
        action_reason=ActionReason.DIAGNOSTICS,
    )
    outcomes = [
        Outcome.done(reboot, "rebooted i-2"),
        Outcome.done(reset, "GPUs reset"),
        Outcome.done(
            diag, "dcgmi diag -r 2: running: dcgmi diag -r 2 started", diag=DiagState.RUNNING
        ),
        Outcome.done(diag, "dcgmi diag -r 2: pass: 3 test(s) passed", diag=DiagState.PASS),
        Outcome.done(diag, "dcgmi diag -r 2: fail: memory on GPU 1", diag=DiagState.FAIL),
    ]
    events = outcome_events("demo", "run-1", outcomes)
    assert [e.kind for e in events] == [
        EventKind.NODE_REBOOTED,
        EventKind.NODE_GPU_RESET,
        EventKind.NODE_DIAGNOSED,
        EventKind.NODE_DIAG_FAILED,
    ]
    assert events[-1].severity.value == "warning"
    assert dict(events[-1].details)["diag"] == "fail"


def test_errors_become_events() -> None:
    (lost,) = events_from_error("demo", LeaseLost("taken over"))
    assert lost.kind is EventKind.LEASE_LOST and lost.condition is None
    kinds = {e.kind for e in events_from_error("demo", AuthError("expired token"))}
    assert kinds == {EventKind.APPLY_FAILED, EventKind.AUTH_FAILURE}


def test_conditions_start_once_and_clear_once() -> None:
    r = result(halts=(Halt("infer", "capacity", "every place is out of capacity"),))
    current = plan_conditions(r.plan)
    sent, state = transition(NotifyState({}, {}, None), current, NOW)
    assert [e.kind for e in sent] == [EventKind.CAPACITY_EXHAUSTED]
    again, state = transition(state, current, NOW)
    assert again == ()
    # A failed apply knows nothing of capacity: it clears nothing.
    failed, state2 = transition(state, {}, NOW, complete=False)
    assert failed == () and set(state2.active) == {"infer/capacity_exhausted"}
    # A --pool train run leaves infer's condition alone; a full run clears it.
    assert transition(state, {}, NOW, pools=frozenset({"train"}))[0] == ()
    (clear,), state3 = transition(state, {}, NOW)
    assert (
        clear.kind is EventKind.CONDITION_CLEARED and clear.clears is EventKind.CAPACITY_EXHAUSTED
    )
    assert clear.dedup_key() == "navarch/demo/infer/capacity_exhausted" and state3.active == {}


def test_sink_filters() -> None:
    r = result(halts=(Halt("train", "circuit_breaker", "2 of 3 sick"),))
    (trip,) = plan_conditions(r.plan).values()
    _, state = transition(NotifyState({}, {}, None), {trip.condition: trip}, NOW)
    (clear,), _ = transition(state, {}, NOW)
    cordon = outcome_events(
        "demo",
        "r",
        [
            Outcome.done(
                Action(ActionKind.CORDON, "train", "n1", XID, action_reason=ActionReason.UNHEALTHY),
                "ok",
            )
        ],
    )[0]
    pd = SinkSpec("pagerduty", "pd")
    assert accepts(pd, trip) and accepts(pd, clear) and not accepts(pd, cordon)
    critical = SinkSpec("webhook", "w", min_severity="critical")
    assert accepts(critical, trip) and accepts(critical, clear) and not accepts(critical, cordon)
    only = SinkSpec("slack", "s", events=("node_cordoned",))
    assert accepts(only, cordon) and not accepts(only, trip)


def test_webhook_retries_a_503_then_delivers(recorder: Recorder) -> None:
    recorder.fail_first["/hook"] = 2
    spec = SinkSpec(
        "webhook",
        "ops",
        url={"value": f"{recorder.url}/hook"},
        secret={"env": "T_HOOK"},
        retries=2,
        timeout_s=5,
    )
    event = plan_conditions(result(halts=(Halt("t", "orphan_guard", "3 orphans"),)).plan)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("T_HOOK", "k")
        assert WebhookSink(spec, Path("."), 0).send(tuple(event.values())) == 1
    assert len(recorder.at("/hook")) == 3


def _webhook_and_two_events(url: str, timeout_s: int) -> tuple[WebhookSink, tuple[Event, ...]]:
    """A webhook sink without retries inside, and the two condition events of two halts."""
    spec = SinkSpec(
        "webhook", "ops", url={"value": url}, secret={"value": "k"}, retries=0, timeout_s=timeout_s
    )
    r = result(
        halts=(Halt("a", "orphan_guard", "3 orphans"), Halt("b", "circuit_breaker", "2 of 2 sick"))
    )
    events = tuple(plan_conditions(r.plan).values())
    assert len(events) == 2
    return WebhookSink(spec, Path("."), 0), events


def test_webhook_keeps_sending_after_a_failed_event_and_retries_it(recorder: Recorder) -> None:
    recorder.fail_first["/hook"] = 1  # the first event's POST fails; nothing retries inside
    sink, events = _webhook_and_two_events(f"{recorder.url}/hook", timeout_s=5)
    assert sink.send(events) == 2
    delivered = [req.json()["event_id"] for req in recorder.at("/hook")]
    assert len(delivered) == 3  # first (503), second, first again
    assert sorted(set(delivered[1:])) == sorted(e.event_id for e in events)


def test_a_webhook_that_times_out_is_posted_no_more_once_its_budget_is_spent(
    recorder: Recorder,
) -> None:
    recorder.delay_s["/slow"] = 3.0
    sink, events = _webhook_and_two_events(f"{recorder.url}/slow", timeout_s=1)
    with pytest.raises(NotifyError, match="2 of 2 events not delivered"):
        sink.send(events)
    assert len(recorder.at("/slow")) == 1  # the first timed out with the budget; no second


def test_failures_never_name_the_secret(recorder: Recorder, tmp_path: Path) -> None:
    recorder.status["/T0KEN-in-url"] = 500
    spec = SinkSpec("slack", "team", url={"env": "T_SLACK"}, retries=0)
    event = plan_conditions(result(halts=(Halt("t", "orphan_guard", "3 orphans"),)).plan)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("T_SLACK", f"{recorder.url}/T0KEN-in-url")
        with pytest.raises(NotifyError) as info:
            SlackSink(spec, tmp_path, 0).send(tuple(event.values()))
    assert "T0KEN" not in str(info.value) and "HTTP 500" in str(info.value)
    missing = SinkSpec("slack", "team", url={"env": "T_UNSET_VAR"})
    with pytest.raises(Exception, match="T_UNSET_VAR"):
        SlackSink(missing, tmp_path, 3).send(tuple(event.values()))


def test_slack_message_is_one_compact_summary(recorder: Recorder, tmp_path: Path) -> None:
    spec = SinkSpec("slack", "team", url={"value": f"{recorder.url}/slack"})
    r = result(
        Outcome.done(
            Action(
                ActionKind.CORDON,
                "train",
                "demo-train-0002",
                XID,
                action_reason=ActionReason.UNHEALTHY,
            ),
            "ok",
        ),
        halts=(Halt("infer", "circuit_breaker", "2 of 2 sick"),),
    )
    events = outcome_events("demo", "r", r.outcomes) + tuple(plan_conditions(r.plan).values())
    assert SlackSink(spec, tmp_path, 0).send(events) == 1
    (req,) = recorder.at("/slack")
    text = req.json()["text"]
    lines = text.splitlines()
    assert lines[0] == "*navarch* fleet `demo`: 2 events"
    assert lines[1].startswith(":rotating_light: *breaker tripped* (infer)")  # worst first
    assert "demo-train-0002 cordoned: XID 79" in lines[2]


def test_dispatch_logs_a_failed_sink_and_saves_state(
    tmp_path: Path, recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    recorder.status["/down"] = 500
    write_fleet(
        tmp_path,
        notify=[
            {
                "type": "webhook",
                "url": f"{recorder.url}/down",
                "secret": {"env": "T_HOOK2"},
                "retries": 0,
                "timeout": "1s",  # the sink's retry budget: a second, not the default
            },
            {"type": "log", "path": "events.jsonl"},
        ],
    )
    spec = load_fleet(tmp_path / "fleet.yaml")
    store = open_store(spec.store_url, base_dir=spec.base_dir)
    r = result(halts=(Halt("train", "circuit_breaker", "2 of 3 sick"),))
    with pytest.MonkeyPatch.context() as mp, caplog.at_level(logging.WARNING, "navarch.notify"):
        mp.setenv("T_HOOK2", "secret-value-xyz")
        deliveries = notify_run(spec, store, now=NOW, run_id="r1", result=r)
    assert {(d.type, d.ok) for d in deliveries} == {("webhook", False), ("log", True)}
    assert "notification to sink webhook-1 failed" in caplog.text
    assert "secret-value-xyz" not in caplog.text
    assert set(load_state(store, "demo").active) == {"train/breaker_tripped"}
    lines = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [x["kind"] for x in lines] == ["breaker_tripped"]


def test_a_failing_action_is_reported_once_until_it_succeeds(tmp_path: Path) -> None:
    write_fleet(tmp_path, notify=[{"type": "log", "path": "events.jsonl"}])
    spec = load_fleet(tmp_path / "fleet.yaml")
    store = open_store(spec.store_url, base_dir=spec.base_dir)
    cordon = Action(
        ActionKind.CORDON,
        "train",
        "demo-train-0002",
        XID,
        instance_id="i-2",
        action_reason=ActionReason.UNHEALTHY,
    )
    failing = result(
        Outcome.failed(cordon, RemoteError("10.0.0.2", "scontrol", 1, "ssh: exit 1"), "ssh: exit 1")
    )
    for _ in range(3):  # a cron job retrying a failing cordon
        notify_run(spec, store, now=NOW, run_id="r", result=failing)
    notify_run(spec, store, now=NOW, run_id="r", result=result(Outcome.done(cordon, "cordoned")))
    lines = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [(x["kind"], x["node"]) for x in lines] == [
        ("action_failed", "demo-train-0002"),
        ("node_cordoned", "demo-train-0002"),
        ("condition_cleared", "demo-train-0002"),
    ]
    assert lines[0]["condition"] == "train/demo-train-0002/cordon/action_failed"
    assert load_state(store, "demo").active == {}


def test_a_block_fault_halt_is_notified_as_a_critical_condition() -> None:
    halt = Halt("train", HaltRule.BLOCK_FAULT, "rack or switch fault in block z1/rack-1: ...")
    (event,) = plan_conditions(result(halts=(halt,)).plan).values()
    assert event.kind is EventKind.BLOCK_FAULT
    assert event.severity.value == "critical"
    assert event.condition == "train/block_fault"


def test_webhook_body_carries_the_time_the_event_happened(
    tmp_path: Path, recorder: Recorder
) -> None:
    write_fleet(
        tmp_path,
        notify=[{"type": "webhook", "url": f"{recorder.url}/hook", "secret": {"env": "T_HOOK3"}}],
    )
    spec = load_fleet(tmp_path / "fleet.yaml")
    store = open_store(spec.store_url, base_dir=spec.base_dir)
    later = datetime(2026, 11, 1, 12, 5, 30, tzinfo=UTC)
    r = result(halts=(Halt("train", "circuit_breaker", "2 of 3 sick"),))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("T_HOOK3", "k")
        notify_run(spec, store, now=later, run_id="r1", result=r)
    (req,) = recorder.at("/hook")
    assert req.json()["kind"] == "breaker_tripped"
    assert req.json()["time"] == "2026-11-01T12:05:30Z"

"""What a pool's mode held back (Plan.would) as every reader says it: the plan's text,
markdown and JSON (and a saved plan read back), the would_act notification, the metrics,
`history` and `navarch report`'s grouping. Plans and audit records are built as data
(composed here), so these pin the readers alone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from navarch.fleet.modes import Mode
from navarch.history import History, Trigger, event_from_record, render_history
from navarch.notify.events import EventKind, plan_conditions
from navarch.notify.metrics import RunFacts, build_registry
from navarch.notify.state import NotifyState, transition
from navarch.notify.status_page import page_context
from navarch.outcome import RunResult
from navarch.planner.model import Action, ActionKind, ActionReason, Memory, Plan
from navarch.planner.modes import Would
from navarch.planner.payloads import CordonPayload, Fault, Place, ProvisionPayload
from navarch.reconcile.fault_report import NodeNow, build_report, render_report
from navarch.reconcile.render import plan_from_json, plan_to_json, render_markdown, render_text
from navarch.report.health import FaultKey, Remedy
from tests.planner.builders import fleet_doc, fleet_from_dict, pool_doc

NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
NODE = "demo-train-0002"
XID = "XID 79: GPU has fallen off the bus on 0000:5d:00"
FAULT = Fault(FaultKey("xid:79", 0), Remedy.REBOOT, "boot-1", 7)

CORDON = Action(
    ActionKind.CORDON,
    "train",
    NODE,
    XID,
    instance_id="i-0002",
    payload=CordonPayload(repair=True, fault=FAULT),
    action_reason=ActionReason.UNHEALTHY,
)
LAUNCH = Action(
    ActionKind.PROVISION,
    "train",
    "demo-train-0004",
    f"replaces {NODE}",
    payload=ProvisionPayload(places=(Place("z1", "t1", False, 0),), replaces=NODE),
    action_reason=ActionReason.REPLACEMENT,
)
PLAN = Plan(
    "demo",
    NOW,
    (),
    would=(Would(CORDON, Mode.OBSERVE, "xid:79"), Would(LAUNCH, Mode.OBSERVE, "xid:79")),
)


def test_the_plan_says_would_cordon_and_would_replace_with_the_mode_on_each_line() -> None:
    text = render_text(PLAN)
    assert f"  ? would cordon {NODE} (i-0002)  [mode observe]\n      # (because {XID})" in text
    assert f"  ? would replace {NODE} with demo-train-0004  [mode observe]" in text
    assert "Would (held by mode, not executed): 1 cordon, 1 provision in observe." in text
    assert "navarch will perform" not in text and not PLAN.converged
    md = render_markdown(PLAN)
    assert f"? would cordon {NODE}  [mode observe]" in md and "Held back by the pools' modes" in md


def test_a_saved_plan_keeps_its_would_rows_and_they_stay_out_of_the_actions() -> None:
    doc = plan_to_json(PLAN)
    assert doc["actions"] == [] and doc["summary"]["cordon"] == 0
    assert [(w["action"], w["mode"], w["fault_kind"]) for w in doc["would"]] == [
        ("cordon", "observe", "xid:79"),
        ("provision", "observe", "xid:79"),
    ]
    back = plan_from_json({**doc, "state_serial": 0, "inventory_fingerprint": ""})
    assert back.would == PLAN.would and back.actions == ()
    assert "would" not in plan_to_json(Plan("demo", NOW, ()))  # absent when none


def test_would_act_is_notified_once_while_it_holds_and_cleared_after() -> None:
    current = plan_conditions(PLAN)
    sent, state = transition(NotifyState({}, {}, None), current, NOW)
    assert [e.kind for e in sent] == [EventKind.WOULD_ACT, EventKind.WOULD_ACT]
    cordon = sent[0]
    assert cordon.message == f"would cordon {NODE} (pool mode observe): {XID}"
    assert dict(cordon.details)["mode"] == "observe" and dict(cordon.details)["xid"] == "79"
    assert cordon.condition == f"train/{NODE}/cordon/would_act"
    assert transition(state, plan_conditions(PLAN), NOW)[0] == ()
    cleared, _ = transition(state, {}, NOW)
    assert {e.kind for e in cleared} == {EventKind.CONDITION_CLEARED}


def test_metrics_give_each_pools_mode_and_the_actions_it_held_back() -> None:
    pool = pool_doc(target=3)
    pool["mode"] = "observe"
    spec = fleet_from_dict(fleet_doc("demo", {"train": pool}))
    result = RunResult(PLAN, (), Memory("demo"), "run-1")
    reg = build_registry(spec, RunFacts(result, NOW, 1.0))
    get = reg.get_sample_value
    assert get("navarch_pool_mode", {"fleet": "demo", "pool": "train", "mode": "observe"}) == 1
    assert get("navarch_pool_mode", {"fleet": "demo", "pool": "train", "mode": "full"}) == 0
    labels = {"fleet": "demo", "pool": "train", "kind": "cordon", "mode": "observe"}
    assert get("navarch_last_apply_would_actions", labels) == 1


def _record(minutes: int, action: str, **extra: object) -> dict[str, object]:
    return {
        "time": (NOW + timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z"),
        "run_id": f"run-{minutes}",
        "action": action,
        "pool": "train",
        "node": NODE,
        "instance_id": "i-0002",
        "reason": XID,
        "ok": "would" not in extra,
        "detail": "",
        "error": None,
        "actor": "scheduled",
        **extra,
    }


EVENTS = tuple(
    e
    for e in (
        event_from_record(_record(0, "provision", reason="0 of 3 nodes present"), "k"),
        event_from_record(_record(10, "cordon", would="observe", fault="xid:79@gpu0"), "k"),
        event_from_record(_record(10, "drain", would="observe", fault="xid:79"), "k"),
        event_from_record(_record(15, "cordon", would="observe", fault="xid:79@gpu0"), "k"),
        event_from_record(_record(20, "cordon", fault="xid:79@gpu0"), "k"),
        event_from_record(_record(20, "drain"), "k"),
    )
    if e is not None
)


def test_history_says_would_and_not_done_for_what_a_mode_held_back() -> None:
    h = History("demo", NODE, NOW, NOW + timedelta(hours=1), EVENTS, (), (), 1, 0)
    text = render_history(h)
    assert f"would cordon {NODE}  not done (mode observe)  by " in text
    assert f"  cordon {NODE}  ok  by " in text
    assert EVENTS[1].actor is Trigger.SCHEDULED and EVENTS[1].would == "observe"


def test_the_report_groups_by_fault_class_folds_runs_and_closes_with_the_node_now() -> None:
    now = {NODE: NodeNow(NODE, "train", "i-0002", "running", "draining", "drain started")}
    r = build_report("demo", NOW, NOW + timedelta(hours=1), EVENTS, now, (("train", "cordon"),))
    assert [g for g, _ in r.groups] == ["gpu_lost", "no fault"]
    (story,) = dict(r.groups)["gpu_lost"]
    assert [(w.action, w.runs, w.first, w.last) for w in story.would] == [
        ("cordon", 2, NOW + timedelta(minutes=10), NOW + timedelta(minutes=15)),
        ("drain", 1, NOW + timedelta(minutes=10), NOW + timedelta(minutes=10)),
    ]
    assert [d.action for d in story.done] == ["cordon", "drain"]  # the drain follows its cordon
    (launch,) = dict(r.groups)["no fault"]
    assert [d.action for d in launch.done] == ["provision"]  # before any fault
    text = render_report(r)
    assert "modes now: pool train cordon" in text
    assert "would cordon (mode observe): first 2026-11-01T12:10:00Z" in text and "2 runs" in text
    assert "now: draining (drain started); instance i-0002 running" in text


def test_the_status_page_names_the_mode_beside_what_it_held_back() -> None:
    spec = fleet_from_dict(fleet_doc("demo", {"train": pool_doc(target=3)}))
    (pool,) = page_context(spec, PLAN, Memory("demo"), NOW)["pools"]
    assert f"mode observe: would cordon {NODE} (not done): {XID}" in pool["halts"]

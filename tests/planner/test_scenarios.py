"""Planner scenarios as data: every tests/planner/scenarios/*.yaml runs observe() then plan().

A scenario file holds (times are RFC 3339, or relative to `now` like "-20m", "+1h", "now"):

  description: what the scenario proves
  now: the run's clock
  fleet: |            the fleet.yaml text (loaded with navarch.fleet.load.load_fleet)
  inventory:          owned instances: node, [pool], [state], [launched_at], [instance_id],
                      [zone], [instance_type], [spot], [health], [health_detail], [event],
                      [event_deadline] (the cloud's own status), [host_id], [topology]
                      (its place in the fabric, coarse to fine; pool defaults from
                      <fleet>-<pool>-NNNN; zone, type and spot default to the pool's first place)
  foreign:            other instances: instance_id, [tags], [provider], [launched_at]
  reports:            node -> report fields (sequence, boot_id, generated_at, status, fatal,
                      fault_key ("xid:79@gpu0": the agent's structured key), findings,
                      notice_kind, process_count, utilization_pct, acceptance {started_at,
                      finished_at (null: running), reset, results [{test, status, figure,
                      threshold, unit, reason, detail}]}), or
                      {rejected: reason} (the summary is then the remembered one, as
                      navarch.reconcile.reports.read_reports passes it)
  memory:             nodes: node -> phase, phase_at, phase_reason, repair, streak,
                      streak_sequence, first_seen_at, report, and the remediation
                      ladder's fault {key, action, boot_id, sequence}, faults [[kind, time]],
                      rung, rung_fault, rung_at, return_streak, operator_cordon, diag {level,
                      why, state, at, started_at, detail}, diag_cordon, impaired_since, impaired_cordon, silent_cordon, scale_down_cordon,
                      acceptance_cordon, peer_test {test, status, figure, ...}, peer_run; pools: pool -> next_index,
                      repairs, exhausted [{[provider], zone, instance_type, spot, until}], desired,
                      desired_from_target, scaled_at, host_faults [[host, key, time]],
                      settings {scheduler, playbooks, ssh, drain_timeout, stale_after,
                      max_unavailable} (a removed pool's, as recorded), retiring_since,
                      spares [node] (warm spares)
  drain_checks:       node -> bool (scheduler drain-check results this run)
  xfail:              (only for a planner bug found by the scenario) the bug, in one line
  expect:
    actions:          in order: {action, pool, node, reason_contains?, places_first?,
                      places?, replaces?, desired?, repair?, action_reason?,
                      avoid_hosts?, block?, hand_back?, peer?}
    halts:            in order: {pool, rule, message_contains?}
    lifecycles:       node -> lifecycle (optional)
    memory:           nodes: node -> {streak?, streak_sequence?} after observe; pools:
                      pool -> {settings?, retiring_since?, ...} after observe (optional)
    notes_contain:    substrings each found in some note or pending line (optional)
    pending_contain:  substrings each found in some pending line (optional)
    converged:        whether the plan is "No changes" (optional)
    drift:            node -> substring of its drift reason, or null for none (optional)
  options:            PlanOptions: pools, replace, destroy, force, allow_destroy (optional)
  inventory entries may carry tags: {key: value} (labels, navarch-spec); memory nodes
  may carry launch: {setting: json value} (PoolSpec.launch_settings at launch)
    foreign:          how many instances observe() set aside as foreign (optional)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import builders
import pytest

from navarch.fleet.spec import FleetSpec
from navarch.inventory import Instance
from navarch.planner.context import PlanOptions
from navarch.planner.model import (
    Action,
    Diag,
    DiagState,
    DiagWhy,
    Memory,
    Plan,
    ReportObservation,
    ReportSummary,
)
from navarch.planner.observe import Observed, observe
from navarch.planner.payloads import ProvisionPayload
from navarch.planner.plan import plan
from navarch.report.acceptance import AcceptanceResult, AcceptanceRun, SuiteDepth
from navarch.report.timefmt import ts
from tests.support.yamlfile import read_yaml

SCENARIOS = Path(__file__).parent / "scenarios"
_SCENARIO_KEYS = {
    "description",
    "now",
    "fleet",
    "inventory",
    "foreign",
    "reports",
    "memory",
    "drain_checks",
    "expect",
    "xfail",
    "options",
}
_ACTION_KEYS = {
    "action",
    "pool",
    "node",
    "reason_contains",
    "places_first",
    "places",
    "replaces",
    "desired",
    "repair",
    "instance_id",
    "tags",
    "backoff",
    "level",
    "why",
    "action_reason",
    "avoid_hosts",
    "block",
    "hand_back",
    "peer",
}


@dataclass(frozen=True)
class Inputs:
    spec: FleetSpec
    inventory: tuple[Instance, ...]
    reports: Mapping[str, ReportObservation]
    memory: Memory
    now: datetime
    drain_checks: Mapping[str, bool]
    options: PlanOptions = PlanOptions()


def _pool_of(spec: FleetSpec, node: str) -> str:
    prefix = spec.name + "-"
    assert node.startswith(prefix), f"{node}: give its pool explicitly"
    return node[len(prefix) :].rsplit("-", 1)[0]


def _summary(raw: Mapping[str, Any], now: datetime) -> ReportSummary:
    fields = dict(raw)
    generated_at = builders.when(now, fields.pop("generated_at", "-30s"))
    assert generated_at is not None
    if "notice_deadline" in fields:
        fields["notice_deadline"] = builders.when(now, fields["notice_deadline"])
    run = fields.pop("acceptance", None)
    s = builders.summary(generated_at=generated_at, **fields)
    return s if run is None else replace(s, acceptance=_acceptance(run, s.boot_id, now))


def _acceptance(raw: Mapping[str, Any], boot_id: str, now: datetime) -> AcceptanceRun:
    """A report's acceptance run {started_at, finished_at (null: running), reset, results:
    [{test, status, figure, threshold, unit, reason, detail}]}, times relative to now."""
    started = builders.when(now, raw.get("started_at", "-5m"))
    finished = builders.when(now, raw.get("finished_at", "-1m"))
    return AcceptanceRun(
        boot_id,
        SuiteDepth.QUICK,
        ts(started),
        ts(finished) if finished is not None else None,
        int(raw.get("reset", 0)),
        tuple(AcceptanceResult.from_json(r) for r in raw.get("results") or ()),
    )


def _diag(raw: Mapping[str, Any] | None, now: datetime) -> Diag | None:
    """A memory diag {level, why, state, at, started_at, detail}, times relative to now."""
    if raw is None:
        return None
    at = builders.when(now, raw.get("at", "-1m"))
    assert at is not None
    return Diag(
        int(raw.get("level", 2)),
        DiagWhy(raw.get("why", "return")),
        DiagState(raw["state"]),
        at,
        builders.when(now, raw.get("started_at")),
        raw.get("detail", ""),
    )


def build_inputs(doc: Mapping[str, Any], tmp_path: Path) -> Inputs:
    """Turn one scenario document into observe()'s arguments."""
    unknown = set(doc) - _SCENARIO_KEYS
    assert not unknown, f"unknown scenario keys {sorted(unknown)}"
    now = builders.when(builders.BASE_NOW, doc["now"])
    assert now is not None
    spec = builders.fleet_from_yaml(doc["fleet"], tmp_path)

    mem_doc = doc.get("memory") or {}
    node_mems = []
    for name, raw in (mem_doc.get("nodes") or {}).items():
        raw = dict(raw)
        report = raw.pop("report", None)
        # Acceptance's fields: set on the built memory (builders.node_memory predates them).
        acceptance = {k: raw.pop(k) for k in ("peer_run", "accepted") if k in raw}
        if "peer_test" in raw:
            acceptance["peer_test"] = AcceptanceResult.from_json(raw.pop("peer_test"))
        node_mems.append(
            builders.node_memory(
                name,
                raw.pop("pool", None) or _pool_of(spec, name),
                phase=raw.pop("phase", ""),
                phase_at=builders.when(now, raw.pop("phase_at", None)),
                first_seen_at=builders.when(now, raw.pop("first_seen_at", None)),
                report=_summary(report, now) if report is not None else None,
                rung_at=builders.when(now, raw.pop("rung_at", None)),
                faults=[(k, builders.when(now, t)) for k, t in raw.pop("faults", [])],
                diag=_diag(raw.pop("diag", None), now),
                impaired_since=builders.when(now, raw.pop("impaired_since", None)),
                **raw,
            )
        )
        if acceptance:
            node_mems[-1] = replace(node_mems[-1], **acceptance)
    pool_mems = []
    for name, raw in (mem_doc.get("pools") or {}).items():
        raw = dict(raw)
        pool_mems.append(
            builders.pool_memory(
                name,
                repairs=[builders.when(now, r) for r in raw.pop("repairs", [])],
                exhausted=[
                    builders.exhausted(
                        e["zone"],
                        e["instance_type"],
                        spot=e.get("spot", False),
                        until=builders.when(now, e["until"]),
                        failures=e.get("failures", 1),
                        provider=e.get("provider") or spec.pool(name).provider,
                    )
                    for e in raw.pop("exhausted", [])
                ],
                scaled_at=builders.when(now, raw.pop("scaled_at", None)),
                host_faults=[
                    (h, k, builders.when(now, w)) for h, k, w in raw.pop("host_faults", [])
                ],
                settings=(
                    builders.pool_settings(raw.pop("settings")) if "settings" in raw else None
                ),
                retiring_since=builders.when(now, raw.pop("retiring_since", None)),
                **raw,
            )
        )
    mem = builders.memory(spec.name, node_mems, pool_mems)

    inventory: list[Instance] = []
    for raw in doc.get("inventory") or []:
        raw = dict(raw)
        node = raw.pop("node")
        pool_name = raw.pop("pool", None) or _pool_of(spec, node)
        # A node is launched in its pool's first place unless the scenario says otherwise.
        declared = {p.name: p for p in spec.pools}.get(pool_name)
        if declared is not None:
            first = declared.launch_places()[0]
            raw = {
                "provider": first.provider,
                "zone": first.zone,
                "instance_type": first.instance_type,
                "spot": first.spot,
                **raw,
            }
        inventory.append(
            builders.instance(
                spec.name,
                pool_name,
                node,
                launched_at=builders.when(now, raw.pop("launched_at", "-2h")),
                event_deadline=builders.when(now, raw.pop("event_deadline", None)),
                **raw,
            )
        )
    for raw in doc.get("foreign") or []:
        raw = dict(raw)
        inventory.append(
            builders.foreign_instance(
                raw.pop("instance_id"),
                launched_at=builders.when(now, raw.pop("launched_at", "-2h")),
                **raw,
            )
        )

    reports: dict[str, ReportObservation] = {}
    for node, raw in (doc.get("reports") or {}).items():
        pool = _pool_of(spec, node)
        if "rejected" in raw:
            nm = mem.node(node)
            reports[node] = builders.observation(
                node, pool, nm.report if nm else None, rejected=raw["rejected"]
            )
        else:
            reports[node] = builders.observation(node, pool, _summary(raw, now))
    opts = dict(doc.get("options") or {})
    options = PlanOptions(
        pools=frozenset(opts.pop("pools")) if "pools" in opts else None,
        replace=frozenset(opts.pop("replace", ())),
        capabilities=builders.capabilities(spec),
        **opts,
    )
    return Inputs(
        spec, tuple(inventory), reports, mem, now, dict(doc.get("drain_checks") or {}), options
    )


def run(inputs: Inputs) -> tuple[Observed, Plan]:
    observed = observe(
        inputs.spec,
        inputs.inventory,
        inputs.reports,
        inputs.memory,
        inputs.now,
        inputs.drain_checks,
    )
    return observed, plan(
        inputs.spec,
        observed.views,
        observed.memory,
        inputs.now,
        inputs.options,
        observed.duplicates,
    )


def _show(p: Plan) -> str:
    lines = [
        f"  {a.kind.value} {a.pool} {a.node} ({a.reason})"
        + (
            f" places={[pl.label() for pl in a.payload.places]}"
            if isinstance(a.payload, ProvisionPayload) and a.payload.places
            else ""
        )
        for a in p.actions
    ]
    lines += [f"  HALT {h.pool} {h.rule}: {h.message}" for h in p.halts]
    lines += [f"  note: {n}" for n in p.notes]
    lines += [f"  pending: {n}" for n in p.pending]
    return "\n".join(lines) or "  (empty plan)"


def _payload_fields(a: Action) -> dict[str, Any]:
    """The action's payload as {field: value}: the keys the plan JSON and `expect` use."""
    return (
        {f.name: getattr(a.payload, f.name) for f in dataclasses.fields(a.payload)}
        if a.payload
        else {}
    )


def check(doc: Mapping[str, Any], observed: Observed, p: Plan) -> None:
    """Compare a run against a scenario's `expect` block; the message shows the whole plan."""
    expect = doc.get("expect") or {}
    shown = f"\n{doc['description'].strip()}\nplan was:\n{_show(p)}"

    want_actions = expect.get("actions") or []
    assert len(p.actions) == len(want_actions), f"wrong number of actions{shown}"
    for i, (got, want) in enumerate(zip(p.actions, want_actions, strict=True)):
        unknown = set(want) - _ACTION_KEYS
        assert not unknown, f"unknown expected-action keys {sorted(unknown)}"
        where = f"action {i}{shown}"
        assert got.kind.value == want["action"], where
        assert got.pool == want["pool"], where
        assert got.node == want.get("node"), where
        if "reason_contains" in want:
            assert want["reason_contains"] in got.reason, where
        f = _payload_fields(got)
        if "places_first" in want:
            assert f.get("places", ()) and f.get("places", ())[0].label() == want["places_first"], (
                where
            )
        if "places" in want:
            assert [pl.label() for pl in f.get("places", ())] == want["places"], where
        if "replaces" in want:
            assert f.get("replaces", None) == want["replaces"], where
        if "desired" in want:
            assert f.get("desired", None) == want["desired"], where
        if "repair" in want:
            assert f.get("repair", False) == want["repair"], where
        if "instance_id" in want:
            assert got.instance_id == want["instance_id"], where
        if "tags" in want:
            assert dict(f.get("tags", ())) == want["tags"], where
        if "backoff" in want:
            assert f.get("backoff", False) == want["backoff"], where
        if "level" in want:
            assert f.get("level", None) == want["level"], where
        if "why" in want:
            assert f.get("why", None) == want["why"], where
        if "action_reason" in want:
            assert got.action_reason.value == want["action_reason"], where
        if "avoid_hosts" in want:
            assert list(f.get("avoid_hosts", ())) == want["avoid_hosts"], where
        if "block" in want:
            assert f.get("block", "") == want["block"], where
        if "hand_back" in want:
            assert f.get("hand_back", False) == want["hand_back"], where
        if "peer" in want:
            assert f.get("peer", "") == want["peer"], where

    want_halts = expect.get("halts") or []
    assert [(h.pool, h.rule) for h in p.halts] == [(h["pool"], h["rule"]) for h in want_halts], (
        f"halts{shown}"
    )
    for got_halt, want_halt in zip(p.halts, want_halts, strict=True):
        if "message_contains" in want_halt:
            assert want_halt["message_contains"] in got_halt.message, f"halt message{shown}"

    lifecycles = {v.node: v.lifecycle.value for v in observed.views}
    views = {v.node: v for v in observed.views}
    for node, text in (expect.get("drift") or {}).items():
        got_drift = views[node].drift
        if text is None:
            assert got_drift is None, f"{node} drifts: {got_drift}{shown}"
        else:
            assert got_drift is not None and text in got_drift, f"{node} drift {got_drift!r}{shown}"
    for node, lc in (expect.get("lifecycles") or {}).items():
        assert lifecycles.get(node) == lc, f"lifecycle of {node}: {lifecycles}{shown}"

    for node, fields in ((expect.get("memory") or {}).get("nodes") or {}).items():
        nm = observed.memory.node(node)
        assert nm is not None, f"{node} missing from memory"
        for key, value in fields.items():
            assert getattr(nm, key) == value, f"memory {node}.{key}: {getattr(nm, key)!r}"
    for pool, fields in ((expect.get("memory") or {}).get("pools") or {}).items():
        pm = observed.memory.pool(pool)
        for key, value in fields.items():
            if key == "settings":
                want = builders.pool_settings(value) if value is not None else None
                assert pm.settings == want, f"memory pool {pool}.settings: {pm.settings!r}"
            else:
                assert getattr(pm, key) == value, f"memory pool {pool}.{key}: {getattr(pm, key)!r}"

    for text in expect.get("notes_contain") or []:
        assert any(text in n for n in p.notes + p.pending), f"no note contains {text!r}{shown}"
    for text in expect.get("pending_contain") or []:
        assert any(text in n for n in p.pending), f"no pending line contains {text!r}{shown}"
    if "converged" in expect:
        assert p.converged is expect["converged"], f"converged is {p.converged}{shown}"

    if "foreign" in expect:
        assert len(observed.foreign) == expect["foreign"], shown

    # Whatever a scenario expects, a plan never names a foreign instance (safety rule 1).
    foreign_ids = {i.instance_id for i in observed.foreign}
    assert not any(a.instance_id in foreign_ids for a in p.actions if a.instance_id), shown


def _params() -> list[Any]:
    out = []
    for path in sorted(SCENARIOS.glob("*.yaml")):
        doc = read_yaml(path)
        marks = []
        if doc.get("xfail"):
            marks.append(pytest.mark.xfail(strict=True, reason=doc["xfail"]))
        out.append(pytest.param(path, id=path.stem, marks=marks))
    return out


@pytest.mark.parametrize("path", _params())
def test_scenario(path: Path, tmp_path: Path) -> None:
    doc = read_yaml(path)
    inputs = build_inputs(doc, tmp_path)
    observed, p = run(inputs)
    check(doc, observed, p)
    # Pure and deterministic: the same inputs plan the same, byte for byte.
    assert run(inputs)[1] == p


def test_every_scenario_is_described() -> None:
    paths = sorted(SCENARIOS.glob("*.yaml"))
    assert len(paths) >= 30
    for path in paths:
        doc = read_yaml(path)
        assert str(doc.get("description", "")).strip(), f"{path.name} has no description"
        assert "expect" in doc, f"{path.name} has no expect block"

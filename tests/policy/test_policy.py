"""Health policy rules (navarch/fleet/policy.py): compile at load, evaluate per report."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from navarch.agent import run_once
from navarch.errors import ConfigError
from navarch.fleet.policy import (
    SAMPLE_REPORT,
    PolicyResult,
    compile_rule,
    default_rule_data,
    evaluate,
)
from navarch.fleet.schemas import validator_for
from navarch.report.health import Remedy
from navarch.report.health import Status as RuleStatus
from tests.support.agent import agent_config

REPO = Path(__file__).resolve().parents[2]
HOT = {
    "name": "hot-gpu",
    "when": "gpus.exists(g, g.temperature_c >= 85.0)",
    "status": "unhealthy",
    "action": "replace",
}


def agent_report(
    tmp_path: Path, *, faults: dict[str, Any] | None = None, kern_log: str = ""
) -> dict[str, Any]:
    """A real report from the agent (fake GPU backend, 4 GPUs), not written anywhere."""
    (tmp_path / "faults.json").write_text(json.dumps(faults or {}))
    (tmp_path / "kern.log").write_text(kern_log)
    config = agent_config(
        tmp_path,
        node="demo-train-0001",
        instance_id="i-0001",
        gpus_per_node=4,
        gpu_count=4,
        boot_id="boot-1",
        notice_file=str(tmp_path / "notice.json"),
    )
    report = run_once(config, now=datetime(2026, 11, 22, 12, 0, tzinfo=UTC), to_stdout=True)
    assert validator_for("health-report.schema.json").is_valid(report)
    return report


def rule(**over: str):
    r = {**HOT, **over}
    return compile_rule(r["name"], r["when"], r["status"], r["action"])


def test_hot_gpu_rule_turns_an_88c_gpu_into_a_replacement(tmp_path: Path) -> None:
    report = agent_report(tmp_path, faults={"temperature_c": {"2": 88.0}})
    result = evaluate([[rule()]], report)
    assert result == PolicyResult(RuleStatus.UNHEALTHY, Remedy.REPLACE, (rule(),), None)


def test_cool_gpus_fall_through_to_the_builtin_rules(tmp_path: Path) -> None:
    report = agent_report(tmp_path)
    assert report["status"] == "healthy"
    result = evaluate([[rule()]], report)
    assert (result.status, result.action, result.rule) == (
        "healthy",
        "none",
        "builtin:agent-healthy",
    )


def test_builtin_rules_set_a_status_and_keep_the_catalogues_remedy(tmp_path: Path) -> None:
    line = (
        "[  100.000000] NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus.\n"
    )
    report = agent_report(tmp_path, kern_log=line)
    assert report["status"] == "unhealthy" and report["action"] == "reboot"
    result = evaluate([], report)
    assert (result.status, result.action, result.rule) == (
        "unhealthy",
        "reboot",
        "builtin:agent-unhealthy",
    )


def test_first_match_per_rule_set_worst_over_sets() -> None:
    report = {**SAMPLE_REPORT, "status": "healthy", "action": "none", "xids": []}
    pool = [
        compile_rule("mild", "true", "degraded", "none"),
        compile_rule("never-reached", "true", "unhealthy", "replace"),
    ]
    fleet = [compile_rule("reboot-it", "size(gpus) == 1", "degraded", "reboot")]
    result = evaluate([pool, fleet], report)
    assert (result.status, result.action, result.rule) == ("degraded", "reboot", "mild, reboot-it")


def test_the_matched_rules_are_typed_and_a_builtin_is_told_by_its_kind_not_its_name() -> None:
    """The rules that matched come back as rules, the pool's first; which of them fleet.yaml
    declares is a property of the rule, not a prefix of its name to parse."""
    report = {**SAMPLE_REPORT, "status": "healthy", "action": "none", "xids": []}
    look_alike = compile_rule("builtin:look-alike", "true", "degraded", "none")
    fleet = [compile_rule("reboot-it", "size(gpus) == 1", "degraded", "reboot")]
    result = evaluate([[look_alike], fleet], report)
    assert [(r.name, r.builtin) for r in result.matched] == [
        ("builtin:look-alike", False),
        ("reboot-it", False),
    ]
    assert [r.name for r in result.user_rules] == ["builtin:look-alike", "reboot-it"]
    fell_through = evaluate([[compile_rule("never", "false", "unhealthy", "replace")]], report)
    assert [(r.name, r.builtin) for r in fell_through.matched] == [("builtin:agent-healthy", True)]
    assert fell_through.user_rules == ()


def test_a_matching_rule_can_soften_the_builtin_verdict() -> None:
    # An operator who knows XID 79 on this pool is a flaky riser says: degraded, no action.
    soften = compile_rule("xid79-known", "xids.exists(x, x.code == 79)", "degraded", "none")
    result = evaluate([[soften]], SAMPLE_REPORT)
    assert (result.status, result.action) == ("degraded", "none")


def test_a_rule_raising_at_evaluation_leaves_the_node_as_it_was() -> None:
    raising = compile_rule(
        "second-gpu-hot", "gpus[1].temperature_c >= 85.0", "unhealthy", "replace"
    )
    report = {**SAMPLE_REPORT, "status": "healthy", "action": "none", "xids": []}
    result = evaluate([[raising]], report)
    assert (result.status, result.action, result.rule) == (
        "healthy",
        "none",
        "builtin:agent-healthy",
    )
    assert result.error is not None and result.error.startswith("rule second-gpu-hot: ")


def test_a_null_reading_is_an_evaluation_error_never_a_fault() -> None:
    report = {
        **SAMPLE_REPORT,
        "status": "healthy",
        "action": "none",
        "xids": [],
        "gpus": [{**SAMPLE_REPORT["gpus"][0], "temperature_c": None}],
    }
    result = evaluate([[rule()]], report)
    assert result.status == "healthy" and "null" in (result.error or "")
    guarded = rule(when="gpus.exists(g, g.temperature_c != null && g.temperature_c >= 85.0)")
    assert evaluate([[guarded]], report).error is None


def test_integer_readings_compare_as_doubles() -> None:
    report = {**SAMPLE_REPORT, "gpus": [{**SAMPLE_REPORT["gpus"][0], "temperature_c": 90}]}
    assert (
        evaluate([[rule(when="gpus.exists(g, g.temperature_c + 0.5 > 90.0)")]], report).rule
        == "hot-gpu"
    )


def test_unknown_agent_status_with_no_match_stays_unknown() -> None:
    report = {**SAMPLE_REPORT, "status": "unknown", "action": "none", "xids": []}
    assert evaluate([], report) == PolicyResult(RuleStatus.UNKNOWN, Remedy.NONE, (), None)


@pytest.mark.parametrize(
    ("when", "message"),
    [
        ("gpus.exists(g, g.temperature_c >= 85.0", r"CEL syntax error: .*line 1, column \d+"),
        ("gpu.exists(g, g.temperature_c >= 85.0)", r"Undefined variable or function: 'gpu'"),
        ("gpus.exists(g, g.temp >= 85.0)", r"no field 'temp'"),
        ("size(gpus)", r"gave int 1, not true or false"),
        ("notice.kind == 'preemption'", r"without a notice"),
        ("'a' + 1 == 'a1'", r"string \+ int"),
    ],
)
def test_compile_errors_name_the_rule_and_what_is_wrong(when: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        compile_rule(
            "bad",
            when,
            "unhealthy",
            "replace",
            file="fleet.yaml",
            line=12,
            key_path="pools.train.health.rules[0].when",
        )
    text = str(info.value)
    assert text.startswith("fleet.yaml:12: pools.train.health.rules[0].when: rule 'bad': ")
    assert re.search(message, text), text


def test_data_dependent_errors_are_not_compile_errors() -> None:
    compile_rule("third-gpu", "gpus[2].temperature_c > 80.0", "degraded", "none")


def test_docs_show_the_builtin_rules_as_they_are() -> None:
    import yaml

    text = (REPO / "docs" / "health-policy.md").read_text()
    block = re.search(r"<!-- builtin-rules -->\n```yaml\n(.*?)```", text, re.S)
    assert block is not None, "docs/health-policy.md lost its builtin-rules block"
    assert tuple(yaml.safe_load(block.group(1))) == default_rule_data()


def test_a_notice_rule_matches_with_a_notice_and_not_without() -> None:
    preempted = compile_rule(
        "preempted", "notice != null && notice.kind == 'preemption'", "unhealthy", "replace"
    )
    quiet = {**SAMPLE_REPORT, "status": "healthy", "action": "none", "xids": [], "notice": None}
    assert evaluate([[preempted]], quiet).rule == "builtin:agent-healthy"
    noticed = {**quiet, "notice": {"kind": "preemption", "source": "aws", "deadline": None}}
    assert evaluate([[preempted]], noticed).rule == "preempted"


@pytest.mark.parametrize(
    ("ladder", "action", "previous", "lemon", "rung"),
    [
        (("reboot", "replace"), "reboot", None, False, "reboot"),  # XID 79, first time
        (("reboot", "replace"), "reboot", "reboot", False, "replace"),  # again within the window
        (("reboot", "replace"), "reset_gpu", None, False, "reboot"),  # cheapest rung allowed
        (("reset_gpu", "reboot", "replace"), "reset_gpu", None, False, "reset_gpu"),
        (("reset_gpu", "reboot", "replace"), "reset_gpu", "reset_gpu", False, "reboot"),
        (("reset_gpu", "replace"), "reboot", None, False, "replace"),  # no rung strong enough
        (("reboot",), "reboot", "reboot", False, "replace"),  # replace ends every ladder
        (("reboot", "replace"), "replace", None, False, "replace"),  # replace-only fault
        (("reset_gpu", "reboot", "replace"), "reset_gpu", None, True, "replace"),  # a lemon
        (("reboot", "replace"), "none", None, False, "replace"),  # unhealthy with nothing to try
    ],
)
def test_ladder_decides_the_rung(ladder, action, previous, lemon, rung) -> None:
    from navarch.planner.ladder import decide

    prev = Remedy(previous) if previous else None
    ladder_ = tuple(Remedy(r) for r in ladder)
    assert decide(ladder_, Remedy(action), previous=prev, lemon=lemon) == rung

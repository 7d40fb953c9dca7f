"""Health rules and remediation settings in fleet.yaml: parsed, defaulted, compiled at load."""

from __future__ import annotations

from pathlib import Path

import pytest

from navarch.errors import ConfigError
from navarch.fleet.load import load_fleet
from navarch.fleet.policy import evaluate
from navarch.fleet.spec import Diagnostics
from tests.support.cli import run_navarch

FLEET = """\
fleet: demo
providers:
  sim: {type: local}
health:
  rules:
    - name: fleet-hot
      when: "gpus.exists(g, g.temperature_c >= 95.0)"
      status: unhealthy
      action: replace
pools:
  train:
    provider: sim
    instance_types: [sim-h100x8]
    zones: [sim-1a]
    nodes: {target: 2}
"""

POOL_RULES = """\
    health:
      rules:
        - name: hot-gpu
          when: "gpus.exists(g, g.temperature_c >= 85.0)"
          status: unhealthy
          action: replace
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(text)
    return path


def test_defaults_for_the_ladder_lemons_and_diagnostics(tmp_path: Path) -> None:
    pool = load_fleet(write(tmp_path, FLEET)).pool("train")
    h = pool.health
    assert h.remediation == ("reboot", "replace")
    assert (h.return_after, h.ladder_window_s, h.lemon_after, h.lemon_window_s) == (
        3,
        24 * 3600,
        3,
        7 * 24 * 3600,
    )
    assert h.return_requires_diag is None
    assert pool.diagnostics == Diagnostics(every_s=None, level=2)
    assert h.rules == () and [r.name for r in h.fleet_rules] == ["fleet-hot"]


def test_every_key_parsed(tmp_path: Path) -> None:
    text = (
        FLEET
        + """\
    diagnostics: {every: 7d, level: 3}
    health:
      remediation: [reset_gpu, replace]
      return_after: 2
      ladder_window: 12h
      lemon_after: 4
      lemon_window: 3d
      return_requires_diag: 1
      rules:
"""
        + POOL_RULES.split("\n", 2)[2]
    )
    pool = load_fleet(write(tmp_path, text)).pool("train")
    h = pool.health
    assert h.remediation == ("reset_gpu", "replace")
    assert (h.return_after, h.ladder_window_s, h.lemon_after, h.lemon_window_s) == (
        2,
        12 * 3600,
        4,
        3 * 24 * 3600,
    )
    assert h.return_requires_diag == 1
    assert pool.diagnostics == Diagnostics(every_s=7 * 24 * 3600, level=3)
    assert [[r.name for r in rules] for rules in h.rule_sets()] == [["hot-gpu"], ["fleet-hot"]]


def test_pool_rules_are_evaluated_before_the_fleet_rules(tmp_path: Path) -> None:
    from navarch.fleet.policy import SAMPLE_REPORT

    pool = load_fleet(write(tmp_path, FLEET + POOL_RULES)).pool("train")
    report = {
        **SAMPLE_REPORT,
        "status": "healthy",
        "action": "none",
        "xids": [],
        "gpus": [{**SAMPLE_REPORT["gpus"][0], "temperature_c": 88.0}],
    }
    result = evaluate(pool.health.rule_sets(), report)
    assert (result.status, result.action, result.rule) == ("unhealthy", "replace", "hot-gpu")


def test_ladder_out_of_order_is_refused(tmp_path: Path) -> None:
    text = FLEET + "    health:\n      remediation: [replace, reboot]\n"
    with pytest.raises(ConfigError, match=r"pools\.train\.health\.remediation: .*cheapest"):
        load_fleet(write(tmp_path, text))


def test_two_rules_with_one_name_are_refused(tmp_path: Path) -> None:
    text = FLEET + POOL_RULES + POOL_RULES.split("\n", 2)[2]
    with pytest.raises(ConfigError, match=r"rules\[1\]\.name: two rules are named 'hot-gpu'"):
        load_fleet(write(tmp_path, text))


def test_validate_exits_1_naming_the_line_of_a_syntax_error(tmp_path: Path) -> None:
    text = (
        FLEET
        + POOL_RULES
        + """\
        - name: broken
          when: "gpus.exists(g, g.temperature_c >= 85.0"
          status: degraded
"""
    )
    path = write(tmp_path, text)
    line = text.splitlines().index('          when: "gpus.exists(g, g.temperature_c >= 85.0"') + 1
    proc = run_navarch(["validate", str(path)], cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert (
        f"fleet.yaml:{line}: pools.train.health.rules[1].when: rule 'broken': "
        "CEL syntax error" in proc.stderr
    )


def test_validate_accepts_good_rules(tmp_path: Path) -> None:
    proc = run_navarch(["validate", str(write(tmp_path, FLEET + POOL_RULES))], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


NESTED = "xids.exists(a, xids.exists(b, xids.exists(c, a.code == b.code + c.code)))"


def test_validate_rejects_a_nested_comprehension_naming_its_line(tmp_path: Path) -> None:
    text = (
        FLEET
        + POOL_RULES
        + f"""\
        - name: cubic
          when: "{NESTED}"
          status: degraded
"""
    )
    path = write(tmp_path, text)
    line = text.splitlines().index(f'          when: "{NESTED}"') + 1
    proc = run_navarch(["validate", str(path)], cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"fleet.yaml:{line}: pools.train.health.rules[1].when: rule 'cubic': " in proc.stderr
    assert "list elements per report" in proc.stderr


@pytest.mark.parametrize(
    "when",
    [
        "xids.exists(a, gpus.exists(g, g.index == 0))",
        "xids.filter(x, x.code == 79).size() > 0",
        " || ".join(f"xids.exists(x, x.code == {c})" for c in range(9)),
    ],
)
def test_rules_past_the_cost_bound_do_not_load(tmp_path: Path, when: str) -> None:
    text = (
        FLEET
        + POOL_RULES
        + f"""\
        - name: costly
          when: "{when}"
          status: degraded
"""
    )
    with pytest.raises(ConfigError, match="rule 'costly': `when` may visit"):
        load_fleet(write(tmp_path, text))


def test_rules_of_a_pool_and_the_fleet_share_one_budget_per_report(tmp_path: Path) -> None:
    eight = " || ".join(f"xids.exists(x, x.code == {c})" for c in range(8))
    rules = "".join(
        f"""\
        - name: r{i}
          when: "{eight}"
          status: degraded
"""
        for i in range(4)
    )
    with pytest.raises(ConfigError, match="pools.train.health.rules: the pool's and the fleet's"):
        load_fleet(write(tmp_path, FLEET + POOL_RULES + rules))


def test_a_rule_at_the_bound_loads_and_judges_a_256_xid_report(tmp_path: Path) -> None:
    from navarch.fleet.policy import SAMPLE_REPORT

    at_bound = " || ".join(f"xids.exists(x, x.code == {c})" for c in range(8))
    text = (
        FLEET
        + POOL_RULES
        + f"""\
        - name: bound
          when: "{at_bound}"
          status: degraded
"""
    )
    pool = load_fleet(write(tmp_path, text)).pool("train")
    xid = SAMPLE_REPORT["xids"][0]
    report = {
        **SAMPLE_REPORT,
        "status": "healthy",
        "gpus": [],
        "xids": [{**xid, "code": 1000 + i, "severity": "warning"} for i in range(255)]
        + [{**xid, "code": 7, "severity": "warning"}],
    }
    result = evaluate(pool.health.rule_sets(), report)
    assert result.rule == "bound" and result.status.value == "degraded"

"""The example alert rules (examples/prometheus/navarch-alerts.yaml) checked by the real
promtool: `check rules`, and `test rules` with the unit tests beside them, which make each
alert fire on series shaped like navarch's metrics. promtool is shown to reject a broken
copy, so a pass means something. Then the same rules loaded in a real Prometheus fire on
the metrics of a real apply."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.cli import run_navarch
from tests.support.prometheus import PROMTOOL, get, query_until
from tests.support.system import require_system_package
from tests.unattended.helpers import write_fleet

from .conftest import Scraped

RULES = Path(__file__).resolve().parents[2] / "examples" / "prometheus"


def promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    require_system_package("prometheus", PROMTOOL)
    return subprocess.run([PROMTOOL, *map(str, args)], capture_output=True, text=True, timeout=60)


@pytest.mark.system
def test_promtool_checks_the_shipped_rules() -> None:
    run = promtool("check", "rules", RULES / "navarch-alerts.yaml")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS: 3 rules found" in run.stdout


@pytest.mark.system
def test_each_alert_fires_in_promtools_unit_tests() -> None:
    run = promtool("test", "rules", RULES / "navarch-alerts.test.yaml")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout


@pytest.mark.system
def test_promtool_rejects_a_broken_rule(tmp_path: Path) -> None:
    shutil.copytree(RULES, tmp_path / "rules")
    broken = tmp_path / "rules" / "navarch-alerts.yaml"
    broken.write_text(
        broken.read_text().replace(
            "navarch_circuit_breaker_open == 1", "navarch_circuit_breaker_open ==", 1
        )
    )
    assert promtool("check", "rules", broken).returncode != 0
    assert (
        promtool("test", "rules", tmp_path / "rules" / "navarch-alerts.test.yaml").returncode != 0
    )


def test_the_breaker_alert_fires_in_prometheus_on_a_real_apply(
    scraped: Scraped, tmp_path: Path
) -> None:
    # Two of three train nodes with a fatal XID: half the pool sick at once opens the
    # breaker (fleet.example.yaml circuit_breaker_pct: 50) and the apply exits 3.
    write_fleet(tmp_path, fleet="breaker")
    assert run_navarch(["apply", "fleet.yaml", "--auto-approve"], cwd=tmp_path).returncode == 0
    for node in ("breaker-train-0001", "breaker-train-0002"):
        inject = run_navarch(["local", "inject", "fleet.yaml", node, "--xid", "79"], cwd=tmp_path)
        assert inject.returncode == 0, inject.stderr
    assert run_navarch(["local", "tick", "fleet.yaml"], cwd=tmp_path).returncode == 0
    run = run_navarch(
        [
            "apply",
            "fleet.yaml",
            "--auto-approve",
            "--metrics-textfile",
            str(scraped.textfile_dir / "breaker.prom"),
        ],
        cwd=tmp_path,
    )
    assert run.returncode == 3, run.stderr

    alerts = query_until(
        scraped.prometheus, 'ALERTS{alertname="NavarchCircuitBreakerOpen",fleet="breaker"}'
    )
    assert [
        (a["metric"]["pool"], a["metric"]["alertstate"], a["metric"]["severity"]) for a in alerts
    ] == [("train", "firing", "page")]
    # The rules evaluated without error on navarch's real series.
    rules = json.loads(get(f"{scraped.prometheus}/api/v1/rules")[1])["data"]["groups"][0]
    assert {r["name"]: r["health"] for r in rules["rules"]} == {
        "NavarchNotSucceeding": "ok",
        "NavarchCircuitBreakerOpen": "ok",
        "NavarchCapacityExhausted": "ok",
    }

"""The example alert rules (examples/prometheus/navarch-alerts.yaml) checked by the real
promtool: `check rules`, and `test rules` with the unit tests beside them, which make each
alert fire on series shaped like navarch's metrics. promtool is shown to reject a broken
copy, so a pass means something."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.support.prometheus import PROMTOOL
from tests.support.system import require_system_package

RULES = Path(__file__).resolve().parents[2] / "examples" / "prometheus"


def promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    require_system_package("prometheus", PROMTOOL)
    return subprocess.run([PROMTOOL, *map(str, args)], capture_output=True, text=True,
                          timeout=60)


def test_promtool_checks_the_shipped_rules() -> None:
    run = promtool("check", "rules", RULES / "navarch-alerts.yaml")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS: 3 rules found" in run.stdout


def test_each_alert_fires_in_promtools_unit_tests() -> None:
    run = promtool("test", "rules", RULES / "navarch-alerts.test.yaml")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout


def test_promtool_rejects_a_broken_rule(tmp_path: Path) -> None:
    shutil.copytree(RULES, tmp_path / "rules")
    broken = tmp_path / "rules" / "navarch-alerts.yaml"
    broken.write_text(broken.read_text().replace("navarch_circuit_breaker_open == 1",
                                                 "navarch_circuit_breaker_open ==", 1))
    assert promtool("check", "rules", broken).returncode != 0
    assert promtool("test", "rules", tmp_path / "rules" / "navarch-alerts.test.yaml"
                    ).returncode != 0

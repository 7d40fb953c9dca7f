"""`metrics: {pushgateway: URL}` against a real Pushgateway 1.5: what `navarch apply`
pushes is read back from the Pushgateway's own /metrics and /api/v1/metrics, grouped by
job and fleet. Each test uses its own job name, so the session's Pushgateway is shared."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.cli import run_navarch
from tests.support.prometheus import get, start_pushgateway
from tests.unattended.helpers import write_fleet


def samples(url: str, job: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The Pushgateway's /metrics samples of group job=`job`, by (name, sorted labels
    without job and instance)."""
    status, text = get(f"{url}/metrics")
    assert status == 200
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.labels.get("job") == job:
                labels = {k: v for k, v in s.labels.items() if k not in ("job", "instance")}
                out[(s.name, tuple(sorted(labels.items())))] = s.value
    return out


def value(got: dict, name: str, **labels: str) -> float:
    return got[(name, tuple(sorted(labels.items())))]


def groups(url: str, job: str) -> list[dict[str, str]]:
    """The grouping keys of the groups the Pushgateway holds for job=`job`."""
    status, body = get(f"{url}/api/v1/metrics")
    assert status == 200
    return [g["labels"] for g in json.loads(body)["data"] if g["labels"].get("job") == job]


def apply(directory: Path) -> None:
    run = run_navarch(["apply", "fleet.yaml", "--auto-approve"], cwd=directory)
    assert run.returncode == 0, run.stderr
    assert "metrics push" not in run.stderr, run.stderr


def test_apply_pushes_one_group_per_fleet_read_back_from_the_pushgateway(
    pushgateway: str, tmp_path: Path
) -> None:
    for fleet in ("demo", "prod"):
        (tmp_path / fleet).mkdir()
        write_fleet(
            tmp_path / fleet,
            fleet=fleet,
            metrics={"pushgateway": pushgateway, "job": "navarch-groups"},
        )
        apply(tmp_path / fleet)
    assert sorted(g["fleet"] for g in groups(pushgateway, "navarch-groups")) == ["demo", "prod"]
    got = samples(pushgateway, "navarch-groups")
    for fleet in ("demo", "prod"):  # the second push did not replace the first fleet's
        assert value(got, "navarch_last_apply_success", fleet=fleet) == 1
        assert value(got, "navarch_pool_desired_nodes", fleet=fleet, pool="train") == 3
        assert (
            value(
                got,
                "navarch_last_apply_actions",
                fleet=fleet,
                pool="train",
                kind="provision",
                outcome="ok",
            )
            == 3
        )
        assert value(got, "push_failure_time_seconds", fleet=fleet) == 0
        assert value(got, "push_time_seconds", fleet=fleet) > 0


def test_a_failed_apply_keeps_the_last_success_in_the_group(
    pushgateway: str, tmp_path: Path
) -> None:
    write_fleet(tmp_path, metrics={"pushgateway": pushgateway, "job": "navarch-failed"})
    apply(tmp_path)
    success = value(
        samples(pushgateway, "navarch-failed"),
        "navarch_last_success_timestamp_seconds",
        fleet="demo",
    )

    (tmp_path / ".navarch/store/state/demo.json").write_text("{not json")
    run = run_navarch(["apply", "fleet.yaml", "--auto-approve"], cwd=tmp_path)
    assert run.returncode == 1 and "metrics push" not in run.stderr, run.stderr
    got = samples(pushgateway, "navarch-failed")
    assert value(got, "navarch_last_apply_success", fleet="demo") == 0
    assert value(got, "navarch_last_success_timestamp_seconds", fleet="demo") == success
    # The failed run added to the group (POST): the last success's pool gauges stay.
    assert value(got, "navarch_pool_desired_nodes", fleet="demo", pool="train") == 3


@pytest.mark.system
def test_a_push_the_pushgateway_rejects_is_reported_and_keeps_the_exit_code(
    tmp_path: Path,
) -> None:
    # Another job pushed navarch_last_apply_success first, as a counter: the Pushgateway
    # refuses a push whose type disagrees with what it holds under the same name. A
    # Pushgateway of its own, so no earlier test's gauges are there first.
    (tmp_path / "gw").mkdir()
    with start_pushgateway(tmp_path / "gw") as url:
        body = b"# TYPE navarch_last_apply_success counter\nnavarch_last_apply_success 1\n"
        request = urllib.request.Request(f"{url}/metrics/job/intruder", data=body, method="PUT")
        with urllib.request.urlopen(request, timeout=10) as resp:
            assert resp.status == 200
        write_fleet(tmp_path, metrics={"pushgateway": url, "job": "navarch"})
        run = run_navarch(["apply", "fleet.yaml", "--auto-approve"], cwd=tmp_path)
        assert run.returncode == 0, run.stderr
        assert "metrics push to the pushgateway failed: HTTPError: HTTP Error 400" in run.stderr
        # Nothing half-written: the group holds only the Pushgateway's record of the
        # failed push, which an alert can watch (push_failure_time_seconds > push_time_seconds).
        got = samples(url, "navarch")
        assert {name for name, _ in got} == {"push_failure_time_seconds", "push_time_seconds"}
        assert value(got, "push_failure_time_seconds", fleet="demo") > 0
        assert value(got, "push_time_seconds", fleet="demo") == 0

"""Metrics of a batch job: `navarch apply --metrics-textfile` read back
with prometheus_client's own parser, known values for the example fleet, the last success
carried over a failed run, and a Pushgateway stand-in on 127.0.0.1 that answers 503 (the
real Pushgateway is in tests/metrics)."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.support.cli import run_navarch
from tests.support.metrics import samples, value
from tests.unattended.helpers import Recorder, write_fleet

NAME = r"^navarch_[a-z_]+$"


def test_apply_metrics_textfile_parses_with_known_values(example_dir: Path) -> None:
    run = run_navarch(
        ["apply", "fleet.yaml", "--auto-approve", "--metrics-textfile", "m.prom"], cwd=example_dir
    )
    assert run.returncode == 0, run.stderr
    text = (example_dir / "m.prom").read_text()
    families = {f.name: f.type for f in text_string_to_metric_families(text)}
    assert families == {
        "navarch_last_apply_success": "gauge",
        "navarch_last_apply_timestamp_seconds": "gauge",
        "navarch_apply_duration_seconds": "gauge",
        "navarch_last_success_timestamp_seconds": "gauge",
        "navarch_last_apply_notifications": "gauge",
        "navarch_nodes": "gauge",
        "navarch_pool_desired_nodes": "gauge",
        "navarch_pool_present_nodes": "gauge",
        "navarch_circuit_breaker_open": "gauge",
        "navarch_capacity_backoff_places": "gauge",
        "navarch_report_age_seconds": "histogram",
        "navarch_last_apply_actions": "gauge",
        "navarch_reports_rejected": "counter",  # exposed as navarch_reports_rejected_total
        "navarch_last_apply_dead_on_arrival": "gauge",
        "navarch_pool_mode": "gauge",
        "navarch_last_apply_would_actions": "gauge",
    }
    got = samples(text, NAME)
    assert value(got, "navarch_last_apply_success", fleet="demo") == 1
    assert value(got, "navarch_pool_mode", fleet="demo", pool="train", mode="full") == 1
    assert value(got, "navarch_pool_mode", fleet="demo", pool="train", mode="observe") == 0
    assert value(got, "navarch_pool_desired_nodes", fleet="demo", pool="train") == 3
    assert value(got, "navarch_pool_desired_nodes", fleet="demo", pool="infer") == 2
    assert (
        value(
            got,
            "navarch_last_apply_actions",
            fleet="demo",
            pool="train",
            kind="provision",
            outcome="ok",
        )
        == 3
    )
    assert (
        value(
            got,
            "navarch_last_apply_actions",
            fleet="demo",
            pool="infer",
            kind="provision",
            outcome="ok",
        )
        == 2
    )
    assert value(got, "navarch_circuit_breaker_open", fleet="demo", pool="train") == 0
    assert value(got, "navarch_circuit_breaker_open", fleet="demo", pool="*") == 0
    assert value(got, "navarch_capacity_backoff_places", fleet="demo", pool="infer") == 0
    first_success = value(got, "navarch_last_success_timestamp_seconds", fleet="demo")

    # After the agents report: every node healthy and present, report ages observed.
    assert run_navarch(["local", "tick", "fleet.yaml"], cwd=example_dir).returncode == 0
    env = {"NAVARCH_NOW": "2030-01-01T00:00:30Z"}  # replay: reports judged 30 s later
    assert (
        run_navarch(
            ["local", "tick", "fleet.yaml"],
            cwd=example_dir,
            env={"NAVARCH_NOW": "2030-01-01T00:00:00Z"},
        ).returncode
        == 0
    )
    run = run_navarch(
        ["apply", "fleet.yaml", "--auto-approve", "--metrics-textfile", "m.prom"],
        cwd=example_dir,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    got = samples((example_dir / "m.prom").read_text(), NAME)
    assert (
        value(
            got, "navarch_nodes", fleet="demo", pool="train", lifecycle="healthy", health="healthy"
        )
        == 3
    )
    assert (
        value(
            got, "navarch_nodes", fleet="demo", pool="infer", lifecycle="healthy", health="healthy"
        )
        == 2
    )
    assert value(got, "navarch_pool_present_nodes", fleet="demo", pool="train") == 3
    assert value(got, "navarch_report_age_seconds_count", fleet="demo", pool="train") == 3
    assert (
        value(got, "navarch_report_age_seconds_bucket", fleet="demo", pool="train", le="60.0") == 3
    )
    assert (
        value(got, "navarch_report_age_seconds_bucket", fleet="demo", pool="train", le="30.0") == 3
    )
    assert value(got, "navarch_report_age_seconds_sum", fleet="demo", pool="train") == 90
    assert value(got, "navarch_last_success_timestamp_seconds", fleet="demo") > first_success

    # A failed apply (the store cannot be read) keeps the last success's time.
    success = value(got, "navarch_last_success_timestamp_seconds", fleet="demo")
    (example_dir / ".navarch/store/state/demo.json").write_text("{not json")
    run = run_navarch(
        ["apply", "fleet.yaml", "--auto-approve", "--metrics-textfile", "m.prom"], cwd=example_dir
    )
    assert run.returncode == 1
    got = samples((example_dir / "m.prom").read_text(), NAME)
    assert value(got, "navarch_last_apply_success", fleet="demo") == 0
    assert value(got, "navarch_last_success_timestamp_seconds", fleet="demo") == success


def test_rejected_reports_counter(example_dir: Path) -> None:
    assert run_navarch(["apply", "fleet.yaml", "--auto-approve"], cwd=example_dir).returncode == 0
    assert run_navarch(["local", "tick", "fleet.yaml"], cwd=example_dir).returncode == 0
    report = next((example_dir / ".navarch/store/health/demo/train").glob("*.json"))
    report.write_text(report.read_text().replace('"healthy"', '"unhealthy"', 1))  # forged
    run = run_navarch(
        ["apply", "fleet.yaml", "--auto-approve", "--metrics-textfile", "m.prom"], cwd=example_dir
    )
    got = samples((example_dir / "m.prom").read_text(), NAME)
    rejected = {k[1]: v for k, v in got.items() if k[0] == "navarch_reports_rejected_total"}
    assert sum(rejected.values()) == 1, (rejected, run.stderr)


def test_unreachable_pushgateway_keeps_exit_code(tmp_path: Path, recorder: Recorder) -> None:
    recorder.status["/metrics/job/navarch/fleet/demo"] = 503
    write_fleet(tmp_path, metrics={"pushgateway": recorder.url})
    run = run_navarch(["apply", "fleet.yaml", "--auto-approve"], cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "metrics push to the pushgateway failed" in run.stderr

"""The textfiles navarch writes, through the real node_exporter's textfile collector,
scraped by a real Prometheus 2.42 and queried back through its HTTP API: the apply's
`--metrics-textfile`, the agent's `--metrics-textfile`, and a Pushgateway group."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import run_navarch
from tests.support.metrics import run_agent_with_xid_79
from tests.support.prometheus import get, query, query_until
from tests.unattended.helpers import write_fleet

from .conftest import Scraped


def one(result: list[dict]) -> float:
    assert len(result) == 1, result
    return float(result[0]["value"][1])


def test_apply_textfile_is_exposed_by_node_exporter_and_queried_from_prometheus(
    scraped: Scraped, tmp_path: Path
) -> None:
    write_fleet(tmp_path, fleet="scraped")
    textfile = scraped.textfile_dir / "navarch.prom"
    run = run_navarch(
        ["apply", "fleet.yaml", "--auto-approve", "--metrics-textfile", str(textfile)], cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr
    status, exposed = get(f"{scraped.node_exporter}/metrics")
    assert status == 200 and 'navarch_last_apply_success{fleet="scraped"} 1' in exposed

    p = scraped.prometheus
    assert one(query_until(p, 'navarch_last_apply_success{fleet="scraped"}')) == 1
    assert one(query(p, 'navarch_pool_desired_nodes{fleet="scraped",pool="train"}')) == 3
    assert (
        one(
            query(
                p,
                'navarch_last_apply_actions{fleet="scraped",pool="infer",'
                'kind="provision",outcome="ok"}',
            )
        )
        == 2
    )
    assert one(query(p, 'sum(navarch_circuit_breaker_open{fleet="scraped"})')) == 0
    assert one(query(p, 'navarch_last_success_timestamp_seconds{fleet="scraped"}')) > 0
    # node_exporter parsed every file in the directory without complaint.
    assert one(query_until(p, "node_textfile_scrape_error")) == 0


def test_agent_textfile_is_queried_from_prometheus(scraped: Scraped, tmp_path: Path) -> None:
    run = run_agent_with_xid_79(
        tmp_path,
        fleet="scraped",
        node="scraped-train-0001",
        textfile=scraped.textfile_dir / "agent.prom",
    )
    assert run.returncode == 0, run.stderr

    p = scraped.prometheus
    node = 'node="scraped-train-0001"'
    assert one(query_until(p, f'navarch_node_gpu_xid_errors_total{{{node},code="79"}}')) == 1
    assert one(query(p, f'navarch_node_health_status{{{node},status="unhealthy"}}')) == 1
    assert one(query(p, f'navarch_node_health_status{{{node},status="healthy"}}')) == 0
    assert one(query(p, f"count(navarch_node_gpu_temperature_celsius{{{node}}})")) == 2
    assert one(query_until(p, "node_textfile_scrape_error")) == 0


def test_a_pushed_group_is_scraped_with_its_grouping_labels(
    scraped: Scraped, pushgateway: str, tmp_path: Path
) -> None:
    write_fleet(
        tmp_path, fleet="pushed", metrics={"pushgateway": pushgateway, "job": "navarch-scraped"}
    )
    run = run_navarch(["apply", "fleet.yaml", "--auto-approve"], cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    result = query_until(
        scraped.prometheus, 'navarch_last_apply_success{job="navarch-scraped",fleet="pushed"}'
    )
    assert one(result) == 1  # honor_labels keeps the pushed job and fleet labels

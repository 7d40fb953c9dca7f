"""The textfiles navarch writes, through the real node_exporter's textfile collector,
scraped by a real Prometheus 2.42 and queried back through its HTTP API: the apply's
`--metrics-textfile`, the agent's `--metrics-textfile`, and a Pushgateway group."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from tests.support.cli import run_navarch
from tests.support.prometheus import get, query, query_until
from tests.unattended.helpers import write_fleet

from .conftest import Scraped

XID_79 = (
    "2026-03-01T11:58:00,000000+00:00 NVRM: Xid (PCI:0000:18:00): 79, pid=0, "
    "name=python, GPU has fallen off the bus.\n"
)


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
    (tmp_path / "kern.log").write_text(XID_79)
    config = tmp_path / "agent.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "fleet": "scraped",
                "pool": "train",
                "node": "scraped-train-0001",
                "store": f"file://{tmp_path}/store",
                "key": "5a" * 32,
                "gpus_per_node": 2,
                "fake_gpu": True,
                "metadata": "none",
                "state_file": str(tmp_path / "state.json"),
                "boot_id": "boot-a",
            }
        )
    )
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "navarch",
            "agent",
            "run",
            "--once",
            "--config",
            str(config),
            "--kernel-log",
            str(tmp_path / "kern.log"),
            "--metrics-textfile",
            str(scraped.textfile_dir / "agent.prom"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "NAVARCH_GPU_COUNT": "2"},
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

"""Fixtures for the metrics tests against the real Prometheus daemons (tests/support/
prometheus.py), all for the session: one Pushgateway, and a textfile directory that a real
node_exporter exposes and a real Prometheus scrapes together with the Pushgateway, with
the shipped alert rules loaded. Tests keep apart by fleet name and push job."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.prometheus import start_node_exporter, start_prometheus, start_pushgateway

#: The shipped alert rules, loaded into the test Prometheus.
ALERT_RULES = Path(__file__).resolve().parents[2] / "examples/prometheus/navarch-alerts.yaml"


@pytest.fixture(scope="session")
def pushgateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with start_pushgateway(tmp_path_factory.mktemp("pushgateway")) as url:
        yield url


@dataclass(frozen=True)
class Scraped:
    """A textfile directory node_exporter reads, and the Prometheus that scrapes it."""

    textfile_dir: Path
    node_exporter: str
    prometheus: str


@pytest.fixture(scope="session")
def scraped(tmp_path_factory: pytest.TempPathFactory, pushgateway: str) -> Iterator[Scraped]:
    base = tmp_path_factory.mktemp("prometheus")
    textfile_dir = base / "textfile"
    textfile_dir.mkdir()
    with (
        start_node_exporter(base, textfile_dir) as exporter,
        start_prometheus(
            base,
            [exporter.removeprefix("http://"), pushgateway.removeprefix("http://")],
            rule_files=[ALERT_RULES],
        ) as prometheus,
    ):
        yield Scraped(textfile_dir, exporter, prometheus)

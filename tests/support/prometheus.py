"""The real Prometheus daemons from Debian, started on free 127.0.0.1 ports by fixtures.

`start_pushgateway(base)`, `start_node_exporter(base, textfile_dir)` and
`start_prometheus(base, targets)` each run one daemon in the foreground as a child, with
its files under `base`, yield its base URL once it answers its readiness endpoint, and
stop it on exit. Prometheus scrapes its targets every second, so a test polls its HTTP
API (`query`) for a bounded time instead of sleeping. Packages: prometheus-pushgateway
(1.5), prometheus-node-exporter (1.5, textfile collector only), prometheus (2.42, with
promtool).
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.sshd import free_port
from tests.support.system import require_system_package

PUSHGATEWAY = "/usr/bin/prometheus-pushgateway"
NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"
PROMETHEUS = "/usr/bin/prometheus"
PROMTOOL = "/usr/bin/promtool"

#: A bound for every wait on a daemon (start, a scrape showing up).
WAIT_S = 60.0


def get(url: str) -> tuple[int, str]:
    """GET url -> (status, body text); an HTTP error status is returned, not raised."""
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@contextmanager
def _daemon(name: str, argv: list[str], base: Path, ready_url: str) -> Iterator[None]:
    log_path = base / f"{name}.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=base)
        try:
            deadline = time.monotonic() + WAIT_S
            while True:
                if proc.poll() is not None:
                    pytest.fail(
                        f"{name} exited with {proc.returncode}: {log_path.read_text()[-2000:]}"
                    )
                try:
                    if get(ready_url)[0] == 200:
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    pytest.fail(f"{name} not ready at {ready_url} within {WAIT_S:.0f} s")
                time.sleep(0.1)
            yield
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


@contextmanager
def start_pushgateway(base: Path) -> Iterator[str]:
    """A Pushgateway on a free port; yields its URL (http://127.0.0.1:PORT)."""
    require_system_package("prometheus-pushgateway", PUSHGATEWAY)
    url = f"http://127.0.0.1:{(port := free_port())}"
    # Debian's build persists to /var/lib/prometheus by default: keep state in `base`.
    argv = [
        PUSHGATEWAY,
        f"--web.listen-address=127.0.0.1:{port}",
        f"--persistence.file={base / 'pushgateway.data'}",
    ]
    with _daemon("pushgateway", argv, base, f"{url}/-/ready"):
        yield url


@contextmanager
def start_node_exporter(base: Path, textfile_dir: Path) -> Iterator[str]:
    """node_exporter with only its textfile collector, reading textfile_dir; yields its URL."""
    require_system_package("prometheus-node-exporter", NODE_EXPORTER)
    url = f"http://127.0.0.1:{(port := free_port())}"
    argv = [
        NODE_EXPORTER,
        f"--web.listen-address=127.0.0.1:{port}",
        "--collector.disable-defaults",
        "--collector.textfile",
        f"--collector.textfile.directory={textfile_dir}",
    ]
    with _daemon("node-exporter", argv, base, f"{url}/metrics"):
        yield url


@contextmanager
def start_prometheus(
    base: Path, targets: Sequence[str], rule_files: Sequence[Path] = ()
) -> Iterator[str]:
    """Prometheus scraping `targets` (host:port) every second as job "navarch" (with
    honor_labels, as a Pushgateway needs) and evaluating `rule_files` every second;
    yields its URL once ready."""
    require_system_package("prometheus", PROMETHEUS)
    url = f"http://127.0.0.1:{(port := free_port())}"
    config = base / "prometheus.yml"
    config.write_text(
        json.dumps(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(path) for path in rule_files],
                "scrape_configs": [
                    {
                        "job_name": "navarch",
                        "honor_labels": True,
                        "static_configs": [{"targets": list(targets)}],
                    }
                ],
            }
        )
    )
    argv = [
        PROMETHEUS,
        f"--config.file={config}",
        f"--storage.tsdb.path={base / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    with _daemon("prometheus", argv, base, f"{url}/-/ready"):
        yield url


def query(prometheus_url: str, promql: str) -> list[dict[str, Any]]:
    """The instant vector of `promql` through Prometheus' HTTP API (/api/v1/query)."""
    status, body = get(
        f"{prometheus_url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    )
    doc = json.loads(body)
    assert status == 200 and doc["status"] == "success", body
    return list(doc["data"]["result"])


def query_until(prometheus_url: str, promql: str) -> list[dict[str, Any]]:
    """query() until it returns a non-empty vector (scrapes run every second); fails
    after WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    while not (result := query(prometheus_url, promql)):
        if time.monotonic() > deadline:
            raise AssertionError(f"Prometheus returned nothing for {promql} in {WAIT_S:.0f} s")
        time.sleep(0.2)
    return result

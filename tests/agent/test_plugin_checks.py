"""navarch.checks plugins in the agent: run after the built-in checks, their results in the
report; a broken plugin (import error, exception, wrong shape, too slow, oversized
evidence) is its own degraded check naming it, never a crash; the report stays valid
against the schema and is accepted by the reconciler."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from navarch.agent import AgentConfig, run_once
from navarch.reconcile.reports import verify_report
from navarch.report.signing import derive_node_key
from tests.plugins.conftest import fake_distribution

SECRET = b"0123456789abcdef0123456789abcdef"

CHECKS = {
    # name: (module source, entry point attr)
    "ib_link": (
        "def check(context):\n"
        "    ids = [g['uuid'] for g in context['gpus']]\n"
        "    seen = sorted(c['name'] for c in context['checks'])\n"
        "    context['checks'].clear()  # a copy: the report keeps its checks\n"
        "    return {'status': 'degraded', 'message': 'mlx5_1 link down', 'action': 'none',\n"
        "            'evidence': {'port': 'mlx5_1', 'gpus': len(ids),\n"
        "                         'node': context['node'], 'saw_boot': 'boot' in seen}}\n"
    ),
    "raiser": "def check(context):\n    raise OSError('no /sys/class/infiniband')\n",
    "shape": "def check(context):\n    return 'all good'\n",
    "badstatus": "def check(context):\n    return {'status': 'fine', 'message': 'm'}\n",
    "huge": (
        "def check(context):\n"
        "    return {'status': 'healthy', 'message': 'm', 'evidence': {'x': 'y' * 100000}}\n"
    ),
    "notjson": (
        "def check(context):\n"
        "    return {'status': 'healthy', 'message': 'm', 'evidence': {'x': {1, 2}}}\n"
    ),
    "bigint": (
        "def check(context):\n"
        "    return {'status': 'healthy', 'message': 'm', 'evidence': {'bytes': 2 ** 60}}\n"
    ),
    "slow": "import time\n\ndef check(context):\n    time.sleep(5)\n    return {}\n",
    "broken": "import no_such_module_anywhere\n\ndef check(context):\n    return {}\n",
}


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every check of CHECKS installed as a navarch.checks entry point."""
    eps = "[navarch.checks]\n" + "".join(f"{n} = ck_{n}:check\n" for n in CHECKS)
    site = fake_distribution(
        tmp_path / "site", "navarch-checks-test", eps, {f"ck_{n}": src for n, src in CHECKS.items()}
    )
    monkeypatch.syspath_prepend(str(site))


def test_plugin_checks_join_the_report_after_the_built_in_ones(
    installed: None,
    make_config: Callable[..., AgentConfig],
    validate_report: Callable[[dict[str, Any]], None],
    read_stored: Any,
) -> None:
    node_key = derive_node_key(SECRET, "demo", "train-0001").hex()
    config = make_config(key=node_key, plugin_check_timeout_s=0.5)
    now = datetime.now(UTC)
    report = run_once(config, now=now)
    validate_report(report)
    names = [c["name"] for c in report["checks"]]
    plugins = [c for c in report["checks"] if "plugin" in c]
    # Built-ins first, untouched by the plugin that cleared its copy; then plugins by name.
    assert names[0] == "boot" and [c["name"] for c in plugins] == sorted(CHECKS)
    assert names[-len(CHECKS) :] == sorted(CHECKS)
    assert all(c["plugin"] == "navarch-checks-test 0.1" for c in plugins)
    by_name = {c["name"]: c for c in plugins}
    assert by_name["ib_link"]["status"] == "degraded"
    assert by_name["ib_link"]["message"] == "mlx5_1 link down"
    assert by_name["ib_link"]["evidence"] == {
        "port": "mlx5_1",
        "gpus": 8,
        "node": "train-0001",
        "saw_boot": True,
    }
    # Each broken one is its own degraded check (never unhealthy, never a crash), its
    # message the one-line error naming the plugin.
    reasons = {
        "raiser": "raised OSError: no /sys/class/infiniband",
        "shape": "returned a str, not a result mapping",
        "badstatus": "status 'fine' is not one of",
        "huge": "evidence is over 8192 bytes",
        "notjson": "evidence is not JSON",
        "bigint": "result cannot be signed",
        "slow": "did not finish within 0.5 s",
        "broken": "failed to load: ModuleNotFoundError",
    }
    for name, reason in reasons.items():
        check = by_name[name]
        assert (check["status"], check["action"]) == ("degraded", "none"), check
        assert check["message"].startswith(f"plugin {name!r} (navarch.checks = ck_{name}:check")
        assert reason in check["message"] and "\n" not in check["message"]
    assert report["status"] == "degraded"  # the worst: no plugin made the node unhealthy
    # The stored report is the one returned, and the reconciler accepts it.
    stored = read_stored(config)
    assert stored == report
    summary = verify_report(
        json.dumps(stored).encode(),
        fleet="demo",
        pool="train",
        node="train-0001",
        fleet_secret=SECRET,
        last_sequence=0,
        now=now,
    )
    assert summary.status == "degraded"


def test_no_plugins_no_change(make_config: Callable[..., AgentConfig]) -> None:
    report = run_once(make_config(), to_stdout=True)
    assert all("plugin" not in c for c in report["checks"])


def test_a_plugin_checks_fault_kind_is_a_key_whatever_its_name(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    make_config: Callable[..., AgentConfig],
    validate_report: Callable[[dict[str, Any]], None],
) -> None:
    """A check is named after its entry point, which may be any text; its fault kind is
    written in the report schema's key grammar, so the reconciler accepts the report."""
    source = "def check(context):\n    return {'status': 'degraded', 'message': 'link down'}\n"
    site = fake_distribution(
        tmp_path / "site",
        "navarch-checks-kind",
        "[navarch.checks]\nIB_Link = ck_kind:check\n",
        {"ck_kind": source},
    )
    monkeypatch.syspath_prepend(str(site))
    node_key = derive_node_key(SECRET, "demo", "train-0001").hex()
    report = run_once(make_config(key=node_key), now=datetime.now(UTC))
    validate_report(report)
    (check,) = [c for c in report["checks"] if c["name"] == "IB_Link"]
    assert check["fault_key"] == {"kind": "ib_link", "gpu_index": None}

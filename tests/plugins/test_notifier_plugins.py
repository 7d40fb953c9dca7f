"""navarch.notifiers plugins, end to end through the CLI: a plugin named in fleet.yaml's
notify: gets the apply's events; a raising, wrong-shaped or hanging one costs its own
delivery (one line naming it) and never the apply; a plugin that is not installed stops the run before
anything is applied."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from navarch.errors import ConfigError
from navarch.fleet.load import load_fleet
from tests.plugins.conftest import ROOT, fake_distribution
from tests.support.cli import run_navarch

ENTRY_POINTS = """\
[navarch.notifiers]
recorder = nt_recorder:create
raiser = nt_raiser:create
shape = nt_shape:create
hang = nt_hang:create
"""

MODULES = {
    "nt_recorder": (
        "import json\n\n"
        "def create(config):\n"
        "    path = config['options']['path']\n"
        "    def send(event):\n"
        "        with open(path, 'a') as fh:\n"
        "            fh.write(json.dumps({'sink': config['name'], **event}) + '\\n')\n"
        "    return send\n"
    ),
    "nt_raiser": (
        "def create(config):\n"
        "    def send(event):\n"
        "        raise KeyError('chat service down')\n"
        "    return send\n"
    ),
    "nt_shape": "def create(config):\n    return {'not': 'a send callable'}\n",
    "nt_hang": (
        "import time\n\n"
        "def create(config):\n"
        "    def send(event):\n"
        "        time.sleep(600)\n"
        "    return send\n"
    ),
}


def write_fleet(tmp_path: Path, notify: list[dict[str, Any]]) -> Path:
    """fleet.example.yaml (5 local nodes in 2 pools) with this notify: list."""
    doc = yaml.safe_load((ROOT / "fleet.example.yaml").read_text())
    doc["notify"] = notify
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A distribution declaring three notifiers, on the child's PYTHONPATH."""
    return fake_distribution(tmp_path / "site", "navarch-notify-test", ENTRY_POINTS, MODULES)


def child_env(site: Path) -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}


def machines(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / ".navarch" / "local").glob("*/machines/*/machine.json"))


def test_a_notifier_plugin_gets_the_events_and_a_broken_one_costs_only_itself(
    tmp_path: Path, site: Path
) -> None:
    events = tmp_path / "events.jsonl"
    fleet = write_fleet(
        tmp_path,
        [
            {"type": "raiser"},
            {"type": "recorder", "name": "chat", "options": {"path": str(events)}},
            {"type": "shape"},
            {"type": "hang", "timeout": "1s"},
        ],
    )
    run = run_navarch(
        ["apply", str(fleet), "--auto-approve"], cwd=tmp_path, env=child_env(site), subprocess=True
    )
    # Notifications are after the fact: the apply converged and exits 0 regardless.
    assert run.returncode == 0, run.stdout + run.stderr
    assert len(machines(tmp_path)) == 5
    got = [json.loads(line) for line in events.read_text().splitlines()]
    provisioned = sorted(e["node"] for e in got if e["kind"] == "node_provisioned")
    assert provisioned == sorted(
        json.loads(p.read_text())["tags"]["navarch-node"] for p in machines(tmp_path)
    )
    assert {e["sink"] for e in got} == {"chat"} and {e["fleet"] for e in got} == {"demo"}
    assert all(e["event_id"] and e["run_id"] for e in got)
    # Each broken plugin is one line naming it (group, entry point, distribution).
    raiser = [ln for ln in run.stderr.splitlines() if "plugin 'raiser'" in ln]
    assert len(raiser) == 1, run.stderr
    assert "navarch.notifiers = nt_raiser:create from navarch-notify-test 0.1" in raiser[0]
    assert "KeyError" in raiser[0]
    shape = [ln for ln in run.stderr.splitlines() if "plugin 'shape'" in ln]
    assert len(shape) == 1 and "not a send(event) callable" in shape[0], run.stderr
    # A notifier that hangs is given up after the sink's timeout: the apply ends, and
    # with it the lease it holds while notifying.
    hang = [ln for ln in run.stderr.splitlines() if "plugin 'hang'" in ln]
    assert len(hang) == 1 and "did not finish within 1 s" in hang[0], run.stderr
    assert "Traceback" not in run.stderr


def test_a_notifier_that_is_not_installed_stops_the_run_before_it_starts(
    tmp_path: Path, site: Path
) -> None:
    fleet = write_fleet(tmp_path, [{"type": "log"}, {"type": "nosuchnotifier"}])
    run = run_navarch(
        ["apply", str(fleet), "--auto-approve"], cwd=tmp_path, env=child_env(site), subprocess=True
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "notify[1].type" in run.stderr and "nosuchnotifier" in run.stderr
    assert "navarch.notifiers" in run.stderr and "hang, raiser, recorder, shape" in run.stderr
    assert machines(tmp_path) == []


def test_options_belong_to_plugins_only(tmp_path: Path) -> None:
    fleet = write_fleet(tmp_path, [{"type": "log", "options": {"x": 1}}])
    with pytest.raises(ConfigError) as err:
        load_fleet(fleet)
    assert err.value.key_path == "notify[0].options" and err.value.line is not None

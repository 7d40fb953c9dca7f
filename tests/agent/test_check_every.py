"""A pool's health.check_every sets its nodes' agent timer: a shorter check makes a fault's
first report come sooner (what event-started runs wait for) and writes nothing more."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from navarch.agent.bootstrap import BundleSource, render_cloud_init
from navarch.errors import ConfigError
from navarch.fleet.load import load_fleet

REPO = Path(__file__).resolve().parents[2]
BUNDLE = BundleSource("https://artifacts.example.com/navarch-agent.pyz", "ab" * 32)


def _fleet(tmp_path: Path, health: dict[str, object] | None) -> Path:
    doc = yaml.safe_load((REPO / "fleet.aws.example.yaml").read_text())
    for pool in doc["pools"].values():
        if health is not None:
            pool.setdefault("health", {}).update(health)
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _timer(path: Path) -> str:
    spec = load_fleet(path)
    pool = spec.pools[0].name
    text = render_cloud_init(spec, pool, f"{pool}-0001", b"k" * 32, bundle=lambda: BUNDLE)
    files = {f["path"]: f["content"] for f in yaml.safe_load(text)["write_files"]}
    return next(v for k, v in files.items() if k.endswith("navarch-agent.timer"))


def test_a_pool_that_checks_every_10s_gets_a_10s_agent_timer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NAVARCH_FLEET_SECRET", "0f" * 32)
    timer = _timer(_fleet(tmp_path, {"check_every": "10s"}))
    assert "OnUnitActiveSec=10s" in timer
    # The spread stays a fifth of the period, not the 10 s a 30 s timer takes.
    assert "RandomizedDelaySec=2s" in timer


def test_a_pool_without_check_every_keeps_the_30s_timer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NAVARCH_FLEET_SECRET", "0f" * 32)
    timer = _timer(_fleet(tmp_path, None))
    assert "OnUnitActiveSec=30s" in timer
    assert "RandomizedDelaySec=10s" in timer


def test_a_check_every_below_5s_is_refused_by_its_key_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NAVARCH_FLEET_SECRET", "0f" * 32)
    with pytest.raises(ConfigError, match="check_every must be at least 5s") as err:
        load_fleet(_fleet(tmp_path, {"check_every": "2s"}))
    assert "health" in str(err.value) and "check_every" in str(err.value)

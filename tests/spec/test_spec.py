"""fleet.yaml validation: strict schema, cross-field rules, errors that name file, line and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from navarch.errors import ConfigError
from navarch.fleet.load import load_fleet
from navarch.fleet.secret import read_fleet_secret
from navarch.fleet.spec import SurgeOn
from tests.support.cli import run_navarch
from tests.support.fleet_text import BASE, write_fleet_text

REPO = Path(__file__).resolve().parents[2]


def test_example_fleet_is_valid_and_defaulted():
    spec = load_fleet(REPO / "fleet.example.yaml")
    train = spec.pool("train")
    assert (train.min_nodes, train.target_nodes, train.max_nodes) == (2, 3, 5)
    assert train.health.drain_timeout_s == 1800
    assert train.places()[:2] == (("sim-1a", "sim-h100x8", False), ("sim-1b", "sim-h100x8", False))
    infer = spec.pool("infer")
    assert [p[2] for p in infer.places()] == [True, True, False, False]  # spot first


def test_defaults_come_from_the_schema(tmp_path):
    spec = load_fleet(write_fleet_text(tmp_path, BASE))
    pool = spec.pool("train")
    assert pool.health.unhealthy_after == 2
    assert pool.health.offline_after_s == 600
    assert pool.scheduler == "none" and pool.placed()[0].capacity == "on-demand"
    assert spec.store_url == f"file://{tmp_path}/.navarch/store"
    assert spec.safety.circuit_breaker_pct == 50


@pytest.mark.parametrize(
    ("mutation", "line", "key_path", "words"),
    [
        (lambda t: t + "    colour: red\n", 10, "pools.train.colour", "unknown key 'colour'"),
        (
            lambda t: t.replace("min: 1, target: 2, max: 3", "min: 3, target: 2, max: 1"),
            9,
            "pools.train.nodes",
            "min <= target <= max",
        ),
        (
            lambda t: t.replace("[sim-1a]", "sim-1a"),
            8,
            "pools.train.zones",
            "is not of type 'array'",
        ),
        (
            lambda t: t.replace("provider: sim", "provider: nope"),
            6,
            "pools.train.provider",
            "provider 'nope', which is not declared",
        ),
        (
            lambda t: t + "    health: {stale_after: soon}\n",
            10,
            "pools.train.health.stale_after",
            "does not match",
        ),
        (lambda t: t.replace("fleet: demo", "fleet: Demo_Fleet"), 1, "fleet", "does not match"),
    ],
)
def test_bad_fleet_names_file_line_and_key(tmp_path, mutation, line, key_path, words):
    path = write_fleet_text(tmp_path, mutation(BASE))
    with pytest.raises(ConfigError) as info:
        load_fleet(path)
    err = info.value
    assert err.file == str(path)
    assert err.line == line
    assert err.key_path == key_path
    assert words in err.message
    assert err.hint


def test_duplicate_key_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="duplicate key 'fleet'"):
        load_fleet(write_fleet_text(tmp_path, BASE + "fleet: other\n"))


def test_validate_cli_exits_1_and_writes_nothing(tmp_path):
    path = write_fleet_text(tmp_path, BASE.replace("max: 3", "max: 1"))
    proc = run_navarch(["validate", str(path)], cwd=tmp_path)
    assert proc.returncode == 1
    assert f"{path}:9: pools.train.nodes: nodes must satisfy" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fleet.yaml"]
    # apply on a bad file writes nothing either (no store, no secret, no machines)
    proc = run_navarch(["apply", str(path), "--auto-approve"], cwd=tmp_path)
    assert proc.returncode == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fleet.yaml"]


def test_secret_from_env(tmp_path, monkeypatch):
    spec = load_fleet(write_fleet_text(tmp_path, BASE + "secret: {env: FLEET_SECRET}\n"))
    monkeypatch.delenv("FLEET_SECRET", raising=False)
    with pytest.raises(ConfigError, match="FLEET_SECRET is empty or unset"):
        read_fleet_secret(spec)
    monkeypatch.setenv("FLEET_SECRET", "s3cret-value\n")
    assert read_fleet_secret(spec) == b"s3cret-value"


def test_spares_must_fit_under_max_naming_the_spares_key(tmp_path):
    text = BASE.replace("min: 1, target: 2, max: 3", "min: 1, target: 2, max: 3, spares: 2")
    path = write_fleet_text(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_fleet(path)
    err = info.value
    assert err.key_path == "pools.train.nodes.spares" and err.line == 9
    assert "target + spares <= max" in err.message and "target=2 spares=2 max=3" in err.message
    assert "raise max or lower spares" in err.hint


def test_spares_default_to_none_and_max_defaults_to_target_plus_spares(tmp_path):
    spec = load_fleet(write_fleet_text(tmp_path, BASE))
    assert spec.pool("train").spare_nodes == 0
    text = BASE.replace("min: 1, target: 2, max: 3", "target: 2, spares: 2")
    pool = load_fleet(write_fleet_text(tmp_path, text)).pool("train")
    assert (pool.target_nodes, pool.spare_nodes, pool.max_nodes) == (2, 2, 4)


def test_surge_on_any_is_the_default(tmp_path):
    spec = load_fleet(write_fleet_text(tmp_path, BASE))
    assert spec.pool("train").health.surge_on is SurgeOn.ANY

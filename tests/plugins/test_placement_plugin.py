"""A navarch.placement plugin orders a multi-placement pool's places; a broken
one is a one-line error naming it, exit 1, and nothing applied."""

from __future__ import annotations

from pathlib import Path

import pytest

from navarch.fleet.load import load_fleet
from tests.plugins.conftest import fake_distribution
from tests.support.cli import run_navarch

FLEET = """\
fleet: demo
store: file://store
secret: {file: fleet.secret}
providers:
  sim-a: {type: local, dir: a}
  sim-b: {type: local, dir: b}
pools:
  train:
    placement: PLUGIN
    placements:
      - {provider: sim-a, zones: [a-1], instance_types: [sim-h100x8]}
      - {provider: sim-b, zones: [b-1, b-2], instance_types: [sim-h100x8]}
    nodes: {target: 1}
"""

# Prefers sim-b, and within it the zone named last (scores: lower first).
PREFER_B = """
def score(places):
    return [0.0 if p["provider"] == "sim-b" and p["zone"] == "b-2" else
            1.0 if p["provider"] == "sim-b" else 2.0 for p in places]
"""

BROKEN = {
    "raises": "def score(places):\n    raise RuntimeError('price feed down')\n",
    "shape": "def score(places):\n    return {'sim-a': 1}\n",
    "short": "def score(places):\n    return [1.0]\n",
}


def _install(tmp_path: Path, name: str, source: str) -> Path:
    return fake_distribution(
        tmp_path / "site",
        f"navarch-{name}",
        f"[navarch.placement]\n{name} = navarch_{name}:score\n",
        {f"navarch_{name}": source},
    )


def test_scorer_orders_the_places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(_install(tmp_path, "preferb", PREFER_B)))
    (tmp_path / "fleet.yaml").write_text(FLEET.replace("PLUGIN", "preferb"))
    pool = load_fleet(tmp_path / "fleet.yaml").pool("train")
    assert [(p.provider, p.zone) for p in pool.launch_places()] == [
        ("sim-b", "b-2"),
        ("sim-b", "b-1"),
        ("sim-a", "a-1"),
    ]
    # In this process, which finds the plugin on sys.path as load_fleet did above.
    run = run_navarch(["apply", "fleet.yaml", "--auto-approve"], cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "provision demo-train-0001 on sim-b b-2/sim-h100x8" in run.stdout, run.stdout


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_broken_scorer_is_one_line_and_exit_1(tmp_path: Path, kind: str) -> None:
    name = f"bad{kind}"
    _install(tmp_path, name, BROKEN[kind])
    (tmp_path / "fleet.yaml").write_text(FLEET.replace("PLUGIN", name))
    run = run_navarch(
        ["apply", "fleet.yaml", "--auto-approve"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path / "site")},
        subprocess=True,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    lines = [ln for ln in run.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
    assert f"plugin {name!r}" in lines[0] and "navarch.placement" in lines[0], lines[0]
    assert not (tmp_path / "store" / "state").exists()
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()

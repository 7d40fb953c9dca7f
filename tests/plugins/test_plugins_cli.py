"""Extension points end to end: a provider plugin installed with pip converges a pool
through the CLI; a broken plugin stops the run with one line naming it and exit 1, before
anything is applied."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.plugins.conftest import fake_distribution
from tests.support.cli import run_navarch

INVENTORY = """\
machines:
  - {host: gpu-01, zone: rack-1, instance_type: 8xh100, address: 127.0.0.1}
  - {host: gpu-02, zone: rack-1, instance_type: 8xh100, address: 127.0.0.1}
  - {host: gpu-03, zone: rack-2, instance_type: 8xh100, address: 127.0.0.1}
  - {host: gpu-04, zone: rack-2, instance_type: 8xh100, address: 127.0.0.1}
"""


def write_fleet(tmp_path: Path, ptype: str, *, target: int = 3) -> Path:
    (tmp_path / "inventory.yaml").write_text(INVENTORY)
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(f"""\
fleet: metal
store: file://store
providers:
  rack:
    type: {ptype}
    inventory: inventory.yaml
pools:
  train:
    provider: rack
    instance_types: [8xh100]
    gpus_per_node: 8
    zones: [rack-1, rack-2]
    nodes: {{min: 0, target: {target}, max: 4}}
""")
    return fleet


def claims(tmp_path: Path) -> dict[str, dict[str, object]]:
    path = tmp_path / "inventory.yaml.claims.json"
    return json.loads(path.read_text()) if path.exists() else {}


def test_example_plugin_converges_a_pool(tmp_path: Path, baremetal_installed: Path) -> None:
    fleet = write_fleet(tmp_path, "baremetal")
    env = {"PYTHONPATH": str(baremetal_installed)}
    plan = run_navarch(
        ["plan", str(fleet), "--detailed-exitcode"], cwd=tmp_path, env=env, subprocess=True
    )
    assert plan.returncode == 2, plan.stdout + plan.stderr
    run = run_navarch(
        ["apply", str(fleet), "--auto-approve"], cwd=tmp_path, env=env, subprocess=True
    )
    assert run.returncode == 0, run.stdout + run.stderr
    got = claims(tmp_path)
    assert len(got) == 3
    # rack-1 first (declared zone order), then its fallback when rack-1 is full.
    assert {"gpu-01", "gpu-02"} <= got.keys()
    assert {c["tags"]["navarch-pool"] for c in got.values()} == {"train"}
    again = run_navarch(
        ["plan", str(fleet), "--detailed-exitcode"], cwd=tmp_path, env=env, subprocess=True
    )
    assert again.returncode == 0, again.stdout + again.stderr


BROKEN = {
    "import": ("navarch_broken_import:create", "import no_such_module_anywhere\n"),
    "shape": (
        "navarch_broken_shape:create",
        "def create(name, config, *, base_dir, fleet):\n    return {'not': 'a provider'}\n",
    ),
    "raises": (
        "navarch_broken_raises:create",
        "def create(name, config, *, base_dir, fleet):\n    raise KeyError('inventory')\n",
    ),
}


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_broken_plugin_is_one_line_naming_it_and_exit_1(tmp_path: Path, kind: str) -> None:
    value, source = BROKEN[kind]
    name = f"broken{kind}"
    site = fake_distribution(
        tmp_path / "site",
        f"navarch-broken-{kind}",
        f"[navarch.providers]\n{name} = {value}\n",
        {value.split(":")[0]: source},
    )
    fleet = write_fleet(tmp_path, name)
    run = run_navarch(
        ["apply", str(fleet), "--auto-approve"],
        cwd=tmp_path,
        env={"PYTHONPATH": f"{site}"},
        subprocess=True,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    lines = [ln for ln in run.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, run.stderr
    assert f"plugin {name!r}" in lines[0] and "navarch.providers" in lines[0]
    assert f"navarch-broken-{kind} 0.1" in lines[0]
    assert "Traceback" not in run.stderr
    # Never a half-applied run: no state was written, no machine claimed.
    assert not (tmp_path / "store" / "state").exists()
    assert claims(tmp_path) == {}


def test_unknown_type_names_the_entry_point_group(tmp_path: Path) -> None:
    fleet = write_fleet(tmp_path, "nosuchcloud")
    run = run_navarch(["plan", str(fleet)], cwd=tmp_path)  # no plugin to load: in this process
    assert run.returncode == 1, run.stdout + run.stderr
    assert "nosuchcloud" in run.stderr and "navarch.providers" in run.stderr

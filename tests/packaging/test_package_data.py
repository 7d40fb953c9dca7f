"""The schemas, templates and playbooks travel inside the navarch package: a wheel installed
with `pip install --target` (or --user) loads them from there, whatever the working
directory, and another distribution's top-level `schemas/` beside it cannot shadow them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: What the wheel is built from, copied so the build leaves nothing in the checkout.
_SOURCES = (
    "navarch",
    "schemas",
    "templates",
    "playbooks",
    "pyproject.toml",
    "README.md",
    "LICENSE",
)

# Run from an unrelated directory with only the target on the path before site-packages.
_LOAD_FROM_TARGET = """
import json, sys
import navarch
from navarch.fleet.schemas import load_schema, validator_for
from navarch.remote.playbook import load_playbook
from navarch.templating import environment

assert navarch.__file__.startswith(sys.argv[1]), navarch.__file__
fleet = load_schema("fleet.schema.json")
validator_for("fleet.schema.json")  # resolves the providers/*.schema.json $refs
playbook = load_playbook("slurm", "cordon")
template = environment(from_templates=True).get_template("agent.yaml.j2")
print(json.dumps({"fleet_id": fleet["$id"], "playbook": playbook.source, "template": template.filename}))
"""


def _backend_new_enough() -> bool:
    try:
        import setuptools
    except ImportError:
        return False
    return int(setuptools.__version__.split(".")[0]) >= 77


@pytest.mark.skipif(
    not _backend_new_enough(),
    reason="building the wheel needs setuptools>=77 (pip install -e .[dev])",
)
def test_a_target_install_loads_its_own_schemas_templates_and_playbooks(tmp_path) -> None:
    target, elsewhere = tmp_path / "target", tmp_path / "elsewhere"
    elsewhere.mkdir()
    source = tmp_path / "source"
    for name in _SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(
                REPO / name,
                source / name,
                symlinks=True,
                ignore=shutil.ignore_patterns("__pycache__"),
            )
        elif (REPO / name).is_file():
            shutil.copy2(REPO / name, source / name)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # One pip run builds the wheel from the copied sources and installs it, without the
    # bytecode of modules the run below never imports.
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", "install"]
        + ["--no-deps", "--no-build-isolation", "--no-index", "--no-compile"]
        + ["--target", str(target), str(source)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr[-2000:]
    assert list(target.glob("navarch-*.dist-info/WHEEL")), "pip installed no wheel"
    # Another distribution's top-level schemas/ beside navarch in the same target.
    (target / "schemas").mkdir(exist_ok=True)
    (target / "schemas" / "fleet.schema.json").write_text('{"$id": "someone-else"}')

    run = subprocess.run(
        [sys.executable, "-c", _LOAD_FROM_TARGET, str(target)],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": str(target)},
        cwd=elsewhere,
        timeout=120,
    )

    assert run.returncode == 0, run.stderr[-2000:]
    assert '"fleet_id": "https://navarch.dev/schemas/fleet.schema.json"' in run.stdout
    assert str(target / "navarch") in run.stdout  # the playbook and template came from there

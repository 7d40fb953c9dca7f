"""Fixtures for the extension points: the example plugin installed for real, broken ones
made discoverable through a dist-info directory on PYTHONPATH (importlib.metadata finds
both the way it finds any installed package). The tests run the CLI as a subprocess
(run_navarch(..., subprocess=True)): a plugin installed during the session, or on a
PYTHONPATH of its own, is found only by a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "plugins" / "navarch-baremetal"


@pytest.fixture(scope="session")
def baremetal_installed() -> Iterator[str]:
    """pip-install examples/plugins/navarch-baremetal (editable, no deps, no build
    isolation: nothing is fetched) into this interpreter; uninstall it afterwards unless it
    was installed before the session."""
    pip = [sys.executable, "-m", "pip"]
    before = subprocess.run([*pip, "show", "navarch-baremetal"], capture_output=True)
    done = subprocess.run(
        [*pip, "install", "-q", "--no-deps", "--no-build-isolation", "-e", str(EXAMPLE)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    yield "navarch-baremetal"
    if before.returncode != 0:
        subprocess.run([*pip, "uninstall", "-q", "-y", "navarch-baremetal"], capture_output=True)


def fake_distribution(site: Path, name: str, entry_points: str, modules: dict[str, str]) -> Path:
    """Write a minimal installed distribution under site (METADATA, entry_points.txt and
    the modules' source), to be put on PYTHONPATH. Returns site."""
    info = site / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(entry_points)
    for module, source in modules.items():
        (site / f"{module}.py").write_text(source)
    return site
